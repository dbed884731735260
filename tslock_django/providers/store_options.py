"""What each built-in store accepts in OPTIONS, checked without importing the store.

Django runs the system checks at the start of every management command, and tslock's
check of ``TSLOCK_PROVIDERS`` is among them. Building each provider to validate its
OPTIONS would import its module and what that imports (httpx, redis-py, a database
driver): milliseconds to tens of milliseconds on every command, for stores the command
may never touch. So the validation of the built-in providers lives here, on the
settings alone, and each provider's constructor calls the same code: the check and the
constructor cannot disagree. Like Django's own cache checks, nothing is built and no
connection is opened.

What needs the store's client library stays in the provider: whether that library is
installed, and redis-py's own reading of a Redis URL (its query parameters), are found
when the provider is built, at first use or by ``manage.py check --deploy``.

This module imports the standard library, Django modules a command has loaded before
the checks run, ``tslock_django.conf`` and :mod:`tslock_django.core.options`; keep it so.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.db import connections
from django.views.decorators.debug import sensitive_variables

from ..conf import DATABASE_BACKEND, DURABLE_OBJECT_BACKEND, KV_BACKEND, MEMORY_BACKEND, REDIS_BACKEND
from ..core.options import REQUIRED, option_error, resolve_options

#: What ``valid_bearer_token`` requires, worded for an option error (never with the value).
BEARER_TOKEN_RULE = (
    "must be printable ASCII without spaces, tabs or line breaks (it travels in an HTTP header); "
    "check for a trailing newline or a character pasted from a rich-text editor"
)


def valid_bearer_token(token: object) -> bool:
    """Whether ``token`` can travel as ``Authorization: Bearer <token>``: a non-empty
    string of printable ASCII without whitespace."""
    return (
        isinstance(token, str)
        and bool(token)
        and token.isascii()
        and token.isprintable()
        and not any(ch.isspace() for ch in token)
    )


@functools.cache
def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it; once per process
    (the Durable Object and KV providers both need httpx)."""
    return importlib.util.find_spec(module) is not None


