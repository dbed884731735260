"""``lock(...)``: a lock as a context manager or a function decorator."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock, acquire, check_keep_alive, current_lock, pop_held, push_held
from .exceptions import LockHeld

P = ParamSpec("P")
R = TypeVar("R")

OnLocked = Literal["skip", "raise"]


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

    Each call or ``with`` acquires afresh; one ``lock`` object may be shared by threads.
    Re-entrant: inside a block that holds the same name, no second acquisition happens.

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
        wait: DurationLike = 0,
        on_locked: OnLocked = "skip",
    ) -> None:
        if on_locked not in ("skip", "raise"):
            raise ValueError(f"on_locked must be 'skip' or 'raise', got {on_locked!r}")
        self.config = LockConfiguration(name, lock_at_most_for, lock_at_least_for)
        self.using = using
        self.keep_alive = keep_alive
        self.wait = wait
        self.on_locked = on_locked
        self._local = threading.local()

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> HeldLock:
        held, token = self._acquire()
        self._stack().append((held, token))
        return held

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        held, token = self._stack().pop()
        _leave(held, token)

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _acquire(self) -> tuple[HeldLock, Any]:
        """Acquire; returns the held lock and the context token to release it with
        (``None`` when re-entrant: the outer holder releases). Raises ``LockHeld``."""
        existing = current_lock(self.config.name)
        if existing is not None:
            return existing, None
        from . import providers

        provider = providers.get(self.using)
        check_keep_alive(provider, self.config, self.keep_alive)
        attempt = acquire(provider, self.config, wait=self.wait)
        if attempt.held is None:
            raise LockHeld(self.config.name, attempt.holder)
        held = HeldLock(attempt.held, keep_alive=self.keep_alive)
        return held, push_held(held)

    # -- decorator -------------------------------------------------------------------

    def __call__(self, func: Callable[P, R]) -> Callable[P, R | None]:
        @functools.wraps(func)
        def locked(*args: P.args, **kwargs: P.kwargs) -> R | None:
            try:
                held, token = self._acquire()
            except LockHeld:
                if self.on_locked == "raise":
                    raise
                return None
            try:
                return func(*args, **kwargs)
            finally:
                _leave(held, token)

        return locked

    def __repr__(self) -> str:
        return f"<lock {self.config.name!r} using {self.using!r}>"


def _leave(held: HeldLock, token: Any) -> None:
    if token is None:
        return  # re-entrant use: the outer block releases
    pop_held(token)
    held.release()
