"""Scrubbing secrets out of text: what a store echoed back, and what the journal keeps
and shows.

:func:`scrub` replaces every form of the secrets it is given (as sent, JSON-escaped,
``repr``-escaped, percent-encoded), because a store or a proxy in front of it can echo a
request back in an error; every error path of the HTTP and Redis providers builds its
message through it, before cutting the text to length. :func:`hide_secrets` is the one
scrubber of the journal's text, where it is stored and wherever it is shown: it masks every
secret the project's settings configure (:func:`configured_secrets`) and the values that
look like secrets whatever they are (:func:`hide_secret_values`), since a job's own
exception can carry anything.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import cache
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


#: A path segment of a channel's URL at least this long is a secret on its own (a Slack
#: hook's last segment has 24 characters); a shorter one is more likely a word
#: ("services", "hooks") that masking would take out of every text.
SECRET_SEGMENT_CHARS = 16


def url_secrets(url: str) -> list[str]:
    """What a webhook URL may hold as a credential: its password (as
    :func:`url_passwords` finds it) and whole userinfo, a user name long enough to be a
    token (:data:`SECRET_SEGMENT_CHARS`: ``https://TOKEN@host``; a short one is a word
    such as "tslock"), its path (a Slack, Discord or Teams hook is its path), each path
    segment as long, its query (a token parameter) and each query value, and its
    fragment; each as written and decoded. What is left, ``scheme://host:port``, is what
    messages may show (:func:`url_origin`). ``[]`` for a text that is not a URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = urlsplit(url.replace("[", "").replace("]", ""))
    if not parts.scheme or not parts.netloc:
        return []
    found = url_passwords(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        user = userinfo.partition(":")[0]
        found.append(userinfo)
        found += [form for form in (user, unquote(user)) if len(form) >= SECRET_SEGMENT_CHARS]
    if parts.path not in ("", "/"):
        found += [parts.path, unquote(parts.path)]
        found += [segment for segment in parts.path.split("/") if len(segment) >= SECRET_SEGMENT_CHARS]
    if parts.query:
        found += [parts.query, unquote_plus(parts.query)]
        for pair in parts.query.split("&"):
            value = pair.partition("=")[2]
            found += [value, unquote_plus(value)]
    if parts.fragment:
        found += [parts.fragment, unquote(parts.fragment)]
    return [secret for secret in dict.fromkeys(found) if secret]


def url_origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what a message about a webhook shows of it
    (the rest may be a credential, see :func:`url_secrets`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unreadable URL)"
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}" if parts.scheme and host else "(an unreadable URL)"


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


# -- the journal's scrubber: every secret the project configures, and secret-looking values

#: A configured secret shorter than this is not searched for in free text: a password of
#: a few characters ("admin", "1234") is also an ordinary word or number, and every
#: occurrence of it in a message would be masked. Such a password is still masked where
#: a pattern of :func:`hide_secret_values` finds it (a URL's userinfo, ``password=``).
MIN_SECRET_CHARS = 6

#: OPTIONS of ``TSLOCK_PROVIDERS`` whose values are secrets (``token``, ``api_token``,
#: a third-party provider's ``password`` or ``secret_key``); not ``key_prefix``.
#: (A pattern's text: compiled on first use, which most runs never reach.)
SECRET_OPTION_NAMES = r"(?i)token|secret|pass|api_?key|auth|credential|signature|private"

#: The settings :func:`configured_secrets` reads; a change of any of them resets it.
SECRET_SETTINGS = (
    "TSLOCK_PROVIDERS",
    "DATABASES",
    "CACHES",
    "SECRET_KEY",
    "SECRET_KEY_FALLBACKS",
    "TSLOCK_ALERTS",
    "EMAIL_HOST_PASSWORD",
    "TSLOCK_MONITORS",
)

