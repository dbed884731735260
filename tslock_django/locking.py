"""``lock(...)``: a lock as a context manager or a function decorator."""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, overload

from .core.aexecutor import agive_back, atake
from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock, give_back, take
from .exceptions import LockHeld, TslockError

P = ParamSpec("P")
R = TypeVar("R")

OnLocked = Literal["skip", "raise"]

#: What each ``with lock(...)`` entered in this thread or task, innermost last, so that
#: ``__exit__`` finds its own holding without state on the (shareable) lock object.
_entered: contextvars.ContextVar[tuple[tuple[lock, HeldLock, bool], ...]] = contextvars.ContextVar(
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
    while it is awaited, with the provider's async I/O (see :class:`alock`, the
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
    ) -> None:
        if on_locked not in ("skip", "raise"):
            raise ValueError(f"on_locked must be 'skip' or 'raise', got {on_locked!r}")
        self.config = LockConfiguration(name, lock_at_most_for, lock_at_least_for)
        self.using = using
        self.keep_alive = keep_alive
        self.wait = wait or 0
        self.on_locked = on_locked

    def _take(self) -> tuple[HeldLock, bool]:
        from . import providers

        return take(providers.get(self.using), self.config, keep_alive=self.keep_alive, wait=self.wait)

    async def _atake(self) -> tuple[HeldLock, bool]:
        from . import providers

        provider = providers.get(self.using)
        return await atake(provider, self.config, keep_alive=self.keep_alive, wait=self.wait)

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> HeldLock:
        held, acquired = self._take()
        self._entering(held, acquired)
        return held

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        give_back(*self._leaving())

    def _entering(self, held: HeldLock, acquired: bool) -> None:
        """Note what this ``with`` (or ``async with``) holds in this thread or task."""
        _entered.set((*_entered.get(), (self, held, acquired)))

    def _leaving(self) -> tuple[HeldLock, bool]:
        """What this ``with`` (or ``async with``) entered in this thread or task."""
        entries = _entered.get()
        mine = [i for i, (owner, _, _) in enumerate(entries) if owner is self]
        if not mine:
            raise TslockError(
                f"{self!r} was exited in another thread or task than the one that entered it; "
                "enter and exit a lock in the same thread or asyncio task"
            )
        index = mine[-1]
        _, held, acquired = entries[index]
        _entered.set(entries[:index] + entries[index + 1 :])
        return held, acquired

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
            try:
                held, acquired = self._take()
            except LockHeld:
                if self.on_locked == "raise":
                    raise
                return None
            try:
                return func(*args, **kwargs)
            finally:
                give_back(held, acquired)

        return locked

    def _decorate_coroutine_function(
        self, func: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R | None]]:
        @functools.wraps(func)
        async def locked(*args: P.args, **kwargs: P.kwargs) -> R | None:
            try:
                held, acquired = await self._atake()
            except LockHeld:
                if self.on_locked == "raise":
                    raise
                return None
            try:
                return await func(*args, **kwargs)
            finally:
                await agive_back(held, acquired)

        return locked

    def __repr__(self) -> str:
        return f"<lock {self.config.name!r} using {self.using!r}>"
