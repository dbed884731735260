"""Settings: the handler over ``TSLOCK_PROVIDERS`` (used as ``tslock_django.providers``)
and the provider URL form.

Settings are read lazily (on first use of an alias), never at import, and the built
providers are dropped when ``TSLOCK_PROVIDERS`` or ``DATABASES`` changes, so tests can
change them: on Django's ``setting_changed`` signal, and on the next lookup when either
setting is another object than the providers were built from. The signal lives in
``django.test``, whose import would cost every command's start more than all of tslock
does, so tslock never imports it: it listens once something else has (a test runner
always has, before the first test).
"""

from __future__ import annotations

import difflib
import re
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from django.conf import settings
from django.utils.module_loading import import_string
from django.views.decorators.debug import sensitive_variables

from .exceptions import InvalidLockProvider

if TYPE_CHECKING:
    from .core.clock import ClockProvider
    from .core.provider import LockProvider

SETTING = "TSLOCK_PROVIDERS"

DATABASE_BACKEND = "tslock_django.providers.database.DatabaseLockProvider"
MEMORY_BACKEND = "tslock_django.providers.memory.MemoryLockProvider"
DURABLE_OBJECT_BACKEND = "tslock_django.providers.cloudflare_do.DurableObjectLockProvider"
KV_BACKEND = "tslock_django.providers.cloudflare_kv.KVLockProvider"
REDIS_BACKEND = "tslock_django.providers.redis.RedisLockProvider"

#: What an unset TSLOCK_PROVIDERS means: the embedded default on DATABASES["default"].
DEFAULT_PROVIDERS: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": DATABASE_BACKEND, "OPTIONS": {"using": "default"}},
}

_ENTRY_KEYS = {"BACKEND", "OPTIONS"}
RESERVED_OPTION_NAMES = frozenset({"alias", "transport"})


@sensitive_variables("configured", "entry", "options", "result")
def provider_settings() -> dict[str, dict[str, Any]]:
    """``TSLOCK_PROVIDERS`` as validated dicts (the default when unset).

    Raises:
        InvalidLockProvider: the setting is not a dict of ``{"BACKEND", "OPTIONS"}`` dicts.
    """
    configured = getattr(settings, SETTING, None)
    if configured is None:
        return {alias: dict(entry) for alias, entry in DEFAULT_PROVIDERS.items()}
    if not isinstance(configured, Mapping):
        raise InvalidLockProvider(
            f"{SETTING} must be a dict of alias -> {{'BACKEND': ..., 'OPTIONS': {{...}}}}, "
            f"got {type(configured).__name__}"
        )
    result = {}
    for alias, entry in configured.items():
        where = f"{SETTING}[{alias!r}]"
        if not isinstance(entry, Mapping):
            raise InvalidLockProvider(
                f"{where} must be a dict with 'BACKEND' and optional 'OPTIONS', got {type(entry).__name__}"
            )
        extra = sorted(set(entry) - _ENTRY_KEYS)
        if extra:
            raise InvalidLockProvider(
                f"{where} has unknown key(s) {', '.join(map(repr, extra))}; "
                "an entry takes 'BACKEND' and 'OPTIONS' (provider settings go inside OPTIONS)"
            )
        backend = entry.get("BACKEND")
        if not isinstance(backend, str) or not backend:
            raise InvalidLockProvider(f"{where} needs 'BACKEND', a dotted path such as {DATABASE_BACKEND!r}")
        options = entry.get("OPTIONS", {})
        if not isinstance(options, Mapping):
            raise InvalidLockProvider(f"{where}['OPTIONS'] must be a dict, got {type(options).__name__}")
        result[str(alias)] = {"BACKEND": backend, "OPTIONS": dict(options)}
    return result


def backend_class(alias: str, backend: str) -> type[LockProvider]:
    """Import a BACKEND path and check it is a ``LockProvider``."""
    from .core.provider import LockProvider

    try:
        cls = import_string(backend)
    except ImportError as err:
        raise InvalidLockProvider(
            f"{SETTING}[{alias!r}]['BACKEND'] = {backend!r} could not be imported ({err}); "
            f"use a dotted path to a LockProvider class, e.g. {DATABASE_BACKEND!r}"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, LockProvider)):
        raise InvalidLockProvider(
            f"{SETTING}[{alias!r}]['BACKEND'] = {backend!r} is not a LockProvider subclass"
        )
    return cls


