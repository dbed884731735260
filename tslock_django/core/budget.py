"""Request allowances for listings read on behalf of admin page views.

A store reached through a rate-limited API (Workers KV: 1,200 requests per 5 minutes
per API token) shares that limit between the jobs' lock calls and whoever browses the
admin. A provider can keep a :class:`RequestAllowance` for the listings it reads for
admin views, so that no amount of browsing takes more than a fixed share of the limit.

The admin marks its reads with :func:`admin_view_listing`; a provider asks
:func:`current_admin_view` whether the listing it is reading is for an admin view and,
when its allowance refuses a request, reports it with :meth:`AdminViewListing.spent`
so that the page can say so. Lock, unlock, extend and force release never look here.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .clock import ClockProvider


class RequestAllowance:
    """At most ``requests`` requests in any ``seconds``-long span, in this process.

    A sliding window: each granted request is remembered until it is ``seconds`` old,
    so the bound holds over every span, also across the edge of a fixed window (where a
    fixed counter would let twice as many through). Thread-safe: one allowance is shared
    by every thread of the process that reads for admin views.

    Args:
        requests: how many requests the window holds (at least 1).
        seconds: the window's length.
        clock: where time comes from (the provider's, so tests move it).
    """

    def __init__(self, requests: int, seconds: float, clock: ClockProvider) -> None:
        if requests < 1 or seconds <= 0:
            raise ValueError("a request allowance needs at least one request and a window over 0 seconds")
        self.requests = requests
        self.window = timedelta(seconds=seconds)
        self.clock = clock
        self._granted: deque[datetime] = deque()
        self._mutex = threading.Lock()

    def _forget_old(self, now: datetime) -> None:
        while self._granted and self._granted[0] + self.window <= now:
            self._granted.popleft()

    def take(self) -> bool:
        """Spend one request: ``True`` if the window had room, ``False`` (nothing spent)
        if not."""
        return self.take_or_renewal() is None

    def take_or_renewal(self) -> datetime | None:
        """Spend one request and return ``None``; or, when the window is full, spend
        nothing and return when it will have room (one step, so the answer fits the
        refusal even while other threads spend)."""
        now = self.clock.now()
        with self._mutex:
            self._forget_old(now)
            if len(self._granted) >= self.requests:
                return self._granted[0] + self.window
            self._granted.append(now)
            return None

    def renews_at(self) -> datetime | None:
        """When the next request will be granted; ``None`` when one would be now."""
        now = self.clock.now()
        with self._mutex:
            self._forget_old(now)
            if len(self._granted) < self.requests:
                return None
            return self._granted[0] + self.window

    def describe(self) -> str:
        """``"120 requests per 5 minutes"``."""
        seconds = self.window.total_seconds()
        if seconds % 60 == 0:
            minutes = int(seconds // 60)
            span = "minute" if minutes == 1 else f"{minutes} minutes"
        else:
            span = f"{seconds:g} seconds"
        return f"{self.requests} request{'' if self.requests == 1 else 's'} per {span}"


@dataclass(frozen=True)
class BudgetSpent:
    """A provider whose allowance for admin views refused a request of this view.

    Attributes:
        alias: the provider.
        budget: what ran out, in words (e.g. "the Workers KV listing budget for admin
            views (120 requests per 5 minutes, OPTIONS admin_request_budget)").
        until: when the allowance grants requests again (aware).
    """

    alias: str
    budget: str
    until: datetime


@dataclass
class AdminViewListing:
    """What the providers reported while reading the listing of one admin page view."""

    spent_budgets: dict[str, BudgetSpent] = field(default_factory=dict)

    def spent(self, alias: str, budget: str, until: datetime) -> None:
        """Report that ``alias``'s allowance for admin views refused a request."""
        self.spent_budgets.setdefault(alias, BudgetSpent(alias, budget, until))


_admin_view: ContextVar[AdminViewListing | None] = ContextVar("tslock_admin_view_listing", default=None)


@contextmanager
def admin_view_listing() -> Iterator[AdminViewListing]:
    """Read listings inside this block on behalf of an admin page view (per thread or
    task: a context variable, never state on a shared provider)."""
    view = AdminViewListing()
    reset = _admin_view.set(view)
    try:
        yield view
    finally:
        _admin_view.reset(reset)


def current_admin_view() -> AdminViewListing | None:
    """The admin page view the current listing is read for, or ``None``."""
    return _admin_view.get()


__all__ = [
    "AdminViewListing",
    "BudgetSpent",
    "RequestAllowance",
    "admin_view_listing",
    "current_admin_view",
]
