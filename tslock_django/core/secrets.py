"""Scrubbing secrets out of text that came back from a store.

A store, or whatever stands in front of it (a proxy, a hostile server at the configured
URL), can echo a request back in an error: the ``Authorization`` header in a JSON error
message, a status line that the HTTP library quotes, a lock token inside a JSON object
that was turned into a string. The echo rarely keeps the secret as it was sent: JSON
escapes ``\\`` and ``"``, Python's ``repr`` escapes ``\\`` and the quote, a URL
percent-encodes. :func:`scrub` replaces every such form of every secret it is given, so
the text can go into a ``LockProviderError`` that the Locks page, ``tslock list`` and
logs show.

Every error path of the HTTP providers (:mod:`tslock_django.providers.http`) and the
Redis provider builds its message through :func:`scrub`; scrub before cutting a text to
length, or a cut secret would no longer be recognised. :func:`url_passwords` and
:func:`cache_passwords` find the passwords a configuration holds, for the Redis provider
and for :mod:`tslock_django.reporting` alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

#: What a secret becomes.
MASK = "***"


def secret_forms(secret: str) -> set[str]:
    """The ways ``secret`` can appear in an echo: as is, JSON-escaped (ASCII-only or
    not, once or twice: JSON inside JSON), ``repr``-escaped with either quote, and
    percent-encoded (upper- and lowercase hex, ``+`` for spaces or not)."""
    forms = {secret}
    for ascii_only in (True, False):
        once = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        forms.add(once)
        forms.add(json.dumps(once, ensure_ascii=ascii_only)[1:-1])
    forms.add(repr(secret)[1:-1])
    # repr picks the quote that needs no escaping; a dict's repr or a hand-made one can
    # use the other, which escapes the quote instead.
    forms.add(secret.replace("\\", "\\\\").replace("'", "\\'"))
    forms.add(secret.replace("\\", "\\\\").replace('"', '\\"'))
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms.add(encoded)
        forms.add(_lower_percent(encoded))
    # The repr of the bytes sent (a packed command in a frame's locals): non-ASCII as \xNN.
    forms.add(repr(secret.encode("utf-8", "surrogatepass"))[2:-1])
    forms.discard("")
    return forms


def url_passwords(url: str) -> list[str]:
    """The passwords a connection URL carries, each as written and decoded: the
    userinfo's (``scheme://user:PASSWORD@host``) and ``password`` query parameters
    (redis-py reads one). Both forms are secrets: the decoded one is what a client
    sends (and a server may echo), the written one what a setting or a frame shows,
    and a needless escape (``%53`` for ``S``) makes it no form :func:`secret_forms`
    derives from the decoded one. ``[]`` for a text that is not a URL."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket: take the userinfo by hand
        parts = urlsplit(url.replace("[", "").replace("]", ""))
    found: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        password = userinfo.partition(":")[2]
        found += [password, unquote(password)]
    for pair in parts.query.split("&"):
        key, equals, value = pair.partition("=")
        if equals and unquote_plus(key).lower() == "password":
            found += [value, unquote_plus(value)]  # in a query string "+" is a space
    return [secret for secret in dict.fromkeys(found) if secret]


def _lower_percent(text: str) -> str:
    # %2F and %2f are the same byte; servers differ in which they write.
    parts = text.split("%")
    return parts[0] + "".join("%" + part[:2].lower() + part[2:] for part in parts[1:])


def cache_passwords(cache: Mapping[str, Any]) -> list[str]:
    """The passwords of a ``CACHES`` entry of a Redis cache (Django's ``RedisCache`` or
    django-redis): those of each server URL in its ``LOCATION`` (a list, or one text
    with commas between URLs) and every text in its ``OPTIONS``, at any depth, under a
    key that says it is one (``password``, ``PASSWORD``, ``sentinel_password``...)."""
    found: list[str] = []
    location = cache.get("LOCATION")
    urls = location.split(",") if isinstance(location, str) else location
    if isinstance(urls, (list, tuple)):
        for url in urls:
            if isinstance(url, str):
                found += url_passwords(url.strip())

    def walk(options: object) -> None:
        if not isinstance(options, Mapping):
            return
        for key, value in options.items():
            if isinstance(value, str) and isinstance(key, str) and "pass" in key.lower():
                found.append(value)
            walk(value)

    walk(cache.get("OPTIONS"))
    return [secret for secret in dict.fromkeys(found) if secret]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form (:func:`secret_forms`) of every non-empty secret replaced
    by :data:`MASK`. The longest forms go first, so that a form containing another is
    replaced whole."""
    forms: set[str] = set()
    for secret in secrets:
        if secret:
            forms |= secret_forms(secret)
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (scrub first)."""
    return text if len(text) <= limit else text[:limit] + "..."
