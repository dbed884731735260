"""Evaluating the alerts when a journaled run ends, off the job's path.

The end of a run is when a job turns ``failing`` or recovers, so the recorder's
:data:`~tslock_django.signals.run_journaled` signal hands the name here
(:func:`after_run`, connected when the app is ready) once its last write is committed. When
``TSLOCK_ALERTS`` has channels, one background thread per process evaluates
(:func:`~tslock_django.alerts.evaluation.evaluate`) the names handed to it, in turn;
the decorated call, the command or ``tslock run`` returns without waiting for it, and
nothing it does (a channel that fails or hangs, a journal that cannot be read) reaches
the job's outcome or exit status: it is one warning in the ``tslock_django`` log. At
the interpreter's exit the thread may start sends for :data:`EXIT_SENDS` seconds more and
finish the one it is in (a channel's deadline is a few seconds), within :data:`EXIT_WAIT`
in all; a change it had no time to send is sent by the next evaluation (``tslock overdue
--notify``, or the next run's end).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping
from functools import partial

from django.conf import settings
from django.db import connections, transaction

from ..core.scrubbing import hide_secrets

logger = logging.getLogger("tslock_django")

#: How long (seconds) the interpreter's exit waits for an evaluation under way.
EXIT_WAIT = 10.0

_mutex = threading.Lock()
#: (journal alias, name) pairs waiting for the evaluator thread.
_pending: set[tuple[str, str]] = set()
_worker: threading.Thread | None = None
_exit_hook = False
#: Set when the interpreter exits: from :data:`EXIT_SENDS` seconds later the evaluation
#: under way starts no other send (those wait for the next evaluation); the one it is in
#: has its deadline, so the exit waits that long at most past the window.
_exiting = threading.Event()
_exit_began = 0.0
EXIT_SENDS = 2.0
#: How often, and how long apart (seconds), a name is handed to the evaluation again while
#: another evaluator holds the lock: that one may have read the jobs before this run's end.
BUSY_RETRIES = 20
BUSY_PAUSE = 0.5


def alerts_configured() -> bool:
    """Whether ``TSLOCK_ALERTS`` names any channel (read cheaply on the job's path; a
    malformed value counts as configured, so that the evaluation reports it)."""
    configured = getattr(settings, "TSLOCK_ALERTS", None)
    if not configured:
        return False
    return not isinstance(configured, Mapping) or bool(configured.get("channels"))


def after_run(*, using: str, name: str, **kwargs: object) -> None:
    """Evaluate ``name`` (and every other candidate) in the background once the
    journal's transaction on ``using`` commits; nothing when no channel is configured.
    A receiver of :data:`~tslock_django.signals.run_journaled`; never raises."""
    try:
        if alerts_configured():
            transaction.on_commit(partial(_enqueue, using, name), using=using)
    except Exception as err:  # noqa: BLE001 - the job must not notice the alerts
        logger.warning("tslock: the alerts were not evaluated after %r: %s", name, type(err).__name__)


def _enqueue(using: str, name: str) -> None:
    global _worker, _exit_hook
    with _mutex:
        _pending.add((using, name))
        if _worker is not None:
            return  # the running thread takes it on its next turn
        _worker = threading.Thread(target=_work, name="tslock-alerts", daemon=True)
        if not _exit_hook:
            atexit.register(_at_exit)
            _exit_hook = True
        _worker.start()


def _work() -> None:
    global _worker
    from ..journal.recorder import message_of
    from .evaluation import evaluate_after_run

    busy = 0
    try:
        while True:
            with _mutex:
                if not _pending:
                    _worker = None
                    return
                taken = sorted(_pending)
                _pending.clear()
            for using in sorted({alias for alias, _ in taken}):
                names = [name for alias, name in taken if alias == using]
                try:
                    found = evaluate_after_run(using, names, stop=_no_more_sends)
                except Exception as err:  # noqa: BLE001 - logged; the next evaluation retries
                    text = " ".join(hide_secrets(message_of(err)).split())
                    logger.warning("tslock: the alerts could not be evaluated after a run: %s", text[:300])
                    continue
                held_elsewhere = found is not None and not found.evaluated
                if held_elsewhere and busy < BUSY_RETRIES and not _exiting.is_set():
                    busy += 1
                    time.sleep(BUSY_PAUSE)
                    with _mutex:
                        _pending.update((using, name) for name in names)
    finally:
        with _mutex:
            if _worker is threading.current_thread():  # it stopped on an unexpected error
                _worker = None
        connections.close_all()  # this thread's own connections


def _no_more_sends() -> bool:
    return _exiting.is_set() and time.monotonic() - _exit_began > EXIT_SENDS


def _at_exit() -> None:
    global _exit_began
    _exit_began = time.monotonic()
    _exiting.set()
    wait(EXIT_WAIT)


def _forget_in_child() -> None:
    """In a forked child: the parent's thread and lock are not the child's (the lock may
    have been held at the fork)."""
    global _mutex, _worker
    _mutex = threading.Lock()
    _pending.clear()
    _worker = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def wait(timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for the evaluations under way in this process;
    ``True`` when none is left."""
    with _mutex:
        running = _worker
    if running is not None:
        running.join(timeout)
        return not running.is_alive()
    return True
