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
length, or a cut secret would no longer be recognised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

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
    forms.discard("")
    return forms


def _lower_percent(text: str) -> str:
    # %2F and %2f are the same byte; servers differ in which they write.
    parts = text.split("%")
    return parts[0] + "".join("%" + part[:2].lower() + part[2:] for part in parts[1:])


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