# (the settings' objects it was computed from, the secrets, every form of them longest first)
_known: tuple[tuple[object, ...], tuple[str, ...], tuple[str, ...]] | None = None
_listening = False


def provider_secrets(configured: object, caches: object, hidden: re.Pattern[str]) -> list[str]:
    """The secrets a ``TSLOCK_PROVIDERS`` setting (``configured``) holds: its OPTIONS
    values whose names ``hidden`` matches or that the backend declares secret (its
    ``secret_options``), the passwords of the URLs among its OPTIONS, and those of the
    ``CACHES`` entries its ``cache`` options name."""
    found: list[str] = []
    if not isinstance(configured, Mapping):
        return found
    for entry in configured.values():
        options = entry.get("OPTIONS") if isinstance(entry, Mapping) else None
        if not isinstance(options, Mapping):
            continue
        found += _option_secrets(entry.get("BACKEND"), options, hidden, url_passwords)
        cache = options.get("cache")
        if isinstance(cache, str) and isinstance(caches, Mapping) and isinstance(caches.get(cache), Mapping):
            found += cache_passwords(caches[cache])
    return found


def channel_secrets(configured: object, hidden: re.Pattern[str]) -> list[str]:
    """The secrets a ``TSLOCK_ALERTS`` setting (``configured``) holds: in each channel's
    OPTIONS, the values whose names ``hidden`` matches (a webhook's ``secret``) or that
    the channel class declares secret (its ``secret_options``), and the secret parts of
    every URL among them (:func:`url_secrets`: a Slack hook's path, a token in a query).
    A malformed setting yields what can be read of it (the system check reports the rest)."""
    found: list[str] = []
    channels = configured.get("channels") if isinstance(configured, Mapping) else None
    if not isinstance(channels, (list, tuple)):
        return found
    for entry in channels:
        options = entry.get("OPTIONS") if isinstance(entry, Mapping) else None
        if not isinstance(options, Mapping):
            continue
        found += _option_secrets(entry.get("BACKEND"), options, hidden, url_secrets)
    return found


def _option_secrets(
    backend: object, options: Mapping[Any, Any], hidden: re.Pattern[str], of_url: Callable[[str], list[str]]
) -> list[str]:
    """The secrets among one entry's OPTIONS: the values whose names ``hidden`` matches or
    that ``backend`` declares secret, and what ``of_url`` finds in each URL among them."""
    found: list[str] = []
    declared = _declared_secret_options(backend)
    for key, value in options.items():
        if not isinstance(value, str) or not value:
            continue
        if isinstance(key, str) and (key in declared or hidden.search(key)):
            found.append(value)
        if "://" in value:
            found += of_url(value)
    return found


def _declared_secret_options(backend: object) -> frozenset[str]:
    """The ``secret_options`` a provider or channel class declares; none for a backend
    that cannot be imported (the settings' check reports that, not this)."""
    if not isinstance(backend, str):
        return frozenset()
    from django.utils.module_loading import import_string

    try:
        declared = getattr(import_string(backend), "secret_options", ())
    except Exception:  # noqa: BLE001 - a broken setting is not this function's to report
        return frozenset()
    return frozenset(name for name in declared if isinstance(name, str))


def _database_passwords(entry: Mapping[str, Any]) -> list[str]:
    # PASSWORD, and any OPTIONS text under a name that says it is one (MySQL's "passwd").
    found: list[str] = []
    if isinstance(entry.get("PASSWORD"), str):
        found.append(entry["PASSWORD"])
    options = entry.get("OPTIONS")
    if isinstance(options, Mapping):
        for key, value in options.items():
            if isinstance(key, str) and "pass" in key.lower() and isinstance(value, str):
                found.append(value)
    return found


