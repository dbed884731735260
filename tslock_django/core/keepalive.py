"""Keep-alive: extend a held lock every ``lock_at_most_for / 2`` while the task runs.

``lock_at_most_for`` is then only the safety net for a holder that dies; a long job
keeps its lock as long as it runs. A refused extension (the lock expired or changed
hands), or a store that keeps failing until there is no time left for another try
before the lock runs out, sets ``held.lost``, which the task can check; both are
logged and sent as ``keep_alive_failed``.

Sync code gets a daemon thread (:class:`KeepAlive`), asyncio code a task on its loop
(:class:`AsyncKeepAlive`); both follow the same rules (:class:`_Rules`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from .. import signals
from ..exceptions import LockProviderError

if TYPE_CHECKING:
    from .executor import HeldLock

logger = logging.getLogger("tslock_django")

#: After a failed extension, try again this many times per interval.
_RETRIES_PER_INTERVAL = 4


class _Rules:
    """What keep-alive does after each try, shared by the thread and the asyncio task:
    the next wait, or ``None`` to stop (the lock is then lost, or released)."""

    def __init__(self, held: HeldLock) -> None:
        self.held = held
        self.interval = held.lock_at_most_for.total_seconds() / 2
        self.retry = max(self.interval / _RETRIES_PER_INTERVAL, 0.05)

    def after_extension(self, extended: bool) -> float | None:
        if not extended:
            self._report(None)
            self._lose("the store refused the extension: the lock expired or changed hands")
            return None
        return self.interval

    def after_failure(self, error: LockProviderError) -> float | None:
        self._report(error)
        if self.held.seconds_left() <= self.retry:
            # The next try would come after the store lets the lock go.
            self._lose("the store kept failing and the lock is about to expire")
            return None
        return self.retry

    def after_crash(self) -> None:
        logger.exception("keep-alive for lock %r stopped on an unexpected error", self.held.name)
        self._lose("keep-alive stopped on an unexpected error")

    def _report(self, error: LockProviderError | None) -> None:
        held = self.held
        if error is None:
            logger.warning("keep-alive for lock %r on %r was refused", held.name, held.provider.alias)
        else:
            logger.warning("keep-alive for lock %r on %r failed: %s", held.name, held.provider.alias, error)
        held.handle.notify(signals.keep_alive_failed, error=error)

    def _lose(self, why: str) -> None:
        logger.error("lock %r on %r is lost: %s", self.held.name, self.held.provider.alias, why)
        self.held.lost.set()


class KeepAlive(_Rules):
    """A daemon thread that extends ``held`` until :meth:`stop`."""

    def __init__(self, held: HeldLock) -> None:
        super().__init__(held)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tslock-keep-alive:{held.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop extending; returns once no extension is in flight."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    async def astop(self) -> None:
        """:meth:`stop` without blocking the event loop."""
        await asyncio.to_thread(self.stop)

    def _run(self) -> None:
        try:
            self._extend_until_stopped()
        finally:
            # Django opens connections per thread; this thread's would otherwise stay
            # open until garbage collection.
            from django.db import connections

            connections.close_all()

    def _extend_until_stopped(self) -> None:
        wait: float | None = self.interval
        while wait is not None and not self._stop.wait(wait):
            try:
                extended = self.held.extend_now()
            except LockProviderError as err:
                wait = self.after_failure(err)
            except Exception:  # noqa: BLE001  (after_crash logs it with its traceback)
                self.after_crash()
                return
            else:
                wait = self.after_extension(extended)


class AsyncKeepAlive(_Rules):
    """An asyncio task that extends ``held`` until :meth:`astop`: keep-alive for
    ``alock`` and locked coroutine functions, failing as the thread does (the signal,
    the log lines, ``held.lost``)."""

    def __init__(self, held: HeldLock) -> None:
        super().__init__(held)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._extend_until_stopped(), name=f"tslock-keep-alive:{self.held.name}"
        )

    def stop(self) -> None:
        """Ask the task to stop (from sync code, which cannot wait for it): it ends at
        its next wake-up, before extending again."""
        self._stop.set()

    async def astop(self) -> None:
        """Stop extending; returns once no extension is in flight (an extension that
        was sent is let finish, so the handle stays the one the store knows)."""
        self._stop.set()
        if self._task is not None:
            # wait() rather than await: a keep-alive task cancelled by the loop's shutdown
            # must not pass its cancellation on to the release that follows.
            await asyncio.wait([self._task])

    async def _extend_until_stopped(self) -> None:
        wait: float | None = self.interval
        while wait is not None and not await self._stopped_within(wait):
            try:
                extended = await self.held.aextend_now()
            except LockProviderError as err:
                wait = self.after_failure(err)
            except Exception:  # noqa: BLE001  (after_crash logs it with its traceback)
                self.after_crash()
                return
            else:
                wait = self.after_extension(extended)

    async def _stopped_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True
