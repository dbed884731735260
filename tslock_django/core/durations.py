"""The duration grammar shared by settings, decorators and the command line.

Accepted: ``timedelta``; ``int``/``float`` seconds; a string of seconds (``"30"``,
``"0.5"``); unit strings made of one or more ``<number><unit>`` parts with units
``ms``, ``s``, ``m``, ``h``, ``d`` (``"500ms"``, ``"30s"``, ``"1h30m"``); and ISO-8601
durations with days and time parts (``"PT5M"``, ``"P1DT2H"``, ``"PT0.5S"``).
Negative, infinite and unparseable values raise ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

DurationLike = timedelta | int | float | str

GRAMMAR_HINT = (
    'use seconds (30 or "30"), units ("500ms", "30s", "5m", "2h", "1d", "1h30m") or ISO-8601 ("PT5M")'
)

_LONGEST = "the longest duration Python can hold is 999999999 days"

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Order matters: "ms" must be tried before "m".
_UNIT_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
_ISO = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)
_SECONDS = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(value: DurationLike, *, field: str = "duration") -> timedelta:
    """Turn ``value`` into a non-negative ``timedelta``.

    Args:
        value: any form of the grammar above.
        field: the name used in the error message (e.g. ``"lock_at_most_for"``).

    Raises:
        ValueError: for a negative, infinite or unparseable value; the message names
            ``field`` and shows the accepted forms.
    """
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        # bool is an int subclass; True seconds is never what someone meant.
        raise ValueError(f"{field} must be a duration, got a bool ({value!r}); {GRAMMAR_HINT}")
    elif isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{field} must be a finite duration, got {value!r}; {GRAMMAR_HINT}")
        try:
            result = timedelta(seconds=value) if value >= 0 else -timedelta(seconds=-value)
        except OverflowError:
            raise ValueError(f"{field} is too long ({value!r}); {_LONGEST}") from None
    elif isinstance(value, str):
        try:
            result = _parse_text(value, field)
        except OverflowError:
            raise ValueError(f"{field} is too long ({value!r}); {_LONGEST}") from None
    else:
        raise ValueError(f"{field} must be a duration, got {type(value).__name__} {value!r}; {GRAMMAR_HINT}")
    if result < timedelta(0):
        raise ValueError(f"{field} must not be negative, got {value!r}; {GRAMMAR_HINT}")
    return result


def _parse_text(value: str, field: str) -> timedelta:
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return timedelta(seconds=float(text))
    if text.startswith("-"):
        raise ValueError(f"{field} must not be negative, got {value!r}; {GRAMMAR_HINT}")
    if _UNITS.fullmatch(text):
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _UNIT_PART.findall(text))
        return timedelta(seconds=seconds)
    iso = _ISO.fullmatch(text.upper())
    # "P" and "PT" match the pattern with no parts at all: not a duration.
    if iso and any(iso.groupdict().values()) and not text.upper().endswith("T"):
        parts = {k: float(v) for k, v in iso.groupdict().items() if v}
        return timedelta(
            days=parts.get("d", 0),
            hours=parts.get("h", 0),
            minutes=parts.get("m", 0),
            seconds=parts.get("s", 0),
        )
    raise ValueError(f"{field}: cannot read {value!r} as a duration; {GRAMMAR_HINT}")


def to_milliseconds(duration: timedelta) -> int:
    """Whole milliseconds, rounded down (the wire unit of the Cloudflare stores)."""
    return duration // timedelta(milliseconds=1)