@sensitive_variables("given", "options")
def provider_arguments(
    alias: str, provider: str, accepted: Mapping[str, Any], given: Mapping[str, Any]
) -> tuple[ClockProvider | None, dict[str, Any]]:
    """What a provider's constructor takes for an entry's OPTIONS ``given``: the
    ``clock=`` argument (``None`` when not given) and the ``**options``.

    Args:
        provider: the provider's class name, for the message about a reserved name.
        accepted: its ``default_options``, for the same message.

    Raises:
        InvalidLockProvider: a reserved name among the OPTIONS, or a clock that is not a
            ``ClockProvider``.
    """
    options = dict(given)
    # alias and transport are constructor arguments, not OPTIONS: as OPTIONS they would
    # clash with the alias or bypass the provider's own HTTP client.
    reserved = [k for k in options if not isinstance(k, str) or k in RESERVED_OPTION_NAMES]
    if reserved:
        raise InvalidLockProvider(
            f"{SETTING}[{alias!r}]['OPTIONS'] cannot contain {', '.join(map(repr, reserved))}: "
            f"OPTIONS are the provider's own settings ({provider} takes "
            f"{', '.join(sorted(accepted)) or 'none'}, and 'clock')"
        )
    # Every provider accepts a clock (tests configure a MutableClock this way); it must
    # be one, or expiry would be decided by whatever object was put there.
    clock = options.pop("clock", None)
    if clock is None:
        return None, options
    from .core.clock import ClockProvider

    if not isinstance(clock, ClockProvider):
        raise InvalidLockProvider(
            f"{SETTING}[{alias!r}]['OPTIONS']['clock'] must be a ClockProvider (an object with "
            "now() returning an aware datetime, e.g. tslock_django.MutableClock()), "
            f"got {type(clock).__name__}"
        )
    return clock, options


class ProviderHandler:
    """``providers["alias"]`` -> the configured :class:`LockProvider`, built once.

    Instances are shared by all threads (providers are thread-safe: the database
    provider uses Django's per-thread connections, the HTTP providers one pooled client).
    :meth:`reset` closes and forgets them; a lock still held through a forgotten
    instance can still be released, because ``close()`` leaves a provider usable.
    """

    def __init__(self) -> None:
        self._instances: dict[str, LockProvider] = {}
        self._mutex = threading.Lock()
        # The settings objects the instances were built from (held, so that "is" cannot
        # be fooled by a new object at a freed one's address).
        self._built_from: tuple[Any, Any] | None = None
        self._listening = False

    def _listen(self) -> None:
        from django.test.signals import setting_changed

        self._listening = True
        setting_changed.connect(_on_setting_changed, dispatch_uid="tslock_django.conf.reset")

    def __getitem__(self, alias: str) -> LockProvider:
        current = (getattr(settings, SETTING, None), getattr(settings, "DATABASES", None))
        built_from = self._built_from
        if built_from is None or current[0] is not built_from[0] or current[1] is not built_from[1]:
            if built_from is not None:
                self.reset()
            self._built_from = current
        if not self._listening and "django.test.signals" in sys.modules:
            self._listen()
        instance = self._instances.get(alias)
        if instance is not None:
            return instance
        with self._mutex:
            instance = self._instances.get(alias)
            if instance is None:
                instance = self.create(alias)
                self._instances[alias] = instance
            return instance

    def __contains__(self, alias: object) -> bool:
        return alias in provider_settings()

    def aliases(self) -> list[str]:
        """The configured aliases, in settings order."""
        return list(provider_settings())

    @sensitive_variables("configured", "entry", "options")
    def create(self, alias: str) -> LockProvider:
        """A new, uncached provider for ``alias``.

        Raises:
            InvalidLockProvider: unknown alias, bad BACKEND or bad OPTIONS.
        """
        configured = provider_settings()
        if alias not in configured:
            known = ", ".join(map(repr, configured)) or "(none)"
            raise InvalidLockProvider(f"no lock provider {alias!r} in {SETTING}; configured aliases: {known}")
        entry = configured[alias]
        unreadable = invalid_url_error(entry)
        if unreadable is not None:
            raise InvalidLockProvider(f"{SETTING}[{alias!r}]: {unreadable}")
        cls = backend_class(alias, entry["BACKEND"])
        clock, options = provider_arguments(alias, cls.__name__, cls.default_options, entry["OPTIONS"])
        return cls(alias, clock=clock, **options)

    def all(self) -> list[LockProvider]:
        """Every configured provider (built on demand)."""
        return [self[alias] for alias in self.aliases()]

    def reset(self) -> None:
        """Close and forget every built provider (settings changed)."""
        with self._mutex:
            instances, self._instances = self._instances, {}
        for instance in instances.values():
            instance.close()


