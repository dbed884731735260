"""``TSLOCK_MONITORS`` read and checked.

``TSLOCK_MONITORS = {"healthchecks": {"url": "https://hc.example.com", "ping_key": "..."},
"sentry": {}}``: either or both. Read lazily, at a run's start, and kept until the
setting is replaced (``override_settings`` or another object in its place).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

SETTING = "TSLOCK_MONITORS"
#: The monitors tslock knows, and the OPTIONS each takes.
KNOWN = {"healthchecks": ("url", "ping_key"), "sentry": ()}
_SHAPE = (
    "{'healthchecks': {'url': 'https://hc.example.com', 'ping_key': '<the project's ping key>'}, "
    "'sentry': {}} (either or both)"
)


#: What a Healthchecks ping key is made of (its URLs match it as a Django ``slug``).
_PING_KEY = re.compile(r"[A-Za-z0-9_-]+")


class InvalidMonitors(ImproperlyConfigured):
    """``TSLOCK_MONITORS`` is malformed; the message says what is wrong and what is right."""


@dataclass(frozen=True)
class Healthchecks:
    """Where healthchecks pings go: ``<url>/ping/<ping_key>/<slug>...``."""

    #: The instance's root, without a trailing slash (``https://healthchecks.io``).
    url: str
    #: The project's ping key: a secret (anyone holding it can ping the project's checks).
    ping_key: str = field(repr=False)


@dataclass(frozen=True)
class Monitors:
    """The monitors configured: healthchecks' options, and whether Sentry is on."""

    healthchecks: Healthchecks | None
    sentry: bool


def read(value: object) -> Monitors | None:
    """``TSLOCK_MONITORS`` read: ``None`` when it is unset or empty.

    Raises:
        InvalidMonitors: not a dict of known monitors, an unknown or missing option, a
            url that is not ``http(s)://host[/path]``, or an empty ping key.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidMonitors(f"{SETTING} must be a dict such as {_SHAPE}, got {type(value).__name__}")
    unknown = [name for name in value if name not in KNOWN]
    if unknown:
        raise InvalidMonitors(
            f"{SETTING} names unknown monitors {sorted(map(str, unknown))}; the monitors are "
            + ", ".join(repr(name) for name in KNOWN)
        )
    for name, options in value.items():
        if not isinstance(options, Mapping):
            raise InvalidMonitors(
                f"{SETTING}[{name!r}] must be a dict of its options, got {type(options).__name__}; "
                f"e.g. {_SHAPE}"
            )
        extra = sorted(str(key) for key in options if key not in KNOWN[name])
        if extra:
            accepted = ", ".join(repr(key) for key in KNOWN[name]) or "none"
            raise InvalidMonitors(f"{SETTING}[{name!r}] has unknown options {extra}; it takes {accepted}")
    if not value:
        return None
    found = value.get("healthchecks")
    return Monitors(
        healthchecks=_healthchecks(found) if found is not None else None,
        sentry="sentry" in value,
    )


def _quoted(url: object) -> str:
    """``url`` as an error may quote it: without a user name, password, query or fragment,
    which may hold secrets (a URL that cannot be read at all is described, not quoted)."""
    if not isinstance(url, str):
        return f"a {type(url).__name__}"
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "a text that is not a URL"
    hidden = " (its credentials, query and fragment not shown)" if parts.netloc != host + port else ""
    if parts.query or parts.fragment:
        hidden = " (its credentials, query and fragment not shown)"
    return repr(f"{parts.scheme}://{host}{port}{parts.path}") + hidden


def _healthchecks(options: Mapping[str, object]) -> Healthchecks:
    where = f"{SETTING}['healthchecks']"
    url, key = options.get("url"), options.get("ping_key")
    if not isinstance(url, str) or not url.strip():
        raise InvalidMonitors(
            f"{where}['url'] must be the root of a Healthchecks instance, such as "
            f"'https://healthchecks.io' or 'https://hc.example.com', got {_quoted(url)}"
        )
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        raise InvalidMonitors(f"{where}['url'] {_quoted(url)} is not a URL ({err})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise InvalidMonitors(
            f"{where}['url'] {_quoted(url)} is not an http(s) URL of a Healthchecks instance's root "
            "(no query, no fragment); e.g. 'https://healthchecks.io'; pings go to "
            "<url>/ping/<ping_key>/<slug>"
        )
    if parts.username or parts.password:
        raise InvalidMonitors(
            f"{where}['url'] carries credentials; the ping key is the only secret a ping needs: "
            "give it as 'ping_key'"
        )
    if not isinstance(key, str) or not _PING_KEY.fullmatch(key.strip()):
        # The key itself is never shown: it is a secret.
        shown = type(key).__name__ if not isinstance(key, str) else "an empty text"
        if isinstance(key, str) and key.strip():
            shown = "a text with other characters"
        raise InvalidMonitors(
            f"{where}['ping_key'] must be the project's ping key (Settings > Ping key in Healthchecks: "
            f"letters, digits, '-' and '_'), got {shown}"
        )
    return Healthchecks(url=url.strip().rstrip("/"), ping_key=key.strip())


# (the setting's object it was read from, what it read)
_cached: tuple[object, Monitors | None] | None = None


def configured() -> Monitors | None:
    """``TSLOCK_MONITORS`` of the current settings, read once per setting object.

    Raises:
        InvalidMonitors: see :func:`read`.
    """
    global _cached
    from django.conf import settings

    value = getattr(settings, SETTING, None)
    cached = _cached
    if cached is not None and cached[0] is value:
        return cached[1]
    found = read(value)
    _cached = (value, found)
    return found
