"""Writing the journal: one ``Run`` row per run, and its name's ``Job`` summary.

A run is written twice: when it starts (``running``, in one transaction with its
``Job`` row) and when it ends (``succeeded``, ``failed``; again one transaction). A
skip or a store error is one write. A journal that cannot be written never changes the
job: the job runs, skips or fails exactly as it would without a journal, with the
same exception and exit status, and one warning line (see ``RunRecorder._warn_missed``)
says that the journal missed the run. Text that a database cannot hold (NUL, a lone
surrogate) is replaced before it is written, so it never costs a run its row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import F
from django.utils import timezone as dj_timezone

from ..core.scrubbing import cut, hide_secrets
from ..monitors.run import watch
from ..signals import listened, notify, run_journaled
from . import outcomes, postgresql
from .schedules import Schedule

logger = logging.getLogger("tslock_django")


class Writable(Protocol):
    """Where the journal's warning goes: a text stream or a command's ``stderr``."""

    def write(self, text: str) -> Any: ...


#: The most characters of ``detail``.
DETAIL_LIMIT = 1000
_HOST = socket.gethostname()

#: Runs in progress in this process, by (provider alias, name, fencing token or
#: handle id): keep-alive extensions move their ``deadline`` on (see ``_on_extended``).
_active: dict[tuple[str, str], int] = {}
_active_mutex = threading.Lock()


def journal_database() -> str | None:
    """The database alias of the journal (``TSLOCK_JOURNAL["using"]``), or ``None``
    when ``TSLOCK_JOURNAL = None`` turns it off.

    Raises:
        ValueError: ``TSLOCK_JOURNAL`` is neither ``None`` nor ``{"using": alias}``.
    """
    configured = getattr(settings, "TSLOCK_JOURNAL", {"using": "default"})
    if configured is None:
        return None
    if not isinstance(configured, Mapping) or set(configured) - {"using"}:
        raise ValueError(
            f"TSLOCK_JOURNAL must be None (no journal) or {{'using': '<database alias>'}}, got {configured!r}"
        )
    using = configured.get("using", "default")
    if using not in settings.DATABASES:
        raise ValueError(
            f"TSLOCK_JOURNAL['using'] is {using!r}, which is not in DATABASES "
            f"({', '.join(sorted(settings.DATABASES))})"
        )
    return str(using)


def to_db(value: datetime) -> datetime:
    """An aware time as the ORM stores it: naive local time where ``USE_TZ`` is off."""
    return value if settings.USE_TZ else dj_timezone.make_naive(value)


def from_db(value: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime, whatever ``USE_TZ`` says."""
    if value is None:
        return None
    if dj_timezone.is_naive(value):
        value = dj_timezone.make_aware(value)
    return value.astimezone(timezone.utc)


#: What no database column can hold: NUL (PostgreSQL refuses it in text) and a lone
#: surrogate (what Python makes of a file name that is not UTF-8; no encoder takes it).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` with what no database can store (NUL, lone surrogates) replaced by
    U+FFFD, the replacement character; the rest is kept as it is."""
    return _UNSTORABLE.sub("\ufffd", text)


def exception_message(exc: BaseException) -> str | None:
    """``str(exc)``, or ``None`` when the exception's ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - any failure of a job's own __str__
        return None


def message_of(exc: BaseException) -> str:
    """``exc``'s class and message (``"ValueError: no"``, or the class alone for an
    empty message); for an exception whose ``__str__`` raises, its class and a note
    that its message could not be read."""
    name = type(exc).__name__
    message = exception_message(exc)
    if message is None:
        return f"{name} (its message could not be read)"
    return f"{name}: {message}" if message else name


def describe_failure(exc: BaseException | None = None, *, exit_status: int | None = None) -> str:
    """The ``detail`` of a failed run: the exception's class and message
    (:func:`message_of`), or the program's exit status; scrubbed of secrets
    (:func:`~tslock_django.core.scrubbing.hide_secrets`), made storable
    (:func:`storable`) and cut to ``DETAIL_LIMIT``."""
    if exc is not None:
        text = message_of(exc)
    elif exit_status is not None and exit_status < 0:
        text = f"killed by signal {-exit_status}"
    else:
        text = f"exit status {exit_status}"
    return cut(storable(hide_secrets(text)), DETAIL_LIMIT)