def monitor_secrets(monitors: object) -> list[str]:
    """The secrets of a ``TSLOCK_MONITORS`` setting: healthchecks' ``ping_key`` (anyone
    holding it can ping the project's checks) and any password in its ``url``."""
    healthchecks = monitors.get("healthchecks") if isinstance(monitors, Mapping) else None
    if not isinstance(healthchecks, Mapping):
        return []
    key, url = healthchecks.get("ping_key"), healthchecks.get("url")
    return ([key] if isinstance(key, str) else []) + (url_passwords(url) if isinstance(url, str) else [])


def _collect(
    providers: object,
    databases: object,
    caches: object,
    key: object,
    fallbacks: object,
    alerts: object,
    email_password: object,
    monitors: object,
) -> list[str]:
    hidden = re.compile(SECRET_OPTION_NAMES)
    found = provider_secrets(providers, caches, hidden) + channel_secrets(alerts, hidden)
    if isinstance(email_password, str):
        found.append(email_password)
    if isinstance(databases, Mapping):
        for entry in databases.values():
            if isinstance(entry, Mapping):
                found += _database_passwords(entry)
    if isinstance(caches, Mapping):
        for entry in caches.values():
            if isinstance(entry, Mapping):
                found += cache_passwords(entry)
    found.append(key if isinstance(key, str) else "")
    if isinstance(fallbacks, (list, tuple)):
        found += [fallback for fallback in fallbacks if isinstance(fallback, str)]
    return found + monitor_secrets(monitors)


def configured_secrets() -> tuple[str, ...]:
    """Every secret the project's settings configure, of at least
    :data:`MIN_SECRET_CHARS` characters: those of ``TSLOCK_PROVIDERS`` (see
    :func:`provider_secrets`), those of ``TSLOCK_ALERTS`` (see :func:`channel_secrets`),
    every ``DATABASES`` password, the passwords of every ``CACHES`` entry
    (:func:`cache_passwords`), ``EMAIL_HOST_PASSWORD``, ``SECRET_KEY``,
    ``SECRET_KEY_FALLBACKS`` and the ping key of ``TSLOCK_MONITORS`` (:func:`monitor_secrets`).

    Computed on first use and kept until one of :data:`SECRET_SETTINGS` changes (Django's
    ``setting_changed``, or another object in its place), so a job's path pays for it once.
    """
    return _known_now()[1]


def _setting(name: str) -> object:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        return getattr(settings, name, None)
    except ImproperlyConfigured:  # an empty SECRET_KEY: nothing to hide there
        return None


def _known_now() -> tuple[tuple[object, ...], tuple[str, ...], tuple[str, ...]]:
    global _known
    current = tuple(_setting(name) for name in SECRET_SETTINGS)
    known = _known
    if known is None or any(a is not b for a, b in zip(known[0], current, strict=True)):
        _listen()
        secrets = tuple(s for s in dict.fromkeys(_collect(*current)) if len(s) >= MIN_SECRET_CHARS)
        forms: set[str] = set()
        for secret in secrets:
            forms |= secret_forms(secret)
        _known = known = (current, secrets, tuple(sorted(forms, key=len, reverse=True)))
    return known


