"""The errors tslock raises.

Runtime failures derive from :class:`TslockError`; configuration mistakes are
:class:`InvalidLockProvider`, a subclass of Django's ``ImproperlyConfigured`` that is
deliberately *not* a ``TslockError``: a broken setting should stop start-up, not be
caught by code that handles a busy store.

"A lock is held by someone else" is never an exception of the store layer: providers
return ``None`` for it. :class:`LockHeld` exists only for callers that asked to be told
by an exception (the ``lock()`` context manager, ``on_locked="fail"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from .core.records import LockRecord


class TslockError(Exception):
    """Base of every runtime error raised by tslock_django."""


class LockProviderError(TslockError):
    """The store failed: network, HTTP status, database error or a malformed record.

    It is never raised for "held by someone else". The message names the provider
    alias and what went wrong and never contains a secret.

    Attributes:
        alias: the provider alias from ``TSLOCK_PROVIDERS``.
        status_code: the HTTP status when the store answered one, else ``None``.
        __cause__: the underlying exception, when there was one.
    """

    def __init__(self, message: str, *, alias: str = "", status_code: int | None = None) -> None:
        prefix = f"lock provider {alias!r}: " if alias else ""
        super().__init__(prefix + message)
        self.alias = alias
        self.status_code = status_code


class LockRateLimited(LockProviderError):
    """The store refused the request for its rate limit (Workers KV answers HTTP 429)."""


class LockHeld(TslockError):
    """Raised only where a caller asked for an exception when the lock is held.

    Attributes:
        name: the lock name.
        holder: the holder's record when the store told us, else ``None``.
    """

    def __init__(self, name: str, holder: LockRecord | None = None) -> None:
        self.name = name
        self.holder = holder
        super().__init__(describe_holder(name, holder))


class JobPaused(LockHeld):
    """The job is paused (``tslock pause NAME`` or the Runs page's action): its run
    skipped without taking the lock. A :class:`LockHeld`, so every door treats it as
    any skip (``on_locked`` applies); ``holder`` is ``None``.

    Attributes:
        name: the lock name.
    """

    def __init__(self, name: str) -> None:
        # LockHeld's message names a holder; a paused job has none.
        TslockError.__init__(self, f"job {name!r} is paused; tslock resume {name} lets it run again")
        self.name = name
        self.holder = None


class StaleLockHandle(TslockError):
    """A ``SimpleLock`` was used after ``unlock()`` or after a successful ``extend()``.

    Handles are single-use: ``extend()`` returns a new handle that replaces the old one.
    """


class InvalidCursor(ValueError):
    """A listing cursor that this site did not give out for this query and provider:
    altered, truncated, signed with another ``SECRET_KEY``, or from another query."""


class UnsupportedQuery(ValueError):
    """The store cannot answer this listing query without reading every record (for
    example Workers KV asked to sort by ``lock_until``); ``provider.listing`` says what
    it can answer."""


class InvalidLockProvider(ImproperlyConfigured):
    """``TSLOCK_PROVIDERS`` (or a provider URL, or a provider's OPTIONS) is wrong."""


def describe_holder(name: str, holder: LockRecord | None) -> str:
    """One human line saying who holds ``name`` and until when."""
    if holder is None:
        return f"lock {name!r} is held by another process"
    who = holder.locked_by or "an unnamed holder"
    from .core.times import format_time

    return f"lock {name!r} is held by {who} until {format_time(holder.lock_until)}"
