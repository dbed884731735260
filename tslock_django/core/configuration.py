"""``LockConfiguration``: what to lock and for how long."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .durations import DurationLike, parse_duration

#: The longest duration accepted: a century. Longer values are never what a job meant,
#: and "now + d" must stay inside every store's date range (a database's timestamp
#: column, a JavaScript Date, the Worker's own limit).
MAX_DURATION = timedelta(days=36500)

#: Names are free text, but control characters break log lines, admin pages and
#: HTTP headers in surprising ways, so they are refused everywhere.
_FORBIDDEN = {chr(c) for c in range(0x20)} | {"\x7f"}


@dataclass(frozen=True, init=False)
class LockConfiguration:
    """An immutable request for a lock.

    Args:
        name: the lock name; non-empty, no control characters. Each provider also
            checks that its storage key for the name fits its limit.
        lock_at_most_for: how long the lock is held if the holder dies without
            releasing it: the safety net. Must be positive; any form of the duration
            grammar (``"10m"``, ``600``, ``"PT10M"``, ``timedelta``).
        lock_at_least_for: the minimum time the lock stays held, even after an early
            release (protects against clock skew between nodes and very short jobs).
            Must not exceed ``lock_at_most_for``.

    Raises:
        ValueError: naming the field that is wrong and what would be right.
    """

    name: str
    lock_at_most_for: timedelta
    lock_at_least_for: timedelta

    def __init__(
        self,
        name: str,
        lock_at_most_for: DurationLike,
        lock_at_least_for: DurationLike = 0,
    ) -> None:
        validate_name(name)
        at_most = parse_duration(lock_at_most_for, field="lock_at_most_for")
        at_least = parse_duration(lock_at_least_for, field="lock_at_least_for")
        if at_most <= timedelta(0):
            raise ValueError(
                f"lock_at_most_for must be positive, got {lock_at_most_for!r}: it is how long "
                'a dead holder keeps the lock, e.g. "10m"'
            )
        for field, value in (("lock_at_most_for", at_most), ("lock_at_least_for", at_least)):
            if value > MAX_DURATION:
                raise ValueError(
                    f"{field} must be at most {MAX_DURATION.days} days (a century), got {value}; "
                    "use keep_alive for jobs that run longer than lock_at_most_for"
                )
        if at_least > at_most:
            raise ValueError(
                f"lock_at_least_for ({at_least}) must not be longer than lock_at_most_for "
                f"({at_most}) for lock {name!r}: raise lock_at_most_for or lower lock_at_least_for"
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "lock_at_most_for", at_most)
        object.__setattr__(self, "lock_at_least_for", at_least)


def validate_name(name: object) -> str:
    """Check a lock name independent of any store; returns it.

    Raises:
        ValueError: for a non-string, an empty name or one with control characters.
    """
    if not isinstance(name, str):
        raise ValueError(f"lock name must be a string, got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError('lock name must not be empty; give the job a name, e.g. "send-invoices"')
    if not _FORBIDDEN.isdisjoint(name):
        raise ValueError(
            f"lock name {name!r} contains a control character; use printable text "
            "(letters, digits, punctuation, spaces and any Unicode letters are fine)"
        )
    if max(name) >= "\ud800" and any("\ud800" <= ch <= "\udfff" for ch in name):
        raise ValueError(f"lock name {name!r} contains a lone surrogate; it cannot be stored as UTF-8")
    return name
