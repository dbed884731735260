"""``alock(...)``: a lock for ``async with``, on the provider's async I/O.

The rules are ``lock``'s (configuration, re-entrancy, keep-alive checks, signals, the
single-use handles and the journal's steps, through ``GuardedRun.aenter``/``aexit``,
are shared code); only the waiting is asyncio's. See
:class:`tslock_django.lock` for the decorator form, which also takes coroutine
functions.
"""

from __future__ import annotations

from types import TracebackType

from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock
from .locking import lock


class alock:
    """Hold a named lock around an ``async with`` block::

        async with alock("rebuild-index", lock_at_most_for="10m") as held:
            await rebuild(fencing_token=held.fencing_token)

    The store is asked through the provider's async methods: native async I/O on Redis
    (``redis.asyncio``), the Durable Object Worker and Workers KV (``httpx.AsyncClient``)
    and in memory; the database provider runs its statements through
    ``sync_to_async(thread_sensitive=True)``, and other providers in a worker thread.

    Each ``async with`` acquires afresh; one ``alock`` object may be shared by tasks.
    Re-entrant like ``lock``: inside a block (sync or async) that holds the same name on
    the same provider, no second acquisition happens.

    Cancellation: a task cancelled while acquiring leaves no lock behind (a lock the
    store granted meanwhile is released before the cancellation goes on), and a
    cancelled block releases its lock like any other exit.

    Args:
        name: the lock name.
        lock_at_most_for: the safety net for a dead holder (duration grammar).
        lock_at_least_for: minimum hold time, also after an early release.
        using: the provider alias in ``TSLOCK_PROVIDERS``.
        keep_alive: extend every ``lock_at_most_for / 2`` while the block runs, from an
            asyncio task; when that fails the ``keep_alive_failed`` signal is sent and
            ``held.lost`` is set.
        wait: how long to keep trying while the lock is held (default: try once).
        journal: record each run in the journal, as ``lock(..., journal=True)`` does.

    Yields:
        The :class:`~tslock_django.HeldLock`, as ``with lock(...)`` does.

    Raises:
        ValueError: bad name or durations (at construction).
        LockHeld: someone else holds the lock (after ``wait``); the block does not run.
        LockProviderError: the store failed; the block does not run.
    """

    def __init__(
        self,
        name: str,
        lock_at_most_for: DurationLike,
        lock_at_least_for: DurationLike = 0,
        *,
        using: str = "default",
        keep_alive: bool = False,
        wait: DurationLike | None = None,
        journal: bool = False,
    ) -> None:
        self._lock = lock(
            name,
            lock_at_most_for,
            lock_at_least_for,
            using=using,
            keep_alive=keep_alive,
            wait=wait,
            journal=journal,
        )

    @property
    def config(self) -> LockConfiguration:
        return self._lock.config

    async def __aenter__(self) -> HeldLock:
        run = self._lock._run()
        held = await run.aenter()
        self._lock._entering(run)
        return held

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A cancelled block ends here too (exc is the CancelledError): the run is
        # journaled and the lock released before the cancellation goes on.
        await self._lock._leaving().aexit(exc)

    def __repr__(self) -> str:
        return f"<alock {self._lock.config.name!r} using {self._lock.using!r}>"