def ended_as(exc: BaseException | None, exit_status: int | None, lock_lost: bool) -> tuple[str, str]:
    """How a run that ran ended, as the journal writes it: ``(outcome, detail)``:
    ``succeeded``, or ``failed`` when it raised ``exc`` or exited with a status other
    than 0; ``lost`` when its lock was lost while it ran, with how the job ended as detail."""
    failed = exc is not None or (exit_status is not None and exit_status != 0)
    outcome = outcomes.FAILED if failed else outcomes.SUCCEEDED
    detail = describe_failure(exc, exit_status=exit_status) if failed else ""
    if lock_lost:
        ended = f"it ended {outcome}" + (f" ({detail})" if detail else "")
        detail = cut(f"keep-alive could not keep the lock while the job ran; {ended}", DETAIL_LIMIT)
        outcome = outcomes.LOST
    return outcome, detail


class RunRecorder:
    """The journal entry of one run. Made by :func:`begin`; every method is safe to
    call whatever happens to the journal's database (failures become one warning)."""

    def __init__(
        self,
        name: str,
        alias: str,
        using: str,
        *,
        schedule: Schedule | None = None,
        stream: Writable | None = None,
    ) -> None:
        from .models import journal_name

        #: The name as journaled: a name too long for the journal's column gets its stand-in.
        self.name = journal_name(name)
        self.alias = alias
        self.using = using
        self.schedule = schedule
        self.stream = stream
        self.run_id: int | None = None
        self.missed = False
        self._started = 0.0
        self._started_at: datetime | None = None
        self._key: tuple[str, str] | None = None
        # One statement per write where the database can (journal/postgresql.py).
        self._one_statement = connections[using].vendor == "postgresql"
        #: The outside monitors' pings of this run (TSLOCK_MONITORS); ``None``: none.
        self.monitor = watch(name, schedule)

    # -- the four ways a run goes ------------------------------------------------------

    def skipped(self, holder: Any | None, *, detail: str = "") -> None:
        """The lock was held elsewhere (``holder``), or the job is paused (``detail``
        ``"paused"``, no holder): one finished ``skipped`` row."""
        self._write(lambda now: self._single(now, outcomes.SKIPPED, held_by=_holder(holder), detail=detail))

    def errored(self, err: BaseException) -> None:
        """The store failed and the job did not run: one finished ``error`` row."""
        # Described inside the write's guard: nothing the journal does reaches the job.
        self._write(lambda now: self._single(now, outcomes.ERROR, detail=describe_failure(err)))
        self._tell_monitors(lambda: (outcomes.ERROR, describe_failure(err)))

    def started(self, held: Any) -> None:
        """The lock is ours and the job is about to run: the ``running`` row."""
        self._started = time.monotonic()
        if self.monitor is not None:
            self.monitor.started()
        record = held.record
        deadline = record.lock_until
        self._write(lambda now: self._start(now, held, record, deadline))
        if self.run_id is not None:
            from ..signals import lock_extended

            lock_extended.connect(_on_extended, dispatch_uid="tslock_journal_extended")
            self._key = (self.alias, held.name)
            with _active_mutex:
                _active[self._key] = self.run_id

    def finished(
        self, exc: BaseException | None = None, *, exit_status: int | None = None, lock_lost: bool = False
    ) -> None:
        """The job ended: ``succeeded``, or ``failed`` when it raised ``exc`` or exited
        with a status other than 0; ``lost`` when its lock was lost while it ran
        (``lock_lost``: keep-alive could not keep it), with how the job ended as detail."""
        self._forget_active()
        self._tell_monitors(lambda: ended_as(exc, exit_status, lock_lost))
        if self.run_id is None:  # the start was not written; the warning is out already
            return
        duration = time.monotonic() - self._started

        def finish(now: datetime) -> None:
            # Described inside the write's guard: nothing the journal does reaches the job.
            outcome, detail = ended_as(exc, exit_status, lock_lost)
            self._finish(now, outcome, duration, detail)

        self._write(finish)
        if not self.missed and listened(run_journaled):  # the alerts listen: see signals.py
            notify(run_journaled, sender=RunRecorder, using=self.using, name=self.name)

    def not_run(self, err: BaseException) -> None:
        """The lock was taken but the job never started (its caller was cancelled on
        the way in, ``err``): the ``running`` row ends ``error``, as a run whose store
        failed does, since the job did not run."""
        self._forget_active()
        detail = cut(
            f"the job did not start: {describe_failure(err)} came after the lock was taken, "
            "and the lock was released",
            DETAIL_LIMIT,
        )
        self._tell_monitors(lambda: (outcomes.ERROR, detail))
        if self.run_id is None:
            return
        duration = time.monotonic() - self._started
        self._write(lambda now: self._finish(now, outcomes.ERROR, duration, detail))

    def _tell_monitors(self, how: Callable[[], tuple[str, str]]) -> None:
        """Hand the run's end, ``how()`` (outcome, detail), to its outside monitors:
        queued, never awaited; evaluated in the monitors' guard."""
        if self.monitor is not None:
            self.monitor.ended(how)

    def _forget_active(self) -> None:
        if self._key is not None:
            with _active_mutex:
                if _active.get(self._key) == self.run_id:
                    del _active[self._key]

    # -- the writes ------------------------------------------------------------------

    def _write(self, work: Any) -> None:
        if self.missed:
            return
        now = datetime.now(timezone.utc)
        conn = connections[self.using]
        try:
            if self._one_statement and not conn.in_atomic_block and conn.settings_dict["AUTOCOMMIT"]:
                work(now)  # one statement in autocommit: atomic by itself, and no BEGIN/COMMIT
            else:
                # Several statements; or, inside the caller's transaction, a savepoint, so
                # that a journal that fails leaves the caller's transaction usable.
                with transaction.atomic(using=self.using):
                    work(now)
        except Exception as err:  # noqa: BLE001 - whatever it is, the job must not notice
            self.missed = True
            self.run_id = None
            if not conn.in_atomic_block:
                with contextlib.suppress(Exception):  # only tidying after the warning's cause
                    conn.close_if_unusable_or_obsolete()
            with contextlib.suppress(Exception):  # the warning, too, must not reach the job
                self._warn_missed(err)

    def _warn_missed(self, err: Exception) -> None:
        """One warning line for a missed write, printed once: through the
        ``tslock_django`` logger when logging has a handler for it, and on the run's
        stream (the command's stderr, or ``sys.stderr``) unless one of those handlers
        already prints on that same file. Without any handler (a project without
        ``LOGGING``) it is not logged: Python's last-resort handler would print it on
        stderr a second time."""
        # One line, whatever the driver's message spans.
        text = cut(" ".join(hide_secrets(message_of(err)).split()), 300)
        line = (
            f"tslock: the journal missed this run of {self.name!r} ({text}); the job itself was not affected"
        )
        stream = self.stream or sys.stderr
        if logger.hasHandlers():
            logger.warning(line)
        if not _printed_by_logging(stream):
            with contextlib.suppress(OSError, ValueError):  # a closed stream must not fail the job
                stream.write(line + "\n")

    def _job(self, now: datetime, **changes: Any) -> None:
        """Update the name's ``Job`` row with ``changes`` (and the provider and schedule
        this run declares) in one statement; a name seen for the first time gets its
        row first."""
        from .models import Job

        fields: dict[str, Any] = {"provider": self.alias}
        schedule = self.schedule
        if schedule is not None:
            fields["schedule"] = schedule.stored
            fields["grace"] = schedule.grace.total_seconds()
            fields.update(postgresql.threshold_columns(schedule))
        jobs = Job.objects.using(self.using).filter(name=self.name)
        if jobs.update(**fields, **changes):
            return
        try:
            with transaction.atomic(using=self.using):
                Job.objects.using(self.using).create(name=self.name, first_seen_at=to_db(now), **fields)
        except DatabaseError:  # created meanwhile by another process
            pass
        jobs.update(**fields, **changes)

    def _single(self, now: datetime, outcome: str, *, held_by: str = "", detail: str = "") -> None:
        from .models import Run

        if self._one_statement:
            with connections[self.using].cursor() as cursor:
                postgresql.single(
                    cursor, self._described(now), outcome=outcome, host=_HOST, pid=os.getpid(),
                    held_by=held_by, detail=detail,
                )  # fmt: skip
            return
        Run.objects.using(self.using).create(
            name=self.name,
            provider=self.alias,
            outcome=outcome,
            started_at=to_db(now),
            finished_at=to_db(now),
            duration=0.0,
            host=_HOST,
            pid=os.getpid(),
            held_by=held_by,
            detail=detail,
        )
        counter = "runs_skipped" if outcome == outcomes.SKIPPED else "runs_error"
        self._job(now, last_attempt_at=to_db(now), last_attempt_outcome=outcome, **{counter: F(counter) + 1})

    def _start(self, now: datetime, held: Any, record: Any, deadline: datetime) -> None:
        from .models import Run

        self._started_at = now
        if self._one_statement:
            with connections[self.using].cursor() as cursor:
                self.run_id = postgresql.start(
                    cursor, self._described(now), host=_HOST, pid=os.getpid(),
                    locked_by=_holder(record), fencing_token=held.fencing_token,
                    deadline=to_db(deadline),
                )  # fmt: skip
            return
        runs = Run.objects.using(self.using)
        # An earlier run of this name still "running" past its deadline is lost: its
        # process died, or it lost its lock (which is why this run could take it).
        lost = runs.filter(name=self.name, outcome=outcomes.RUNNING, deadline__lte=to_db(now)).update(
            outcome=outcomes.LOST
        )
        run = runs.create(
            name=self.name,
            provider=self.alias,
            outcome=outcomes.RUNNING,
            started_at=to_db(now),
            host=_HOST,
            pid=os.getpid(),
            locked_by=_holder(record),
            fencing_token=held.fencing_token,
            deadline=to_db(deadline),
        )
        self._job(
            now,
            last_run_id=run.id,
            last_outcome=outcomes.RUNNING,
            last_started_at=to_db(now),
            last_finished_at=None,
            last_duration=None,
            last_deadline=to_db(deadline),
            last_detail="",
            runs_lost=F("runs_lost") + lost,
        )
        self.run_id = run.id

    def _described(self, now: datetime) -> dict[str, Any]:
        return postgresql.job_description(self.name, self.alias, self.schedule, to_db(now))

    def _finish(self, now: datetime, outcome: str, duration: float, detail: str) -> None:
        from .models import Job, Run

        assert self.run_id is not None and self._started_at is not None
        mine = Run.objects.using(self.using).filter(id=self.run_id)
        if self._one_statement:
            with connections[self.using].cursor() as cursor:
                ended = postgresql.finish(
                    cursor, outcome=outcome, name=self.name, run_id=self.run_id, now=to_db(now),
                    duration=duration, detail=detail, started_at=to_db(self._started_at),
                )  # fmt: skip
        else:
            ended = bool(
                mine.filter(outcome=outcomes.RUNNING).update(
                    outcome=outcome, finished_at=to_db(now), duration=duration, detail=detail
                )
            )
        if not ended:
            # A later run found this one past its deadline and wrote it lost: it ran on
            # after its lock had expired. It stays lost; say how it ended.
            late = cut(
                f"ended {outcome} after its lock had expired" + (f": {detail}" if detail else ""), 1000
            )
            mine.update(finished_at=to_db(now), duration=duration, detail=late)
            return
        if self._one_statement:
            return  # the statement wrote the name's summary too
        fields: dict[str, Any] = {
            "last_outcome": outcome,
            "last_finished_at": to_db(now),
            "last_duration": duration,
            "last_detail": detail,
        }
        if outcome == outcomes.LOST:
            fields["runs_lost"] = F("runs_lost") + 1
        elif outcome == outcomes.ERROR:
            fields["runs_error"] = F("runs_error") + 1
        elif outcome == outcomes.SUCCEEDED:
            fields["last_success_at"] = to_db(self._started_at)
            fields["last_success_duration"] = duration
            fields["last_success_run_id"] = self.run_id
            fields["runs_succeeded"] = F("runs_succeeded") + 1
        else:
            fields["runs_failed"] = F("runs_failed") + 1
        Job.objects.using(self.using).filter(name=self.name, last_run_id=self.run_id).update(**fields)


