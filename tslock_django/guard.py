"""A job run under its lock and recorded in the journal: what ``@locked_command``,
``lock(..., journal=True)``, ``tslock run`` and ``locked_task`` share.

``GuardedRun.enter()`` takes the lock (journaling a skip or a store error when it cannot),
``GuardedRun.exit()`` journals how the job ended and gives the lock back. The lock
rules stay in :mod:`tslock_django.core.executor`; the journal's writes in
:mod:`tslock_django.journal.recorder`; the run's OpenTelemetry span in
:mod:`tslock_django.tracing`; this module only puts them in order.
"""

from __future__ import annotations

from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock, give_back, take
from .exceptions import InvalidLockProvider, LockHeld, LockProviderError
from .journal.recorder import RunRecorder, Writable, begin
from .journal.schedules import Schedule
from .tracing import RunSpan
from .tracing import begin as begin_span


class GuardedRun:
    """One run of a job: its lock, and its journal entry when ``journal`` is on.

    Args:
        config: the lock.
        using: the provider alias.
        keep_alive: extend while the job runs.
        wait: how long to keep trying while the lock is held.
        journal: record the run (when ``TSLOCK_JOURNAL`` is not ``None``).
        schedule: the job's schedule, kept with its journal entry.
        stream: where the journal's one warning line goes (default: stderr).
    """

    def __init__(
        self,
        config: LockConfiguration,
        using: str,
        *,
        keep_alive: bool = False,
        wait: DurationLike = 0,
        journal: bool = True,
        schedule: Schedule | None = None,
        stream: Writable | None = None,
    ) -> None:
        self.config = config
        self.using = using
        self.keep_alive = keep_alive
        self.wait = wait
        self.journal = journal
        self.schedule = schedule
        self.stream = stream
        self.held: HeldLock | None = None
        self._acquired = False
        self._recorder: RunRecorder | None = None
        self._span: RunSpan | None = None

    def enter(self) -> HeldLock:
        """Take the lock; journal the run as started.

        Raises:
            LockHeld: held elsewhere (journaled ``skipped``).
            LockProviderError, InvalidLockProvider: the store failed or is misconfigured
                (journaled ``error``): the job must not run.
            ValueError: keep-alive on a store that cannot extend that often.
        """
        from . import providers

        if self.journal:
            self._recorder = begin(self.config.name, self.using, schedule=self.schedule, stream=self.stream)
            self._span = begin_span(self.config.name, self.using)
        try:
            held, acquired = take(
                providers.get(self.using), self.config, keep_alive=self.keep_alive, wait=self.wait
            )
        except LockHeld as refused:
            if self._recorder is not None:
                self._recorder.skipped(refused.holder)
            if self._span is not None:
                self._span.skipped(refused.holder)
            raise
        except (LockProviderError, InvalidLockProvider) as err:
            if self._recorder is not None:
                self._recorder.errored(err)
            if self._span is not None:
                self._span.errored(err)
            raise
        self.held, self._acquired = held, acquired
        if not acquired:
            # Re-entrant: the outer run holds the lock, journals and traces the run.
            self._recorder = self._span = None
        else:
            if self._recorder is not None:
                self._recorder.started(held)
            if self._span is not None:
                self._span.started(held)
        return held

    def exit(self, exc: BaseException | None = None, *, exit_status: int | None = None) -> None:
        """Journal how the job ended (``exc`` it raised, or a program's ``exit_status``)
        and give the lock back (honouring ``lock_at_least_for``)."""
        held = self.held
        if held is None:
            return
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            exc = None  # sys.exit(0) is a success
        try:
            if self._recorder is not None:
                self._recorder.finished(exc, exit_status=exit_status, lock_lost=held.lost.is_set())
        finally:
            self.held = None
            try:
                give_back(held, self._acquired)
            finally:
                if self._span is not None:
                    self._span.finished(exc, exit_status=exit_status)
                    self._span = None
