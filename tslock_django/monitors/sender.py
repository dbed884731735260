"""Pings off the job's path: one daemon thread sends what runs queue.

A run hands each ping to :func:`send` and goes on at once: the job never waits for a
monitor, however slow or down it is. The queue is bounded (:data:`QUEUE_LIMIT`); when
it is full the oldest ping is dropped, and one warning says so. At interpreter exit
what is still queued gets :data:`EXIT_BUDGET` seconds to go out, so a management
command that exits right after its run still delivers the run's end ping; a monitor
that is slower than that loses the ping, never the process its time.

Each ping reports its own failure (it knows what to scrub); a ping that raises anyway is
logged by its kind only. A forked child (a task queue's worker) starts with an empty
queue and starts its own thread when it first sends.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable

logger = logging.getLogger("tslock_django")

#: The most pings waiting at once; past it the oldest is dropped.
QUEUE_LIMIT = 1000
#: Seconds that what is still queued at interpreter exit gets to go out: a working
#: monitor answers a ping in milliseconds, and 2 s is what sentry-sdk gives its own
#: queue at exit (its ``shutdown_timeout``).
EXIT_BUDGET = 2.0

#: What the thread does with a ping: call it.
Ping = Callable[[], None]

_warned: set[str] = set()
_warned_mutex = threading.Lock()


def warn_once(key: str, message: str, *args: object) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    with _warned_mutex:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message, *args)


def forget_warning(key: str) -> None:
    """Let ``key``'s warning be logged again (the trouble it told of is over)."""
    with _warned_mutex:
        _warned.discard(key)


class Sender:
    """A bounded queue of pings and the one daemon thread that sends them."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self.limit = limit
        self._queue: deque[Ping] = deque()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = False
        self._at_exit: list[Callable[[float], None]] = []
        self._pid = os.getpid()

    def put(self, ping: Ping) -> None:
        """Queue ``ping``; starts the thread on the first ping. Never blocks on a monitor."""
        with self._changed:
            if len(self._queue) >= self.limit:
                self._queue.popleft()
                warn_once(
                    f"queue-full:{id(self)}",
                    "tslock: the monitors' queue is full (%d pings wait for a slow or unreachable "
                    "monitor); the oldest are dropped (this is logged once)",
                    self.limit,
                )
            self._queue.append(ping)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="tslock-monitors", daemon=True)
                self._thread.start()
                atexit.register(self.drain_at_exit)
            self._changed.notify_all()

    def after_drain(self, flush: Callable[[float], None]) -> None:
        """Call ``flush(seconds left)`` at exit after the queue is drained (once per
        ``flush``): a library with a queue of its own (sentry-sdk) sends it then."""
        with self._changed:
            if flush not in self._at_exit:
                self._at_exit.append(flush)

    def drain(self, timeout: float) -> bool:
        """Wait until every queued ping was sent, at most ``timeout`` seconds; whether
        the queue is empty."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._changed.wait(left)
        return True

    def drain_at_exit(self) -> None:
        """At interpreter exit: :meth:`drain` within :data:`EXIT_BUDGET`, then the
        flushes of :meth:`after_drain` within what is left of it."""
        if os.getpid() != self._pid:
            return  # a forked child: this is its parent's sender, and its thread is not here
        deadline = time.monotonic() + EXIT_BUDGET
        if not self.drain(EXIT_BUDGET):
            with self._changed:
                left = len(self._queue) + self._busy
            warn_once(
                "exit",
                "tslock: %d monitor ping(s) were not sent within %.0f s of exit; they are lost",
                left,
                EXIT_BUDGET,
            )
        for flush in list(self._at_exit):
            try:
                flush(max(0.0, deadline - time.monotonic()))
            except Exception as err:  # noqa: BLE001 - nothing at exit may fail the process
                logger.warning("tslock: a monitor's flush at exit failed (%s)", type(err).__name__)

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                ping = self._queue.popleft()
                self._busy = True
            try:
                ping()
            except Exception as err:  # noqa: BLE001 - one bad ping must not stop the others
                logger.warning("tslock: a monitor ping failed unexpectedly (%s)", type(err).__name__)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()


_sender: Sender | None = None
_sender_mutex = threading.Lock()


def sender() -> Sender:
    """The process's sender (made on first use)."""
    global _sender
    with _sender_mutex:
        if _sender is None:
            _sender = Sender()
        return _sender


def send(ping: Ping) -> None:
    """Queue ``ping`` on the process's sender."""
    sender().put(ping)


def _forked() -> None:
    # The parent's thread does not exist in the child, and its queue is the parent's to send.
    global _sender, _sender_mutex
    _sender, _sender_mutex = None, threading.Lock()


os.register_at_fork(after_in_child=_forked)
