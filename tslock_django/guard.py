"""A job run under its lock and recorded in the journal: what ``@locked_command``,
``lock(..., journal=True)``, ``tslock run`` and ``locked_task`` share.

``GuardedRun.enter()`` takes the lock (journaling a skip or a store error when it cannot),
``GuardedRun.exit()`` journals how the job ended and gives the lock back
(``aenter``/``aexit`` for asyncio code: the same steps in the same order). The lock
rules stay in :mod:`tslock_django.core.executor`; the journal's writes in
:mod:`tslock_django.journal.recorder`; this module only puts them in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from .core.aexecutor import agive_back, atake
from .core.aio import finish
from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock, give_back, take
from .exceptions import InvalidLockProvider, JobPaused, LockHeld, LockProviderError
from .journal.pausing import PAUSED, is_paused
from .journal.recorder import RunRecorder, Writable, begin
from .journal.schedules import Schedule
from .tracing import RunSpan
from .tracing import begin as begin_span

T = TypeVar("T")


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
            LockHeld: held elsewhere (journaled ``skipped``); :class:`JobPaused`, a
                ``LockHeld``, when the job is paused (journaled ``skipped``, ``paused``).
            LockProviderError, InvalidLockProvider: the store failed or is misconfigured
                (journaled ``error``): the job must not run.
            ValueError: keep-alive on a store that cannot extend that often.
        """
        from . import providers

        self._begin()
        try:
            self._refuse_if_paused()
            held, acquired = take(
                providers.get(self.using), self.config, keep_alive=self.keep_alive, wait=self.wait
            )
        except (LockHeld, LockProviderError, InvalidLockProvider) as err:
            self._not_taken(err)
            raise
        return self._took(held, acquired)

    async def aenter(self) -> HeldLock:
        """:meth:`enter` for asyncio code: the lock through the provider's async
        methods, the journal's writes through ``sync_to_async`` (they are ORM writes).

        A cancellation anywhere in here leaves no lock behind. Until the store has
        answered, the provider's own rule applies (an acquire cut short is undone).
        Once the lock is ours, the steps that follow (the journal's ``running`` row,
        keep-alive) run to their end shielded; if the caller was cancelled meanwhile,
        the run is then undone (:meth:`_undo`): its row reads ``error``, keep-alive
        stops, the lock is released, and the cancellation goes on.
        """
        from . import providers

        # The journal's first step writes nothing (it only prepares the recorder and the
        # span): done here, it leaves no await for a cancellation to land between.
        self._begin()
        try:
            if self._recorder is not None:
                await self._journaling(self._refuse_if_paused)
            provider = providers.get(self.using)
            held, acquired = await atake(provider, self.config, keep_alive=self.keep_alive, wait=self.wait)
        except (LockHeld, LockProviderError, InvalidLockProvider) as err:
            if self.journal:
                await self._journaling(self._not_taken, err)
            raise
        except BaseException as err:  # cancelled before the store granted anything
            self._span_not_run(err)
            raise
        self._hold(held, acquired)
        recorder = self._recorder
        if recorder is not None:
            # Without the journal nothing is awaited between the grant and the body, so
            # no cancellation can land in between; with it, the row's write is.
            try:
                await finish(self._journaling(recorder.started, held))
            except BaseException as err:
                await self._undo(held, acquired, err)
                raise
        self._trace_start(held)
        return held

    async def _undo(self, held: HeldLock, acquired: bool, err: BaseException) -> None:
        """Give back a lock taken for a run whose body never started (the caller was
        cancelled on the way in): journal the run as not run, release, end the span."""
        self.held = None
        try:
            if self._recorder is not None:
                await finish(self._journaling(self._recorder.not_run, err))
        finally:
            try:
                await agive_back(held, acquired)
            finally:
                self._span_not_run(err)

    def call(self, job: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``job(*args, **kwargs)`` as the run's job (after :meth:`enter`), then
        :meth:`exit` with how it ended; returns what it returned, raises what it raised."""
        try:
            result = job(*args, **kwargs)
        except BaseException as exc:
            self.exit(exc)
            raise
        self.exit()
        return result

    def exit(self, exc: BaseException | None = None, *, exit_status: int | None = None) -> None:
        """Journal how the job ended (``exc`` it raised, or a program's ``exit_status``)
        and give the lock back (honouring ``lock_at_least_for``)."""
        held = self.held
        if held is None:
            return
        try:
            self._ended(exc, exit_status, held.lost.is_set())
        finally:
            self.held = None
            try:
                give_back(held, self._acquired)
            finally:
                self._span_ended(exc, exit_status)

    async def aexit(self, exc: BaseException | None = None) -> None:
        """:meth:`exit` for asyncio code; the lock is given back even if the task is
        cancelled meanwhile."""
        held = self.held
        if held is None:
            return
        try:
            if self.journal:
                await self._journaling(self._ended, exc, None, held.lost.is_set())
        finally:
            self.held = None
            try:
                await agive_back(held, self._acquired)
            finally:
                self._span_ended(exc, None)

    # The journal's part of a run, in the order both paths follow.

    def _begin(self) -> None:
        if self.journal:
            self._recorder = begin(self.config.name, self.using, schedule=self.schedule, stream=self.stream)
            self._span = begin_span(self.config.name, self.using)

    def _refuse_if_paused(self) -> None:
        """Before the lock is taken: a paused job's run goes no further (one read of the
        journal, only when it is on; see :mod:`tslock_django.journal.pausing`)."""
        recorder = self._recorder
        if recorder is not None and is_paused(recorder.using, recorder.name):
            raise JobPaused(self.config.name)

    def _not_taken(self, err: BaseException) -> None:
        if self._recorder is not None:
            if isinstance(err, LockHeld):
                self._recorder.skipped(err.holder, detail=PAUSED if isinstance(err, JobPaused) else "")
            else:
                self._recorder.errored(err)
        if self._span is not None:
            if isinstance(err, LockHeld):
                self._span.skipped(err.holder)
            else:
                self._span.errored(err)

    def _took(self, held: HeldLock, acquired: bool) -> HeldLock:
        self._hold(held, acquired)
        if self._recorder is not None:
            self._recorder.started(held)
        self._trace_start(held)
        return held

    def _hold(self, held: HeldLock, acquired: bool) -> None:
        self.held, self._acquired = held, acquired
        if not acquired:
            # Re-entrant: the outer run holds the lock, journals and traces the run.
            self._recorder = self._span = None

    def _trace_start(self, held: HeldLock) -> None:
        """Open the run's span; it becomes the current span of the caller's context
        (so called on the caller's thread and task, never in a journal thread)."""
        if self._span is not None:
            self._span.started(held)

    def _ended(self, exc: BaseException | None, exit_status: int | None, lock_lost: bool) -> None:
        if self._recorder is not None:
            self._recorder.finished(_failure(exc), exit_status=exit_status, lock_lost=lock_lost)

    def _span_not_run(self, err: BaseException) -> None:
        """Trace a run cancelled before its body started (a span that ends at once)."""
        if self._span is not None:
            self._span.errored(err)
            self._span = None

    def _span_ended(self, exc: BaseException | None, exit_status: int | None) -> None:
        """The span ends after the lock is given back, so it covers the release."""
        if self._span is not None:
            self._span.finished(_failure(exc), exit_status=exit_status)
            self._span = None

    async def _journaling(self, step: Callable[..., T], *args: Any) -> T:
        """Run a journal step from asyncio code, on Django's thread for the ORM (only
        when the journal is on: otherwise the steps write nothing, see :meth:`aenter`)."""
        return await sync_to_async(step, thread_sensitive=True)(*args)


def _failure(exc: BaseException | None) -> BaseException | None:
    """What a run that ended with ``exc`` failed of: ``sys.exit(0)`` is a success."""
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return None
    return exc
