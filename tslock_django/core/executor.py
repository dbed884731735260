"""Running a task under a lock: ``HeldLock``, ``take``/``give_back``,
``LockingTaskExecutor`` and ``assert_locked``.

The locks a thread (or asyncio task) holds are tracked in a context variable. That gives
ShedLock's re-entrancy (a task that asks again for a lock its own caller holds, on the
same provider, runs without a second acquisition) and lets ``assert_locked()`` check that
code runs under one. ``lock()``, ``@locked_command`` and the executor all go through
``take`` and ``give_back``, so they behave alike.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Generic, TypeVar

from ..exceptions import LockHeld, LockProviderError, TslockError
from .aio import finish
from .configuration import LockConfiguration
from .durations import DurationLike, parse_duration
from .provider import Attempt, LockProvider, SimpleLock
from .records import LockRecord

if TYPE_CHECKING:
    from .keepalive import AsyncKeepAlive, KeepAlive

logger = logging.getLogger("tslock_django")

T = TypeVar("T")

_held: contextvars.ContextVar[tuple[HeldLock, ...]] = contextvars.ContextVar("tslock_held", default=())


@dataclass(frozen=True)
class TaskResult(Generic[T]):
    """What ``execute_with_lock`` did: ``executed`` is False when the lock was held
    elsewhere (then ``result`` is None and ``holder`` may name who holds it)."""

    executed: bool
    result: T | None = None
    holder: LockRecord | None = None


class HeldLock:
    """A lock held for the duration of a task; what ``lock()`` yields and what a
    decorated command sees as ``self.lock``.

    It follows the current ``SimpleLock`` across keep-alive extensions, so
    ``fencing_token`` and ``record`` are always those of the live holding.

    Deadlines for keep-alive are kept on this process's monotonic clock, measured from
    just before each request was sent: they can only be earlier than the store's, so
    ``lost`` is never set too late, and no wall clock is compared with the store's.

    Attributes:
        lost: a ``threading.Event`` set when keep-alive could not keep the lock; a long
            task should check it before doing work that must not overlap.
    """

    def __init__(self, handle: SimpleLock, *, keep_alive: bool = False, sent_at: float | None = None) -> None:
        self._handle = handle
        self._mutex = threading.Lock()
        self.provider: LockProvider = handle.provider
        self.lock_at_most_for = handle.lock_at_most_for
        self.lock_at_least_for = handle.lock_at_least_for
        sent = time.monotonic() if sent_at is None else sent_at
        self._expires = sent + handle.lock_at_most_for.total_seconds()
        self._at_least_ends = sent + handle.lock_at_least_for.total_seconds()
        self.lost = threading.Event()
        self.released = False
        self._keep_alive: KeepAlive | AsyncKeepAlive | None = None
        if keep_alive:
            from .keepalive import KeepAlive

            self._keep_alive = KeepAlive(self)
            self._keep_alive.start()

    def keep_alive_in_task(self) -> None:
        """Start keep-alive as an asyncio task of the running loop (the async path's
        counterpart of ``keep_alive=True``); :meth:`arelease` stops it."""
        from .keepalive import AsyncKeepAlive

        keeper = AsyncKeepAlive(self)
        self._keep_alive = keeper
        keeper.start()

    @property
    def name(self) -> str:
        return self._handle.name

    @property
    def handle(self) -> SimpleLock:
        """The current single-use handle."""
        return self._handle

    @property
    def record(self) -> LockRecord:
        return self._handle.record

    @property
    def fencing_token(self) -> int | None:
        """Pass this to downstream systems so they can reject a stale holder's writes."""
        return self._handle.fencing_token

    def seconds_left(self) -> float:
        """Seconds until the lock expires unless extended (this process's estimate)."""
        return self._expires - time.monotonic()

    def extend_now(self) -> bool:
        """Extend by ``lock_at_most_for`` from now, keeping what is left of the at-least
        time; returns whether the store agreed (used by keep-alive).

        Raises:
            LockProviderError: the store failed.
        """
        with self._mutex:
            if self.released:
                return True
            sent = time.monotonic()
            successor = self._handle.extend(*self._extension(sent))
            return self._extended(successor, sent)

    async def aextend_now(self) -> bool:
        """:meth:`extend_now` for asyncio code (used by the asyncio keep-alive)."""
        if self.released:
            return True
        sent = time.monotonic()
        successor = await self._handle.aextend(*self._extension(sent))
        return self._extended(successor, sent)

    def _extension(self, sent: float) -> tuple[timedelta, timedelta]:
        """The durations of an extension sent at ``sent``: ``lock_at_most_for`` again,
        and what is left of the at-least time."""
        at_least = timedelta(seconds=max(0.0, self._at_least_ends - sent))
        return self.lock_at_most_for, min(at_least, self.lock_at_most_for)

    def _extended(self, successor: SimpleLock | None, sent: float) -> bool:
        if successor is None:
            return False
        self._handle = successor
        self._expires = sent + self.lock_at_most_for.total_seconds()
        return True

    def release(self) -> None:
        """Stop keep-alive and unlock (honouring ``lock_at_least_for``).

        A ``LockProviderError`` here is logged, not raised: the task's outcome matters
        more, and the lock expires at ``lock_until`` anyway.
        """
        if self._keep_alive is not None:
            self._keep_alive.stop()
        handle = self._releasing()
        if handle is None:
            return
        try:
            handle.unlock()
        except LockProviderError as err:
            self._release_failed(handle, err)

    async def arelease(self) -> None:
        """:meth:`release` for asyncio code. Runs to its end even if the awaiting task
        is cancelled meanwhile (the cancellation is raised afterwards), so a cancelled
        task leaves no lock behind.

        Awaited directly; only when a cancellation cuts it short is the rest finished
        in a task the cancellation cannot reach (a release that may have reached the
        store is sent again: with the same token, a second release changes nothing)."""
        handle: SimpleLock | None = None
        try:
            if self._keep_alive is not None:
                await self._keep_alive.astop()
            handle = self._releasing()
            if handle is not None:
                # _aunlock's work, inline: a frame less between the task and the store.
                try:
                    await handle.aunlock()
                except LockProviderError as err:
                    self._release_failed(handle, err)
        except asyncio.CancelledError:
            await finish(self._arelease_after_cancel(handle))
            raise

    async def _arelease_after_cancel(self, handle: SimpleLock | None) -> None:
        if handle is None:  # cut short while keep-alive stopped
            if self._keep_alive is not None:
                await self._keep_alive.astop()
            handle = self._releasing()
            if handle is None:
                return
        await self._aunlock(handle)

    async def _aunlock(self, handle: SimpleLock) -> None:
        try:
            await handle.aunlock()
        except LockProviderError as err:
            self._release_failed(handle, err)

    def _releasing(self) -> SimpleLock | None:
        """Mark released; the handle to unlock, or ``None`` if already released."""
        with self._mutex:
            if self.released:
                return None
            self.released = True
            return self._handle

    def _release_failed(self, handle: SimpleLock, err: LockProviderError) -> None:
        logger.error(
            "could not release lock %r (it expires at %s): %s", self.name, handle.record.lock_until, err
        )

    def __repr__(self) -> str:
        return f"<HeldLock {self.name!r} on {self.provider.alias!r} fencing={self.fencing_token}>"


