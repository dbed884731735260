"""``lock(...)``: a lock as a context manager or a function decorator."""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, overload

from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock
from .exceptions import LockHeld, TslockError
from .guard import GuardedRun

P = ParamSpec("P")
R = TypeVar("R")

OnLocked = Literal["skip", "raise"]

#: What each ``with lock(...)`` entered in this thread or task, innermost last, so that
#: ``__exit__`` finds its own holding without state on the (shareable) lock object.
_entered: contextvars.ContextVar[tuple[tuple[lock, GuardedRun], ...]] = contextvars.ContextVar(
    "tslock_entered", default=()
)


class lock:
    """Hold a named lock around a block or a function.

    As a context manager it yields the :class:`HeldLock` and raises
    :class:`~tslock_django.exceptions.LockHeld` when someone else holds the lock (a
    ``with`` block cannot be skipped silently)::

        with lock("rebuild-index", lock_at_most_for="10m") as held:
            rebuild(fencing_token=held.fencing_token)

    As a decorator the function is skipped (returns ``None``) when the lock is held, or
    raises ``LockHeld`` with ``on_locked="raise"``::

        @lock("nightly-report", lock_at_most_for="1h", lock_at_least_for="5m")
        def nightly_report(): ...

    Each call or ``with`` acquires afresh; one ``lock`` object may be shared by threads
    and tasks. Re-entrant: inside a block that holds the same name on the same provider,
    no second acquisition happens.

    Decorating a coroutine function gives a coroutine function that holds the lock
    while it is awaited, through the provider's async I/O (see :class:`alock`, the
    ``async with`` form)::

        @lock("sync-prices", lock_at_most_for="5m")
        async def sync_prices(): ...

    A call that is skipped returns ``None``; a cancelled call leaves no lock behind.

    Args:
        name: the lock name.
        lock_at_most_for: the safety net for a dead holder (duration grammar).
        lock_at_least_for: minimum hold time, also after an early release.
        using: the provider alias in ``TSLOCK_PROVIDERS``.
        keep_alive: extend every ``lock_at_most_for / 2`` while running.
        wait: how long to keep trying while the lock is held (default: try once).
        on_locked: decorator only: ``"skip"`` (default) or ``"raise"``.
        journal: record each run in the journal (``TSLOCK_JOURNAL``) like a locked
            command's: off by default, since ``lock`` also guards hot code paths. With
            it, a paused name (``tslock pause``) skips: the decorator returns ``None``,
            ``with`` raises :class:`~tslock_django.JobPaused` (a ``LockHeld``).

    Raises:
        ValueError: bad name, durations or ``on_locked`` (at construction).
        LockProviderError: the store failed (the block or function does not run).
    """

    def __init__(
        self,
        name: str,
        lock_at_most_for: DurationLike,
        lock_at_least_for: DurationLike = 0,
        *,
        using: str = "default",
        keep_alive: bool = False,
        wait: DurationLike | None = 0,
        on_locked: OnLocked = "skip",
        journal: bool = False,
    ) -> None:
        if on_locked not in ("skip", "raise"):
            raise ValueError(f"on_locked must be 'skip' or 'raise', got {on_locked!r}")
        self.config = LockConfiguration(name, lock_at_most_for, lock_at_least_for)
        self.using = using
        self.keep_alive = keep_alive
        self.wait = wait or 0
        self.on_locked = on_locked
        self.journal = journal

    def _run(self) -> GuardedRun:
        """A fresh run of this lock (state per call, never on the shared object)."""
        return GuardedRun(
            self.config, self.using, keep_alive=self.keep_alive, wait=self.wait, journal=self.journal
        )

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> HeldLock:
        run = self._run()
        held = run.enter()
        self._entering(run)
        return held

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._leaving().exit(exc)

    def _entering(self, run: GuardedRun) -> None:
        """Note the run this ``with`` (or ``async with``) entered in this thread or task."""
        _entered.set((*_entered.get(), (self, run)))

    def _leaving(self) -> GuardedRun:
        """The run this ``with`` (or ``async with``) entered in this thread or task."""
        entries = _entered.get()
        mine = [i for i, (owner, _) in enumerate(entries) if owner is self]
        if not mine:
            raise TslockError(
                f"{self!r} was exited in another thread or task than the one that entered it; "
                "enter and exit a lock in the same thread or asyncio task"
            )
        index = mine[-1]
        _, run = entries[index]
        _entered.set(entries[:index] + entries[index + 1 :])
        return run

    # -- decorator -------------------------------------------------------------------

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, func: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R | None]]: ...

    @overload
    def __call__(self, func: Callable[P, R]) -> Callable[P, R | None]: ...

    def __call__(self, func: Callable[P, Any]) -> Callable[P, Any]:
        if inspect.iscoroutinefunction(func):
            return self._decorate_coroutine_function(func)
        return self._decorate_function(func)

    def _decorate_function(self, func: Callable[P, R]) -> Callable[P, R | None]:
        @functools.wraps(func)
        def locked(*args: P.args, **kwargs: P.kwargs) -> R | None:
            run = self._run()
            try:
                run.enter()
            except LockHeld:
                if self.on_locked == "raise":
                    raise
                return None
            return run.call(func, *args, **kwargs)

        return locked

    def _decorate_coroutine_function(
        self, func: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R | None]]:
        @functools.wraps(func)
        async def locked(*args: P.args, **kwargs: P.kwargs) -> R | None:
            run = self._run()
            try:
                await run.aenter()
            except LockHeld:
                if self.on_locked == "raise":
                    raise
                return None
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:  # a cancellation too: the run ends, the lock is released
                await run.aexit(exc)
                raise
            await run.aexit()
            return result

        return locked

    def __repr__(self) -> str:
        return f"<lock {self.config.name!r} using {self.using!r}>"