#: The single handler; use it through ``tslock_django.providers``.
providers = ProviderHandler()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in (SETTING, "DATABASES"):
        providers.reset()


# -- the URL form -------------------------------------------------------------------

SCHEMES = ("db", "memory", "cloudflare-do", "cloudflare-do+http", "cloudflare-kv", "redis", "rediss")
#: The forms a provider URL takes, for every message about a URL that is not one.
URL_FORMS = (
    "db://ALIAS, memory://, cloudflare-do://TOKEN@HOST/ (cloudflare-do+http:// for a local runtime), "
    "cloudflare-kv://ACCOUNT_ID:API_TOKEN@NAMESPACE_ID?acknowledge_advisory_lock=true or "
    "redis://[:PASSWORD@]HOST[:PORT][/DB] (rediss:// for TLS)"
)
#: A scheme longer than this is not quoted in an error: it is more likely a secret
#: written where the scheme goes (``TOKEN:x@host://``) than a mistyped scheme.
_QUOTABLE_SCHEME = 20
_SCHEME_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+._-]*")

#: The BACKEND of an entry made from a provider URL that could not be read (see
#: :func:`invalid_url_entry`). It names no class: the handler refuses to build it with
#: the entry's message, and the system checks report it as tslock.E008.
INVALID_URL_BACKEND = "tslock_django.conf.INVALID_URL"


def invalid_url_entry(message: str) -> dict[str, Any]:
    """A ``TSLOCK_PROVIDERS`` entry standing for a provider URL that could not be read.

    Settings modules are imported before anything can report an error well: an error
    raised there is a long traceback from ``settings.py``. This entry defers the error
    instead: every management command stops at its system checks with one line
    (tslock.E008), and a process that runs no checks (a web server) gets the same message
    as an ``InvalidLockProvider`` when it first uses the alias. ``message`` must not hold
    the URL, which may hold a secret.
    """
    return {"BACKEND": INVALID_URL_BACKEND, "OPTIONS": {"error": message}}


def invalid_url_error(entry: Mapping[str, Any]) -> str | None:
    """The message of an entry made by :func:`invalid_url_entry`, ``None`` for any other."""
    if entry.get("BACKEND") != INVALID_URL_BACKEND:
        return None
    options = entry.get("OPTIONS")
    error = options.get("error") if isinstance(options, Mapping) else None
    return str(error) if error else "the provider URL could not be read"


#: Query parameters of a redis:// URL that are the provider's OPTIONS; the others stay
#: in the URL for redis-py (e.g. ``ssl_cert_reqs``).
REDIS_URL_OPTIONS = ("key_prefix", "timeout")


