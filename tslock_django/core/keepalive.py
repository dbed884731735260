"""Keep-alive: extend a held lock every ``lock_at_most_for / 2`` while the task runs.

``lock_at_most_for`` is then only the safety net for a holder that dies; a long job
keeps its lock as long as it runs. A refused extension (the lock expired or changed
hands), or a store that keeps failing until there is no time left for another try
before the lock runs out, sets ``held.lost``, which the task can check; both are
logged and sent as ``keep_alive_failed``.
"""

from __future__ import annotations

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


class KeepAlive:
    """A daemon thread that extends ``held`` until :meth:`stop`."""

    def __init__(self, held: HeldLock) -> None:
        self.held = held
        self.interval = held.lock_at_most_for.total_seconds() / 2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tslock-keep-alive:{held.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop extending; returns once no extension is in flight."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            self._extend_until_stopped()
        finally:
            # Django opens connections per thread; this thread's would otherwise stay
            # open until garbage collection.
            from django.db import connections

            connections.close_all()

    def _extend_until_stopped(self) -> None:
        retry = max(self.interval / _RETRIES_PER_INTERVAL, 0.05)
        wait = self.interval
        while not self._stop.wait(wait):
            try:
                extended = self.held.extend_now()
            except LockProviderError as err:
                self._report(err)
                if self.held.seconds_left() <= retry:
                    # The next try would come after the store lets the lock go.
                    self._lose("the store kept failing and the lock is about to expire")
                    return
                wait = retry
                continue
            except Exception:
                logger.exception("keep-alive for lock %r stopped on an unexpected error", self.held.name)
                self._lose("keep-alive stopped on an unexpected error")
                return
            if not extended:
                self._report(None)
                self._lose("the store refused the extension: the lock expired or changed hands")
                return
            wait = self.interval

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