class StoreOptions:
    """The OPTIONS one built-in store accepts: their defaults and the checks of their
    values. The provider class takes ``defaults`` as its ``default_options`` and calls
    :meth:`check` from its constructor; the system checks call :meth:`read`.

    Attributes:
        backend: the provider's dotted path (the ``BACKEND`` of a ``TSLOCK_PROVIDERS`` entry).
        provider: the provider's class name, as messages give it.
        defaults: every option and its default (``REQUIRED`` for those without one).
        library: the client library the provider imports and the package extra that
            installs it (``("redis", "redis")``), or ``None``.
    """

    def __init__(
        self,
        backend: str,
        defaults: dict[str, Any],
        check: Callable[[str, dict[str, Any]], None] | None = None,
        library: tuple[str, str] | None = None,
    ) -> None:
        self.backend = backend
        self.provider = backend.rpartition(".")[2]
        self.defaults: Mapping[str, Any] = MappingProxyType(defaults)
        self._check = check
        self.library = library

    def missing_library(self, alias: str) -> str | None:
        """What to install when the provider's client library is not installed, else
        ``None``. Looked up without importing it (``find_spec``, a fraction of a
        millisecond; importing httpx or redis-py takes tens)."""
        if self.library is None:
            return None
        module, extra = self.library
        if _installed(module):
            return None
        return (
            f"TSLOCK_PROVIDERS[{alias!r}]: {self.provider} needs {module}, which is not installed; "
            f"install it with: pip install 'tslock-django[{extra}]'"
        )

    @sensitive_variables("given", "options")
    def read(self, alias: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """What the provider's constructor would make of ``given`` (the OPTIONS, without
        ``clock``), without building the provider.

        Raises:
            InvalidLockProvider: with the constructor's message.
        """
        return self.check(alias, resolve_options(alias, self.provider, self.defaults, given))

    @sensitive_variables("options")
    def check(self, alias: str, options: dict[str, Any]) -> dict[str, Any]:
        """Check the values of resolved ``options``, normalising some in place (text
        from a settings URL where the default gives no type to read it as: Redis's
        ``timeout``); returns them.

        Raises:
            InvalidLockProvider: naming the option and what it should be, never its value
                when that may be a secret.
        """
        if self._check is not None:
            self._check(alias, options)
        return options


# -- the database ------------------------------------------------------------------

#: The vendors the database provider has SQL for (``connection.vendor``).
DATABASE_VENDORS = ("mysql", "postgresql", "sqlite")

#: The vendor of Django's own engines, known without importing them: the PostgreSQL
#: engine imports psycopg, about 50 ms, on a command that may never lock anything.
_ENGINE_VENDORS = {
    "django.db.backends.postgresql": "postgresql",
    "django.db.backends.mysql": "mysql",
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.oracle": "oracle",
    "django.contrib.gis.db.backends.postgis": "postgresql",
    "django.contrib.gis.db.backends.mysql": "mysql",
    "django.contrib.gis.db.backends.spatialite": "sqlite",
    "django.contrib.gis.db.backends.oracle": "oracle",
}


def database_vendor(using: str) -> str:
    """The vendor of database ``using`` (an alias in ``DATABASES``): from its ENGINE for
    Django's own engines; any other engine is imported and asked (no connection opens)."""
    vendor = _ENGINE_VENDORS.get(connections.settings[using]["ENGINE"])
    return vendor if vendor is not None else str(connections[using].vendor)


def _database(alias: str, options: dict[str, Any]) -> None:
    using = options["using"]
    if not isinstance(using, str) or using not in connections.settings:
        known = ", ".join(map(repr, connections.settings)) or "(none)"
        raise option_error(alias, "using", f"= {using!r} is not a database alias; DATABASES has {known}")
    if not isinstance(options["use_db_time"], bool):
        raise option_error(alias, "use_db_time", f"must be True or False, got {options['use_db_time']!r}")
    check_database_vendor(alias, using, database_vendor(using))


def check_database_vendor(alias: str, using: str, vendor: str) -> None:
    """Raise unless the database provider has SQL for ``vendor``, the vendor of database
    ``using``: as its ENGINE says (system checks), or as its connection object says
    (the provider's constructor, which has that object anyway).

    Raises:
        InvalidLockProvider: naming the vendor and the supported ones.
    """
    if vendor not in DATABASE_VENDORS:
        raise option_error(
            alias,
            "using",
            f"= {using!r} is a {vendor} database; the database provider supports "
            f"{', '.join(sorted(DATABASE_VENDORS))}",
        )


DATABASE = StoreOptions(DATABASE_BACKEND, {"using": "default", "use_db_time": True}, _database)

MEMORY = StoreOptions(MEMORY_BACKEND, {})


def _split_url(alias: str, url: str) -> SplitResult:
    """``url`` split into its parts, its port read. Malformed (an unclosed ``[`` of an
    IPv6 host, a host that does not normalise, a bad port) is an option error that never
    echoes the URL, which may hold a secret."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise option_error(
            alias, "url", "is not a valid URL (check the host and the brackets of an IPv6 address)"
        ) from None
    try:
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise option_error(
            alias, "url", "has an invalid port (a number from 0 to 65535 is expected)"
        ) from None
    return parts


def _utf8_bytes(alias: str, key: str, text: str) -> int:
    """The length of ``text`` in UTF-8, or an option error for text that has none (a
    lone surrogate)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise option_error(
            alias, key, "must be text that UTF-8 can encode (it holds a lone surrogate)"
        ) from None


# -- Cloudflare ------------------------------------------------------------------------

#: The longest storage key of the Durable Object Worker and of Workers KV, in UTF-8
#: bytes (the key prefix included).
CLOUDFLARE_MAX_KEY_BYTES = 512


@sensitive_variables("options", "token")
def _durable_object(alias: str, options: dict[str, Any]) -> None:
    url = options["url"]
    if not isinstance(url, str):
        raise option_error(alias, "url", f"must be a string URL, got {type(url).__name__}")
    parts = _split_url(alias, url)
    if parts.username is not None or parts.password is not None:
        # Not echoed: the part before "@" is probably the secret.
        raise option_error(
            alias,
            "url",
            "must not contain credentials (user:password@); put the secret in OPTIONS['token'] "
            "(or use a cloudflare-do://TOKEN@HOST/ settings URL, which does that for you)",
        )
    # The URL is never echoed below: a query string (?token=...) or a secret pasted in
    # the wrong place would end up in the error message and every log that shows it.
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise option_error(
            alias, "url", "must be an http(s) URL with a host, e.g. 'https://tslock.example.workers.dev'"
        )
    if parts.query or parts.fragment:
        raise option_error(
            alias, "url", "must not have a query string or fragment; other options go in OPTIONS"
        )
    token = options["token"]
    if not isinstance(token, str) or not token:
        raise option_error(alias, "token", "must be a non-empty string: the Worker's TSLOCK_TOKEN secret")
    if not valid_bearer_token(token):
        raise option_error(alias, "token", BEARER_TOKEN_RULE)
    prefix = options["key_prefix"]
    if not isinstance(prefix, str):
        raise option_error(alias, "key_prefix", f"must be a string, got {type(prefix).__name__}")
    if _utf8_bytes(alias, "key_prefix", prefix) >= CLOUDFLARE_MAX_KEY_BYTES:
        raise option_error(
            alias,
            "key_prefix",
            f"must be shorter than {CLOUDFLARE_MAX_KEY_BYTES} UTF-8 bytes (the key size limit)",
        )
    timeout = options["timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
        raise option_error(alias, "timeout", f"must be a number of seconds, got {timeout!r}")
    if timeout <= 0:
        raise option_error(alias, "timeout", f"must be greater than 0 seconds, got {timeout!r}")


DURABLE_OBJECT = StoreOptions(
    DURABLE_OBJECT_BACKEND,
    {"url": REQUIRED, "token": REQUIRED, "key_prefix": "", "timeout": 10.0},
    _durable_object,
    library=("httpx", "cloudflare"),
)

#: The root of Cloudflare's REST API, where Workers KV is reached by default.
KV_DEFAULT_BASE_URL = "https://api.cloudflare.com/client/v4"
#: Workers KV accepts one write per second per key and keep-alive writes every
#: ``lock_at_most_for / 2``; below this ``lock_at_most_for`` the extension can collide
#: with the previous write and be refused (HTTP 429).
KV_MIN_KEEP_ALIVE_AT_MOST_FOR = timedelta(seconds=2)


@sensitive_variables("options")
def _kv(alias: str, options: dict[str, Any]) -> None:
    if options["acknowledge_advisory_lock"] is not True:
        raise option_error(
            alias,
            "acknowledge_advisory_lock",
            f"must be True, got {options['acknowledge_advisory_lock']!r}. Workers KV is eventually "
            "consistent and has no compare-and-swap, so two processes can both acquire the same "
            "lock; set it to True only if an occasional overlapping run is acceptable, otherwise "
            "use tslock_django.providers.cloudflare_do.DurableObjectLockProvider (Durable Objects "
            "give one holder at a time)",
        )
    for key in ("account_id", "namespace_id", "api_token"):
        if not isinstance(options[key], str) or not options[key].strip():
            # Never echo the value: api_token is secret, the others may be pasted wrongly.
            raise option_error(alias, key, "must be a non-empty string from the Cloudflare dashboard")
    if not valid_bearer_token(options["api_token"]):
        # Checked here because the HTTP library would refuse the header only at the first
        # request, with an error that quotes the header, secret included.
        raise option_error(alias, "api_token", BEARER_TOKEN_RULE)
    if not isinstance(options["key_prefix"], str):
        raise option_error(
            alias, "key_prefix", f"must be a string, got {type(options['key_prefix']).__name__}"
        )
    if _utf8_bytes(alias, "key_prefix", options["key_prefix"]) >= CLOUDFLARE_MAX_KEY_BYTES:
        raise option_error(
            alias, "key_prefix", f"must be shorter than {CLOUDFLARE_MAX_KEY_BYTES} UTF-8 bytes"
        )
    if not isinstance(options["confirm_write"], bool):
        raise option_error(alias, "confirm_write", f"must be True or False, got {options['confirm_write']!r}")
    base_url = options["base_url"]
    if not isinstance(base_url, str) or not base_url.startswith(("https://", "http://")):
        raise option_error(alias, "base_url", f"must be an http(s) URL such as {KV_DEFAULT_BASE_URL!r}")
    timeout = options["timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 300:
        raise option_error(
            alias, "timeout", f"must be a number of seconds between 0 and 300, got {timeout!r}"
        )
    budget = options["list_request_budget"]
    if isinstance(budget, bool) or not isinstance(budget, int) or not 2 <= budget <= 1200:
        # Two at least: one list page and one value read, so every page gets further.
        raise option_error(
            alias,
            "list_request_budget",
            f"must be a whole number of REST requests per listing page from 2 to 1200 (one list "
            f"request and one value read at least), got {budget!r}",
        )
    seconds = options["list_cache_seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 300:
        raise option_error(
            alias,
            "list_cache_seconds",
            f"must be a number of seconds from 0 (no cache) to 300, got {seconds!r}",
        )
    requests = options["admin_request_budget"]
    if isinstance(requests, bool) or not isinstance(requests, int) or not 1 <= requests <= 1200:
        raise option_error(
            alias,
            "admin_request_budget",
            f"must be a whole number of REST requests from 1 to 1200 that listings for admin page "
            f"views may spend per admin_budget_seconds, got {requests!r}",
        )
    window = options["admin_budget_seconds"]
    if (
        isinstance(window, bool)
        or not isinstance(window, (int, float))
        or not math.isfinite(window)
        or not 1 <= window <= 3600
    ):
        raise option_error(
            alias,
            "admin_budget_seconds",
            f"must be a number of seconds from 1 to 3600 (the window of admin_request_budget), "
            f"got {window!r}",
        )


#: Listings for admin page views may spend this many REST requests per
#: ``KV_ADMIN_BUDGET_SECONDS`` in one process: a tenth of the API token's 1,200 requests
#: per 5 minutes, so browsing the admin leaves the jobs' lock calls the rest.
KV_ADMIN_REQUEST_BUDGET = 120
KV_ADMIN_BUDGET_SECONDS = 300.0

KV = StoreOptions(
    KV_BACKEND,
    {
        "account_id": REQUIRED,
        "namespace_id": REQUIRED,
        "api_token": REQUIRED,
        "acknowledge_advisory_lock": False,
        "key_prefix": "tslock:",
        "confirm_write": True,
        "base_url": KV_DEFAULT_BASE_URL,
        "timeout": 10.0,
        "list_request_budget": 10,
        "list_cache_seconds": 5.0,
        "admin_request_budget": KV_ADMIN_REQUEST_BUDGET,
        "admin_budget_seconds": KV_ADMIN_BUDGET_SECONDS,
    },
    _kv,
    library=("httpx", "cloudflare"),
)


# -- Redis -------------------------------------------------------------------------

#: The cache backends whose redis-py client a Redis provider can share.
DJANGO_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"
DJANGO_REDIS_PACKAGE_CACHE = "django_redis.cache.RedisCache"


@sensitive_variables("options", "url")
def _redis(alias: str, options: dict[str, Any]) -> None:
    url, cache = options["url"], options["cache"]
    if (url is None) == (cache is None):
        raise option_error(
            alias,
            "url",
            "or OPTIONS['cache'] is needed, exactly one of them: a redis:// or rediss:// URL, or the "
            "alias of a CACHES entry that uses Django's RedisCache or django-redis",
        )
    if url is not None:
        _redis_url(alias, url)
    else:
        _redis_cache(alias, cache)
    prefix = options["key_prefix"]
    if not isinstance(prefix, str):
        raise option_error(alias, "key_prefix", f"must be a string, got {type(prefix).__name__}")
    _utf8_bytes(alias, "key_prefix", prefix)  # keys are sent as UTF-8
    timeout = options["timeout"]
    if timeout is None:
        return
    if cache is not None:
        raise option_error(
            alias,
            "timeout",
            "applies to OPTIONS['url'] only; with OPTIONS['cache'] the cache's own "
            "connection settings (socket_timeout in its OPTIONS) apply",
        )
    if isinstance(timeout, str):
        try:
            timeout = float(timeout)
        except ValueError:
            raise option_error(alias, "timeout", f"must be a number of seconds, got {timeout!r}") from None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
        raise option_error(alias, "timeout", f"must be a number of seconds, got {timeout!r}")
    if timeout <= 0:
        raise option_error(alias, "timeout", f"must be greater than 0 seconds, got {timeout!r}")
    options["timeout"] = float(timeout)


@sensitive_variables("url", "parts")
def _redis_url(alias: str, url: object) -> None:
    # The URL is never echoed: it holds the password.
    if not isinstance(url, str):
        raise option_error(alias, "url", f"must be a string URL, got {type(url).__name__}")
    parts = _split_url(alias, url)
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise option_error(
            alias,
            "url",
            "must be a redis:// or rediss:// URL with a host, e.g. 'redis://:PASSWORD@HOST:6379/0'",
        )
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise option_error(alias, "url", "has a path that is not a database number (e.g. /0)")


def _redis_cache(alias: str, cache: object) -> None:
    caches = getattr(settings, "CACHES", {})
    if not isinstance(cache, str) or cache not in caches:
        known = ", ".join(map(repr, caches)) or "(none)"
        raise option_error(
            alias, "cache", f"must name a CACHES alias; {cache!r} is not one (configured: {known})"
        )
    backend = caches[cache].get("BACKEND")
    if backend not in (DJANGO_REDIS_CACHE, DJANGO_REDIS_PACKAGE_CACHE):
        raise option_error(
            alias,
            "cache",
            f"names CACHES[{cache!r}] whose BACKEND is {backend!r}; a Redis provider can share the "
            f"connection of {DJANGO_REDIS_CACHE!r} or {DJANGO_REDIS_PACKAGE_CACHE!r} only",
        )


REDIS = StoreOptions(
    REDIS_BACKEND,
    {"url": None, "cache": None, "key_prefix": "tslock:", "timeout": None},
    _redis,
    library=("redis", "redis"),
)

#: Each built-in store by its ``BACKEND`` path.
BUILT_IN: dict[str, StoreOptions] = {
    spec.backend: spec for spec in (DATABASE, MEMORY, DURABLE_OBJECT, KV, REDIS)
}