@sensitive_variables("url")
def parse_provider_url(url: str) -> dict[str, Any]:
    """Turn a provider URL into a ``TSLOCK_PROVIDERS`` entry.

    Forms:
        ``db://`` or ``db://<database alias>``: the database provider;
        ``memory://``: the in-process provider (tests, single-process tools);
        ``cloudflare-do://<token>@<host>[:port][/path]``: the Durable Object Worker over
        https (``cloudflare-do+http://`` for a local runtime);
        ``cloudflare-kv://<account_id>:<api_token>@<namespace_id>?acknowledge_advisory_lock=true``;
        ``redis://[[user]:password@]host[:port][/db]`` (``rediss://`` for TLS): the Redis
        provider; ``key_prefix`` and ``timeout`` in the query string are its OPTIONS, the
        rest of the query string stays in the URL for redis-py.

    Query parameters become OPTIONS (``?key_prefix=jobs:&timeout=5``); the provider
    validates them. Percent-encode reserved characters in tokens.

    Raises:
        InvalidLockProvider: an empty URL, an unknown scheme, a missing part or one that
            cannot be read (a port that is not a number). The message never repeats the
            URL, which may hold a secret, and names the forms a URL takes.
    """
    if not isinstance(url, str):
        raise InvalidLockProvider(
            f"a lock provider URL is a string, got {type(url).__name__}; use one of {URL_FORMS}"
        )
    if not url.strip():
        raise InvalidLockProvider(f"the lock provider URL is empty; use one of {URL_FORMS}")
    if "://" not in url:
        raise InvalidLockProvider(
            f"not a lock provider URL (no '://' after the scheme); use one of {URL_FORMS}"
        )
    try:
        return _parse_provider_url(url)
    except ValueError as err:
        # urllib's own words quote the part it could not read (a port, a host), which may
        # sit next to a secret: say which part, never what it holds.
        part = "port (a number from 0 to 65535)" if "port" in str(err).lower() else "host"
        raise InvalidLockProvider(f"the URL's {part} cannot be read; use one of {URL_FORMS}") from None


@sensitive_variables("url", "parts", "options", "ours", "rest")
def _parse_provider_url(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    options: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    if scheme == "db":
        if parts.netloc and "@" in parts.netloc:
            raise InvalidLockProvider("db:// takes a database alias (db://default), not credentials")
        options.setdefault("using", unquote(parts.netloc) or "default")
        return {"BACKEND": DATABASE_BACKEND, "OPTIONS": options}
    if scheme == "memory":
        return {"BACKEND": MEMORY_BACKEND, "OPTIONS": options}
    if scheme in ("cloudflare-do", "cloudflare-do+http"):
        if not parts.username or not parts.hostname:
            raise InvalidLockProvider(
                f"{scheme}:// needs the Worker's bearer token and host: {scheme}://TOKEN@HOST/"
            )
        http = "http" if scheme.endswith("+http") else "https"
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        options.setdefault("url", f"{http}://{host}{parts.path.rstrip('/')}")
        options.setdefault("token", unquote(parts.username))
        return {"BACKEND": DURABLE_OBJECT_BACKEND, "OPTIONS": options}
    if scheme == "cloudflare-kv":
        if not parts.username or not parts.password or not parts.hostname:
            raise InvalidLockProvider(
                "cloudflare-kv:// needs the account id, API token and namespace id: "
                "cloudflare-kv://ACCOUNT_ID:API_TOKEN@NAMESPACE_ID?acknowledge_advisory_lock=true"
            )
        options.setdefault("account_id", unquote(parts.username))
        options.setdefault("api_token", unquote(parts.password))
        # urlsplit lower-cases hostname; namespace ids are hex, but keep the original case.
        options.setdefault("namespace_id", unquote(parts.netloc.rsplit("@", 1)[1]))
        return {"BACKEND": KV_BACKEND, "OPTIONS": options}
    if scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise InvalidLockProvider(f"{scheme}:// needs a host: {scheme}://[:PASSWORD@]HOST[:PORT][/DB]")
        ours = {k: v for k, v in options.items() if k in REDIS_URL_OPTIONS}
        rest = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in ours]
        url = parts._replace(query=urlencode(rest), fragment="").geturl()
        return {"BACKEND": REDIS_BACKEND, "OPTIONS": {**ours, "url": url}}
    written = url.split("://", 1)[0]
    raise InvalidLockProvider(
        f"unknown lock provider URL scheme {_shown_scheme(written)}; use one of {URL_FORMS}"
    )


def _shown_scheme(written: str) -> str:
    """What was written before ``://``, quoted when it reads as a scheme (a word of at
    most 20 characters), with the closest known scheme suggested. Anything else
    (``TOKEN:x@host://``) may be a secret in the wrong place and is not repeated."""
    close = difflib.get_close_matches(written.lower().replace("_", "-"), SCHEMES, n=1)
    hint = f" (did you mean {close[0] + '://'!r}?)" if close else ""
    if not written:
        return "(nothing before '://')"
    if len(written) > _QUOTABLE_SCHEME or not _SCHEME_WORD.fullmatch(written):
        return f"(not repeated: {len(written)} characters that do not read as a scheme){hint}"
    return f"{written!r}{hint}"
