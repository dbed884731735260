"""Durations as people read them: one form for the admin, the command line and messages.

``format_remaining`` is the time left on a lock ("1h 59m", "overdue 3s"), rounded to the
two largest units; ``format_duration`` is an exact duration written in the grammar of
:mod:`tslock_django.core.durations` ("30d", "1h30m", "1.5s"), so what a message shows
can be typed back.
"""

from __future__ import annotations

from datetime import timedelta

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def format_remaining(remaining: timedelta | None) -> str:
    """``"4m 12s"``, ``"1h 59m"``, ``"overdue 3s"`` or ``"-"`` (``None``: not known).

    Two units are enough to read a deadline; the rest is dropped, not rounded, so a
    lock never looks further from its end than it is.
    """
    if remaining is None:
        return "-"
    seconds = int(remaining.total_seconds())
    prefix = "" if seconds > 0 else "overdue "
    seconds = abs(seconds)
    parts: list[str] = []
    for unit, size in _UNITS:
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return prefix + " ".join(parts)


def format_duration(duration: timedelta) -> str:
    """``duration`` exactly, in the unit grammar: ``"30d"``, ``"1h30m"``, ``"0s"``,
    ``"2m0.5s"``. Negative durations keep their sign (``"-5m"``)."""
    if duration < timedelta(0):
        return "-" + format_duration(-duration)
    whole = duration.days * 86400 + duration.seconds
    parts: list[str] = []
    for unit, size in _UNITS[:-1]:
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    if duration.microseconds:
        parts.append(f"{whole}.{duration.microseconds:06d}".rstrip("0") + "s")
    elif whole or not parts:
        parts.append(f"{whole}s")
    return "".join(parts)