def current_lock(name: str | None = None, alias: str | None = None) -> HeldLock | None:
    """The innermost lock held here, optionally the one named ``name`` on provider
    ``alias``; else ``None``."""
    for held in reversed(_held.get()):
        # A released lock may linger in a copied context (an asyncio task started
        # inside the block); it holds nothing any more.
        if held.released:
            continue
        if (name is None or held.name == name) and (alias is None or held.provider.alias == alias):
            return held
    return None


def assert_locked(name: str | None = None) -> HeldLock:
    """Raise unless the current thread or task runs inside a tslock lock.

    Args:
        name: require this particular lock.

    Returns:
        The innermost matching ``HeldLock``.

    Raises:
        TslockError: no (matching) lock is held here.
    """
    held = current_lock(name)
    if held is None:
        which = f"lock {name!r}" if name else "a tslock lock"
        raise TslockError(
            f"this code must run while holding {which}, and none is held in this thread or task"
        )
    return held


def acquire(
    provider: LockProvider, config: LockConfiguration, *, wait: DurationLike = 0
) -> tuple[Attempt, float]:
    """Try to acquire, polling for up to ``wait`` while the lock is held elsewhere.

    Returns the last attempt and the monotonic time just before its request was sent.
    Polls start at 50 ms and back off to 1 s with jitter, so a manual run that waits
    does not hammer the store. Store failures are raised at once, never retried here.
    """
    polls = Polls(wait)
    while True:
        sent = time.monotonic()
        attempt = provider.attempt(config)
        pause = polls.pause_after(attempt)
        if pause is None:
            return attempt, sent
        time.sleep(pause)


class Polls:
    """When to ask again while a lock is held elsewhere, within a ``wait`` budget (one
    rule for the sync and the asyncio path)."""

    def __init__(self, wait: DurationLike | None) -> None:
        budget = parse_duration(wait or 0, field="wait").total_seconds()
        self.deadline = time.monotonic() + budget
        self.pause = 0.05

    def pause_after(self, attempt: Attempt) -> float | None:
        """How long to sleep before the next attempt; ``None``: stop with this one."""
        left = self.deadline - time.monotonic()
        if attempt.held is not None or left <= 0:
            return None
        pause = min(left, self.pause * random.uniform(0.8, 1.2))
        self.pause = min(self.pause * 2, 1.0)
        return pause


