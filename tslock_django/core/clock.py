"""Clocks. Providers that decide expiry on the caller's side read time from a
``ClockProvider`` so that tests can move time instead of sleeping."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Protocol, runtime_checkable

from .durations import parse_duration


@runtime_checkable
class ClockProvider(Protocol):
    """Anything with ``now() -> aware UTC datetime``."""

    def now(self) -> datetime: ...


class SystemClock:
    """The machine's wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def __repr__(self) -> str:
        return "SystemClock()"


class MutableClock:
    """A clock that only moves when told to; for tests.

    Args:
        start: the initial time (aware); defaults to the current wall-clock time.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError(
                "MutableClock(start=...) needs an aware datetime, e.g. datetime.now(timezone.utc)"
            )
        self._now = start or datetime.now(timezone.utc)
        self._mutex = threading.Lock()

    def now(self) -> datetime:
        with self._mutex:
            return self._now

    def advance(self, by: timedelta | float | int | str) -> datetime:
        """Move forward by a duration (any form ``parse_duration`` accepts); returns the new time."""
        step = parse_duration(by, field="by")
        with self._mutex:
            self._now += step
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (aware)."""
        if when.tzinfo is None:
            raise ValueError("MutableClock.set() needs an aware datetime")
        with self._mutex:
            self._now = when

    def __repr__(self) -> str:
        return f"MutableClock({self._now.isoformat()})"