def _file_of(stream: Any) -> int | None:
    try:
        return int(stream.fileno())  # a command's stderr answers for the stream it wraps
    except (AttributeError, OSError, ValueError):  # a StringIO has no file
        return None


def _printed_by_logging(stream: Any) -> bool:
    """Whether a handler of the ``tslock_django`` logger prints its warnings on the file
    that ``stream`` writes to (a ``StreamHandler`` on stderr, as ``LOGGING`` often has)."""
    target = _file_of(stream)
    if target is None or not logger.isEnabledFor(logging.WARNING):
        return False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if (
                isinstance(handler, logging.StreamHandler)
                and handler.level <= logging.WARNING
                and _file_of(handler.stream) == target
            ):
                return True
        current = current.parent if current.propagate else None
    return False


def _holder(record: Any | None) -> str:
    """A record's ``locked_by`` (written by whoever holds the lock, in a store anyone
    with access may write) as the journal can store it."""
    return storable(str(getattr(record, "locked_by", "") or ""))[:255]


def begin(
    name: str, alias: str, *, schedule: Schedule | None = None, stream: Writable | None = None
) -> RunRecorder | None:
    """The recorder of a run about to start, or ``None`` when the journal is off."""
    using = journal_database()
    if using is None:
        return None
    return RunRecorder(name, alias, using, schedule=schedule, stream=stream)