def take(
    provider: LockProvider, config: LockConfiguration, *, keep_alive: bool = False, wait: DurationLike = 0
) -> tuple[HeldLock, bool]:
    """Hold ``config`` on ``provider`` for the current thread or task.

    Returns the held lock and whether this call acquired it: ``False`` when this
    context already held it (re-entrant use), and then ``give_back`` releases nothing.

    Raises:
        LockHeld: someone else holds it (``holder`` says who, when the store told us).
        LockProviderError: the store failed.
        ValueError: keep-alive on a store that cannot extend that often.
    """
    existing = already_held(provider, config, keep_alive)
    if existing is not None:
        return existing, False
    attempt, sent = acquire(provider, config, wait=wait)
    return hold(attempt, config, sent, keep_alive=keep_alive), True


def already_held(provider: LockProvider, config: LockConfiguration, keep_alive: bool) -> HeldLock | None:
    """The holding of ``config`` this context already has (re-entrant use), else
    ``None`` after checking that keep-alive can work on this store."""
    existing = current_lock(config.name, provider.alias)
    if existing is None:
        check_keep_alive(provider, config, keep_alive)
    return existing


def hold(attempt: Attempt, config: LockConfiguration, sent: float, *, keep_alive: bool | str) -> HeldLock:
    """Turn a granted attempt into the ``HeldLock`` of this context, or raise
    ``LockHeld``. The one place where the sync and the asyncio path record that a
    holding begins (``give_back`` is where it ends): hooks that follow every run (a
    journal) belong here.

    Args:
        keep_alive: ``True`` for a keep-alive thread, ``"task"`` for an asyncio task.
    """
    if attempt.held is None:
        raise LockHeld(config.name, attempt.holder)
    held = HeldLock(attempt.held, keep_alive=keep_alive is True, sent_at=sent)
    if keep_alive == "task":
        held.keep_alive_in_task()
    _held.set((*_held.get(), held))
    return held


def give_back(held: HeldLock, acquired: bool) -> None:
    """Undo ``take``: forget the lock in this context and release it (unless re-entrant).

    The lock is removed by identity rather than by resetting the context variable, so
    locks left in any order (or from another context) never leave a released lock
    looking held; and it is released whatever happens to the bookkeeping.
    """
    if not acquired:
        return
    try:
        forget(held)
    finally:
        held.release()


def forget(held: HeldLock) -> None:
    """Remove ``held`` from this context's holdings (both paths end a holding here)."""
    _held.set(tuple(h for h in _held.get() if h is not held))


class LockingTaskExecutor:
    """Runs tasks under a lock of one provider, ShedLock style.

    Args:
        provider: a ``LockProvider`` instance (e.g. ``providers["default"]``).
    """

    def __init__(self, provider: LockProvider) -> None:
        self.provider = provider

    def execute_with_lock(
        self,
        task: Callable[[], T],
        config: LockConfiguration,
        *,
        keep_alive: bool = False,
        wait: DurationLike = 0,
    ) -> TaskResult[T]:
        """Run ``task`` if the lock can be acquired, then release it.

        Re-entrant: if this thread or task already holds ``config.name`` on this
        provider, the task runs at once under the existing lock.

        Returns:
            ``TaskResult(executed=True, result=...)`` or ``TaskResult(executed=False)``
            when the lock is held elsewhere.

        Raises:
            LockProviderError: the store failed; the task did not run.
            Whatever ``task`` raises (the lock is released first).
        """
        try:
            held, acquired = take(self.provider, config, keep_alive=keep_alive, wait=wait)
        except LockHeld as refused:
            return TaskResult(False, None, refused.holder)
        try:
            return TaskResult(True, task())
        finally:
            give_back(held, acquired)


def check_keep_alive(provider: LockProvider, config: LockConfiguration, keep_alive: bool) -> None:
    """Refuse keep-alive where the store cannot extend often enough (Workers KV accepts
    one write per key per second, so ``lock_at_most_for`` must leave room for that)."""
    floor = getattr(provider, "min_keep_alive_at_most_for", None)
    if keep_alive and floor is not None and config.lock_at_most_for < floor:
        raise ValueError(
            f"keep-alive on provider {provider.alias!r} needs lock_at_most_for of at least {floor} "
            f"(got {config.lock_at_most_for} for lock {config.name!r}): the store accepts one write per "
            "key per second; raise lock_at_most_for or turn keep_alive off"
        )