def _listen() -> None:
    # django.test's signal, only once something (a test runner) has imported it: its
    # import would cost every command's start more than this module does.
    global _listening
    if _listening or "django.test.signals" not in sys.modules:
        return
    from django.test.signals import setting_changed

    setting_changed.connect(_on_setting_changed, dispatch_uid="tslock_django.core.scrubbing.reset")
    _listening = True


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    global _known
    if setting in SECRET_SETTINGS:
        _known = None


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], Any], ...]:
    """The patterns of secret-looking values and what each becomes (compiled once, on
    first use: most runs never fail)."""
    # A quoted value (JSON's "...", repr's '...', or JSON inside JSON: \"...\"), or an
    # unquoted one up to a space or a separator; a credential's scheme is kept.
    value = (
        r"""(?P<value>\\"(?:(?!\\").)*\\"|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
        r"""|(?:(?:bearer|basic|token)\s+)?[^\s,;&'"}\])]+)"""
    )
    keys = (
        r"[\w.\-]*?(?:password|passwd|passphrase|pwd|token|secret"
        r"|api[_\-]?key|access[_\-]?key|private[_\-]?key)"
    )
    pair = re.compile(
        rf"""(?P<head>(?<![\w.\-])(?P<quote>\\?["']?)(?P<key>{keys})(?P=quote)\s*[:=]\s*){value}""",
        re.IGNORECASE,
    )
    # A password runs to the last "@" before a space: one written unencoded can hold "/"
    # and "@" (a URL that then has "@" in its path is masked up to there: more, not less).
    url_password = re.compile(
        r"""(?P<head>\b[a-z][a-z0-9+.\-]*://[^\s/?#@:'"]*:)(?P<password>[^\s?#'"<>]+)@""", re.IGNORECASE
    )
    authorization = re.compile(
        r"""(?P<head>\b(?:proxy-)?authorization\\?["']?\s*[:=]\s*\\?["']?)"""
        r"""(?P<scheme>(?:bearer|basic|token|digest|negotiate|apikey)\s+)?(?P<value>[^\s"',;\\)\]}]+)""",
        re.IGNORECASE,
    )
    credential = re.compile(
        r"\b(?P<scheme>bearer|basic)(?P<space>\s+)(?P<value>[\w\-.~+/]{6,}=*)", re.IGNORECASE
    )

    def masked_pair(found: re.Match[str]) -> str:
        if found["key"].lower().replace("-", "_").endswith("fencing_token"):
            return found[0]  # a fencing token is a number anyone may see, not a credential
        shown = found["value"]
        if shown.startswith('\\"'):
            return f'{found["head"]}\\"{MASK}\\"'
        if shown[0] in "\"'":
            return f"{found['head']}{shown[0]}{MASK}{shown[0]}"
        scheme = re.match(r"(?:bearer|basic|token)\s+", shown, re.IGNORECASE)
        return found["head"] + (scheme[0] if scheme else "") + MASK

    def masked_credential(found: re.Match[str]) -> str:
        token = found["value"]
        # "Basic authentication" is prose; a credential mixes cases, digits or symbols.
        prose = token.isalpha() and (token.islower() or token.isupper() or token.istitle())
        looks_secret = not prose
        return f"{found['scheme']}{found['space']}{MASK}" if looks_secret else found[0]

    return (
        (url_password, rf"\g<head>{MASK}@"),
        (authorization, lambda found: found["head"] + (found["scheme"] or "") + MASK),
        (credential, masked_credential),
        (pair, masked_pair),
    )


def hide_secret_values(text: str) -> str:
    """``text`` with the values that look like secrets, whatever they are, replaced by
    :data:`MASK`: a URL's userinfo password (``scheme://user:***@host``), an
    ``Authorization`` header's value (``Authorization: Bearer ***``, ``Basic``,
    ``Token``...), a bare ``Bearer``/``Basic`` credential, and the value of a
    ``password``, ``passwd``, ``pwd``, ``passphrase``, ``token`` (``access_token``...),
    ``secret`` (``client_secret``...), ``api_key``/``apikey``, ``access_key`` or
    ``private_key`` as ``key=value``, ``key: value`` or a quoted ``"key": "value"``
    (case-insensitive; a quoted value keeps its quotes)."""
    for pattern, replacement in _patterns():
        text = pattern.sub(replacement, text)
    return text


def hide_secrets(text: str) -> str:
    """``text`` as the journal keeps and shows it: every form of every configured secret
    (:func:`configured_secrets`) and every secret-looking value
    (:func:`hide_secret_values`) replaced by :data:`MASK`; the rest, such as an
    exception's class and the words around a secret, is kept. Scrub before cutting to
    length."""
    if not text:
        return text
    for form in _known_now()[2]:
        if form in text:
            text = text.replace(form, MASK)
    return hide_secret_values(text)
