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
from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .core.executor import HeldLock, give_back, take
from .exceptions import InvalidLockProvider, LockHeld, LockProviderError
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
            LockHeld: held elsewhere (journaled ``skipped``).
            LockProviderError, InvalidLockProvider: the store failed or is misconfigured
                (journaled ``error``): the job must not run.
            ValueError: keep-alive on a store that cannot extend that often.
        """
        from . import providers

        self._begin()
        try:
            held, acquired = take(
                providers.get(self.using), self.config, keep_alive=self.keep_alive, wait=self.wait
            )
        except (LockHeld, LockProviderError, InvalidLockProvider) as err:
            self._not_taken(err)
            raise
        return self._took(held, acquired)

    async def aenter(self) -> HeldLock:
        """:meth:`enter` for asyncio code: the lock through the provider's async
        methods, the journal's writes through ``sync_to_async`` (they are ORM writes)."""
        from . import providers

        # Without the journal its steps touch no database and run at once: no coroutine
        # is made for them (this path is as short as the sync one where it can be).
        journal = self.journal
        if journal:
            await self._journaling(self._begin)
        try:
            provider = providers.get(self.using)
            held, acquired = await atake(provider, self.config, keep_alive=self.keep_alive, wait=self.wait)
        except (LockHeld, LockProviderError, InvalidLockProvider) as err:
            if journal:
                await self._journaling(self._not_taken, err)
            raise
        if journal:
            return await self._journaling(self._took, held, acquired)
        return self._took(held, acquired)

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

    def _not_taken(self, err: BaseException) -> None:
        for entry in (self._recorder, self._span):
            if entry is None:
                continue
            if isinstance(err, LockHeld):
                entry.skipped(err.holder)
            else:
                entry.errored(err)

    def _took(self, held: HeldLock, acquired: bool) -> HeldLock:
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

    def _ended(self, exc: BaseException | None, exit_status: int | None, lock_lost: bool) -> None:
        if self._recorder is not None:
            self._recorder.finished(_failure(exc), exit_status=exit_status, lock_lost=lock_lost)

    def _span_ended(self, exc: BaseException | None, exit_status: int | None) -> None:
        """The span ends after the lock is given back, so it covers the release."""
        if self._span is not None:
            self._span.finished(_failure(exc), exit_status=exit_status)
            self._span = None

    async def _journaling(self, step: Callable[..., T], *args: Any) -> T:
        """Run a journal step from asyncio code, on Django's thread for the ORM (only
        when the journal is on: otherwise the steps run at once, see :meth:`aenter`)."""
        return await sync_to_async(step, thread_sensitive=True)(*args)


def _failure(exc: BaseException | None) -> BaseException | None:
    """What a run that ended with ``exc`` failed of: ``sys.exit(0)`` is a success."""
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return None
    return exc