def _on_extended(*, alias: str, name: str, record: Any = None, **kwargs: Any) -> None:
    """Keep-alive moved a lock's deadline: move its running row's ``deadline`` too, so
    that a long run is not taken for lost."""
    with _active_mutex:
        run_id = _active.get((alias, name))
    if run_id is None or record is None:
        return
    using = journal_database()
    if using is None:
        return
    deadline = to_db(record.lock_until)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # keep-alive's thread: the ORM may run here
        _record_extension(using, run_id, name, deadline)
        return
    # Keep-alive's asyncio task: Django forbids the ORM on the event loop, so the write
    # goes to the thread the journal's other async writes use (``sync_to_async`` with
    # ``thread_sensitive``), in order with them, without holding up keep-alive.
    write = sync_to_async(_record_extension, thread_sensitive=True)(using, run_id, name, deadline)
    task = loop.create_task(write)
    _extensions_in_flight.add(task)  # a task nobody references may be collected unfinished
    task.add_done_callback(_extensions_in_flight.discard)


#: The async keep-alive's journal writes still running (see ``_on_extended``).
_extensions_in_flight: set[asyncio.Task[None]] = set()


def _record_extension(using: str, run_id: int, name: str, deadline: datetime) -> None:
    from .models import Job, Run, journal_name

    try:
        Run.objects.using(using).filter(id=run_id, outcome=outcomes.RUNNING).update(deadline=deadline)
        job = Job.objects.using(using).filter(name=journal_name(name), last_run_id=run_id)
        job.update(last_deadline=deadline)
    except Exception as err:  # noqa: BLE001 - keep-alive must go on whatever the journal does
        logger.warning(
            "tslock: the journal could not record the extension of %r: %s", name, type(err).__name__
        )
