"""Reading the journal: each scheduled job's status; a name's runs newest first; and a
run's outcome as it stands now (``lost`` once a ``running`` row's deadline has passed).

The status rule, like a check of healthchecks.io (first match wins):
- *paused*: ``tslock pause`` set ``Job.paused_at`` (listed, never alerting);
- *new*: the name has never run, and its first due time since the journal first saw
  it has not passed by more than grace (listed, not alerting);
- *late*, "never ran": the name has never run and that first due time plus grace has
  passed (a crontab line that was never installed alerts);
- *running_long*: its last run is still running (not lost) and started more than the
  schedule's ``max_duration`` ago;
- *failing*: its last ``failures_before_alert`` runs (1 unless set) failed, errored or
  were lost, in a row;
- *late*: a period schedule whose last success is older than one period plus grace; a
  cron schedule with no success since its last due time, once grace has passed (a
  name that never succeeded counts from when it was first seen);
- *ok*: none of these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from ..core.human import format_duration
from ..core.times import format_time
from . import outcomes
from .models import Job, Run, journal_name
from .recorder import from_db, to_db
from .schedules import Schedule, configured_schedules, stored_schedule

#: The statuses that make ``tslock overdue`` exit 1 (and that a notification announces).
ALERTING = ("late", "failing", "running_long")
STATUSES = ("new", "ok", "late", "failing", "running_long", "paused")
#: The outcomes (as of now) that count towards ``failing``.
FAILURES = (outcomes.FAILED, outcomes.ERROR, outcomes.LOST)


def outcome_now(outcome: str, deadline: datetime | None, now: datetime) -> str:
    """``outcome`` as it stands at ``now``: a ``running`` row past its deadline is ``lost``."""
    if outcome == outcomes.RUNNING and deadline is not None and deadline <= now:
        return outcomes.LOST
    return outcome


@dataclass(frozen=True)
class JobStatus:
    """One scheduled name as ``tslock overdue``, the Runs page and the metrics see it."""

    name: str
    status: str
    reason: str
    schedule: Schedule | None
    last_outcome: str
    last_started_at: datetime | None
    last_finished_at: datetime | None
    last_duration: float | None
    last_success_at: datetime | None
    #: When it became (or becomes) due: for a late job, the missed due time.
    due_at: datetime | None
    provider: str = ""
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "schedule": self.schedule.text if self.schedule else None,
            "tz": self.schedule.tz if self.schedule else None,
            "last_outcome": self.last_outcome or None,
            "last_started_at": iso(self.last_started_at),
            "last_success_at": iso(self.last_success_at),
            "due_at": iso(self.due_at),
        }


def schedules_from_settings() -> dict[str, Schedule]:
    """``TSLOCK_SCHEDULES``, read (a bad entry raises ``ValueError``)."""
    return configured_schedules(getattr(settings, "TSLOCK_SCHEDULES", None))


def job_schedule(job: Job | None, configured: Schedule | None) -> Schedule | None:
    """The schedule of a name: ``TSLOCK_SCHEDULES`` first, else what its last run's
    decorator declared (kept in its ``Job`` row)."""
    if configured is not None:
        return configured
    if job is None or not job.schedule:
        return None
    grace = timedelta(seconds=job.grace) if job.grace is not None else None
    try:
        stored = stored_schedule(job.schedule, grace)
    except ValueError:  # a schedule an older release accepted; not this reader's to fail on
        return None
    bound = timedelta(seconds=job.max_duration) if job.max_duration is not None else None
    return replace(stored, failures_before_alert=job.failures_before_alert or 1, max_duration=bound)


def status_of(
    name: str, job: Job | None, schedule: Schedule | None, now: datetime, *, failures: int | None = None
) -> JobStatus:
    """The status of one name at ``now`` (see the module's rule). ``job`` is ``None``
    for a name the journal has not seen before ``now``. ``failures`` is how many of the
    name's newest runs failed in a row (:func:`failures_in_a_row`); ``None`` counts
    only the last run, enough where ``failures_before_alert`` is 1."""
    found = _status(name, job, schedule, now, failures)
    paused_at = from_db(job.paused_at) if job is not None else None
    if paused_at is not None:
        return replace(found, status="paused", reason=f"paused since {format_time(paused_at)}")
    return found


def _status(
    name: str, job: Job | None, schedule: Schedule | None, now: datetime, failures: int | None
) -> JobStatus:
    if job is None or job.last_started_at is None:
        return _never_ran(name, job, schedule, now)
    started = from_db(job.last_started_at)
    assert started is not None  # checked above
    finished = from_db(job.last_finished_at)
    success = from_db(job.last_success_at)
    outcome = outcome_now(job.last_outcome, from_db(job.last_deadline), now)
    common: dict[str, Any] = {
        "schedule": schedule,
        "last_outcome": outcome,
        "last_started_at": started,
        "last_finished_at": finished,
        "last_duration": job.last_duration,
        "last_success_at": success,
        "provider": job.provider,
        "detail": job.last_detail,
    }
    due = _due(schedule, _since(job, success), success is not None, now)
    bound = schedule.max_duration if schedule is not None else None
    if outcome == outcomes.RUNNING and bound is not None and now - started > bound:
        reason = (
            f"running since {format_time(started)}, longer than its max_duration {format_duration(bound)}"
        )
        return JobStatus(name, "running_long", reason, due_at=due, **common)
    needed = schedule.failures_before_alert if schedule is not None else 1
    in_a_row = failures if failures is not None else 1
    if outcome in FAILURES and in_a_row >= needed:
        if outcome == outcomes.LOST:
            reason = f"last run (started {format_time(started)}) was lost: its lock ended without a result"
        else:
            reason = f"last run {outcome} at {format_time(finished or started)}"
            if job.last_detail:
                reason += f": {job.last_detail}"
        if needed > 1:
            reason = f"{in_a_row} runs in a row failed; {reason}"
        return JobStatus(name, "failing", reason, due_at=due, **common)
    if schedule is not None and due is not None and now > due + schedule.grace:
        since = f"last success {format_time(success)}" if success else "no success yet"
        reason = (
            f"due at {format_time(due)} and not done within grace {format_duration(schedule.grace)} ({since})"
        )
        return JobStatus(name, "late", reason, due_at=due, **common)
    next_due = due if due is not None and due > now else (schedule.next_due(now) if schedule else None)
    reason = "on time" if schedule else "not scheduled"
    if outcome in FAILURES:  # below its failures_before_alert
        reason = f"last run {outcome}, {in_a_row} of {needed} failures in a row before it is failing"
    return JobStatus(name, "ok", reason, due_at=next_due, **common)


def failures_in_a_row(
    using: str, jobs: Iterable[tuple[Job, Schedule | None]], now: datetime
) -> dict[str, int]:
    """How many of each name's newest runs failed, errored or were lost in a row (skips
    do not count and do not break a row), for the names whose last run is a failure and
    whose ``failures_before_alert`` is more than 1; counted up to that number. One query,
    reading at most that many runs of each name (its ``(name, started_at)`` index)."""
    needed: dict[str, int] = {}
    for job, schedule in jobs:
        threshold = schedule.failures_before_alert if schedule is not None else 1
        last = outcome_now(job.last_outcome, from_db(job.last_deadline), now)
        if threshold > 1 and last in FAILURES:
            needed[job.name] = threshold
    if not needed:
        return {}
    newest = Window(RowNumber(), partition_by=[F("name")], order_by=[F("started_at").desc(), F("id").desc()])
    rows = (
        Run.objects.using(using)
        .filter(name__in=list(needed))
        .exclude(outcome=outcomes.SKIPPED)
        .annotate(place=newest)
        .filter(place__lte=max(needed.values()))
        .order_by("name", "place")
        .values_list("name", "outcome", "deadline")
    )
    counted = dict.fromkeys(needed, 0)
    broken: set[str] = set()
    for name, outcome, deadline in rows:
        if name in broken or counted[name] >= needed[name]:
            continue
        if outcome_now(outcome, from_db(deadline), now) in FAILURES:
            counted[name] += 1
        else:
            broken.add(name)
    return counted


def judge(
    using: str, rows: Mapping[str, Job | None], configured: Mapping[str, Schedule], now: datetime
) -> dict[str, JobStatus]:
    """The status of each name of ``rows`` (its ``Job`` row, or ``None``) at ``now``,
    with its failed runs in a row counted where its threshold needs them."""
    schedules = {name: job_schedule(job, configured.get(name)) for name, job in rows.items()}
    in_a_row = failures_in_a_row(
        using, [(job, schedules[name]) for name, job in rows.items() if job is not None], now
    )
    return {
        name: status_of(name, job, schedules[name], now, failures=in_a_row.get(name))
        for name, job in rows.items()
    }


def _due(
    schedule: Schedule | None, since: datetime | None, succeeded: bool, now: datetime
) -> datetime | None:
    """When the job was next due after ``since`` (its last success, or when first seen)."""
    if schedule is None or since is None:
        return None
    if schedule.period is not None:
        return since + schedule.period
    last_due = schedule.last_due(now)
    if last_due is not None and last_due > since:
        return last_due  # a due time passed since the last success (or first sight)
    return schedule.next_due(now)


def _since(job: Job, success: datetime | None) -> datetime | None:
    """What lateness counts from: the last success (else when the journal first saw the
    name), or the last resume if later: a paused job is not late the moment it resumes."""
    since = success or from_db(job.first_seen_at)
    resumed = from_db(job.resumed_at)
    if resumed is not None and (since is None or resumed > since):
        return resumed
    return since


def _never_ran(name: str, job: Job | None, schedule: Schedule | None, now: datetime) -> JobStatus:
    """A name without a run: ``new`` until its first due time after the journal first
    saw it, plus grace; ``late`` after that."""
    first_seen = (_since(job, None) if job is not None else None) or now
    due = schedule.next_due(first_seen) if schedule is not None else None
    common: dict[str, Any] = {
        "schedule": schedule,
        "last_outcome": "",
        "last_started_at": None,
        "last_finished_at": None,
        "last_duration": None,
        "last_success_at": None,
        "due_at": due,
        "provider": job.provider if job is not None else "",
    }
    if schedule is not None and due is not None and now > due + schedule.grace:
        reason = (
            f"never ran (scheduled since {format_time(first_seen)}; first due at {format_time(due)}, "
            f"grace {format_duration(schedule.grace)})"
        )
        return JobStatus(name, "late", reason, **common)
    return JobStatus(name, "new", "has never run", **common)


def record_first_seen(using: str, names: set[str], now: datetime) -> dict[str, Job]:
    """Record ``now`` as when the journal first saw each scheduled name of ``names``
    that has no row, and return the rows as they now stand (another process may have
    made one first). A name in ``TSLOCK_SCHEDULES`` may never run, so its row cannot
    wait for a run: without one it would be ``new`` for ever. One insert for them all,
    made only while rows are missing; a journal that cannot be written (a read-only
    user, a replica) leaves them ``new`` from ``now`` instead of failing the reader."""
    if not names:
        return {}
    jobs = Job.objects.using(using)
    try:
        with transaction.atomic(using=using):  # a savepoint inside a caller's transaction
            jobs.bulk_create(
                [Job(name=name, first_seen_at=to_db(now)) for name in sorted(names)], ignore_conflicts=True
            )
    except DatabaseError:
        return {}
    return {job.name: job for job in jobs.filter(name__in=names)}


def statuses(
    using: str, *, now: datetime | None = None, names: Iterable[str] | None = None, record: bool = True
) -> list[JobStatus]:
    """The status of every scheduled name (``TSLOCK_SCHEDULES`` and names whose runs
    declared a schedule), or of ``names``, sorted by name. One query for the rows, and
    one write the first time a name of ``TSLOCK_SCHEDULES`` is seen (see
    :func:`record_first_seen`), unless ``record`` is false: an evaluation at another
    instant than now (``tslock overdue --at``) must not date a first sight.
    Names are matched as journaled (:func:`journal_name`).

    Raises:
        DatabaseError: the journal could not be read.
        ValueError: ``TSLOCK_SCHEDULES`` is malformed.
    """
    now = now or datetime.now(timezone.utc)
    configured = {journal_name(name): schedule for name, schedule in schedules_from_settings().items()}
    jobs = Job.objects.using(using)
    if names is not None:
        wanted = {journal_name(name) for name in names}
        rows = {job.name: job for job in jobs.filter(name__in=wanted)}
    else:
        rows = {job.name: job for job in jobs.exclude(schedule="")}
        rows.update({job.name: job for job in jobs.filter(name__in=set(configured) - set(rows))})
        wanted = set(rows) | set(configured)
    if record:
        unseen = {name for name in wanted if name in configured} - set(rows)
        rows.update(record_first_seen(using, unseen, now))
    judged = judge(using, {name: rows.get(name) for name in wanted}, configured, now)
    return [judged[name] for name in sorted(wanted)]


def runs(
    using: str,
    *,
    name: str | None = None,
    outcome: str | None = None,
    limit: int = 20,
    before: tuple[datetime, int] | None = None,
    after: tuple[datetime, int] | None = None,
) -> list[Run]:
    """Runs newest first (an index range: ``(name, started_at)`` or ``started_at``),
    at most ``limit``, older than the keyset ``before`` (a run's ``started_at`` and
    ``id``), or the ``limit`` oldest of those newer than ``after`` (a page back; still
    returned newest first). ``outcome="lost"`` finds the ``running`` rows past their
    deadline too."""
    query = Run.objects.using(using)
    if name is not None:
        query = query.filter(name=journal_name(name))
    now = datetime.now(timezone.utc)
    if outcome == outcomes.LOST:
        query = query.filter(Q(outcome=outcomes.LOST) | Q(outcome=outcomes.RUNNING, deadline__lte=to_db(now)))
    elif outcome == outcomes.RUNNING:
        query = query.filter(Q(outcome=outcomes.RUNNING) & (Q(deadline__gt=to_db(now)) | Q(deadline=None)))
    elif outcome is not None:
        query = query.filter(outcome=outcome)
    if before is not None:
        at, run_id = before
        query = query.filter(Q(started_at__lt=to_db(at)) | Q(started_at=to_db(at), id__lt=run_id))
    if after is not None:
        at, run_id = after
        query = query.filter(Q(started_at__gt=to_db(at)) | Q(started_at=to_db(at), id__gt=run_id))
        return list(reversed(query.order_by("started_at", "id")[:limit]))
    return list(query.order_by("-started_at", "-id")[:limit])
