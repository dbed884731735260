"""Which scheduled names are late, failing or running long, asked of the database in a
few queries whatever the number of names: the metrics ask it at every scrape, the health
check at every probe and the alerts' evaluation every minute, and a name pattern such as
``sync-{account_id}`` makes thousands.

:func:`summary` is one aggregate over the ``Job`` table, grouped by the schedule, grace
and ``max_duration`` the names' runs declared: per group the number of names, their run
counts, the oldest "since" (last success, else first seen), the oldest start of a run
still running, and how many ended failing or lost. :func:`alerting` reads that: a group
with no failure whose oldest "since" is recent enough, and whose oldest running start is
within its ``max_duration``, has no alerting name, so it is not read at all. Paused names
are never candidates. The candidates of the other groups
(and the names of ``TSLOCK_SCHEDULES``, which override a declared schedule) are
fetched by name, at most a bounded number, and the journal's rule
(:func:`.status.status_of`) decides each: the SQL only narrows, the rule stays in one
place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Count, Min, Q, Sum
from django.db.models.functions import Coalesce

from . import outcomes
from .models import Job, journal_name
from .recorder import from_db, to_db
from .schedules import Schedule, stored_schedule
from .status import ALERTING, FAILURES, JobStatus, judge, record_first_seen, schedules_from_settings

#: The ``Job`` columns counting runs by outcome.
RUN_FIELDS = ("runs_succeeded", "runs_failed", "runs_lost", "runs_skipped", "runs_error")
#: At most this many candidates are read and judged by the status rule at one call; the
#: candidates past them are counted (by the database) as overdue.
EVALUATED = 1000


@dataclass(frozen=True)
class Group:
    """The names whose runs declared one schedule and grace."""

    schedule: str
    grace: float | None
    names: int
    #: The oldest of the names' last success (first seen, for a name without one).
    oldest_since: datetime | None
    #: Names whose last run failed, errored, was lost, or is running past its deadline.
    failing: int
    #: The names' ``max_duration`` (seconds), and the oldest start of their runs still
    #: ``running`` (``None`` when none is).
    max_duration: float | None = None
    oldest_running: datetime | None = None


@dataclass(frozen=True)
class Summary:
    """The whole ``Job`` table in one row per group."""

    names: int
    #: Runs of every name by ``Job`` column (:data:`RUN_FIELDS`).
    runs: dict[str, int]
    groups: list[Group]


@dataclass(frozen=True)
class Alerting:
    """The late, failing or running-long scheduled names."""

    count: int
    #: The first of them by name (at most the ``limit`` asked for), each with its
    #: ``Job`` row.
    found: list[tuple[Job, JobStatus]] = field(default_factory=list)


def failing_now(now: datetime) -> Q:
    """Rows whose last run failed, errored or was lost, as :func:`.status.outcome_now`
    sees it."""
    return Q(last_outcome__in=list(FAILURES)) | Q(
        last_outcome=outcomes.RUNNING, last_deadline__lte=to_db(now)
    )


def summary(using: str, now: datetime, *, runs: bool = True) -> Summary:
    """One aggregate query over the ``Job`` table (see the module); without ``runs``,
    the run counts are left out (all zero), which the health check does not need."""
    rows = (
        Job.objects.using(using)
        .values("schedule", "grace", "max_duration")
        .annotate(
            names=Count("pk"),
            oldest_since=Min(Coalesce("last_success_at", "first_seen_at")),
            oldest_running=Min("last_started_at", filter=Q(last_outcome=outcomes.RUNNING)),
            failing=Count("pk", filter=failing_now(now)),
            **{column: Sum(column) for column in (RUN_FIELDS if runs else ())},
        )
        .order_by()
    )
    totals = dict.fromkeys(RUN_FIELDS, 0)
    groups = []
    for row in rows:
        counted: dict[str, Any] = dict(row)
        for column in RUN_FIELDS:
            totals[column] += counted.get(column) or 0
        groups.append(
            Group(
                row["schedule"],
                row["grace"],
                row["names"],
                from_db(row["oldest_since"]),
                row["failing"],
                row["max_duration"],
                from_db(row["oldest_running"]),
            )
        )
    return Summary(sum(g.names for g in groups), totals, groups)


def late_before(schedule: Schedule, now: datetime) -> datetime | None:
    """A name of ``schedule`` whose "since" is at or after this cannot be late at ``now``.

    A period schedule is late once one period and grace have passed since; a cron
    schedule only once a due time after "since" is older than grace."""
    if schedule.period is not None:
        return now - schedule.period - schedule.grace
    return schedule.last_due(now - schedule.grace)


def alerting(
    using: str,
    now: datetime,
    *,
    limit: int,
    groups: list[Group] | None = None,
    evaluate: int = EVALUATED,
    record: bool = True,
) -> Alerting:
    """The late, failing or running-long scheduled names at ``now``: how many, and the
    first ``limit`` by name with their rows. ``groups`` is :func:`summary`'s, when the
    caller has it. Without ``record``, a name of ``TSLOCK_SCHEDULES`` the journal has not
    seen is not given its row (an evaluation at another instant than now must not date
    a first sight).

    Raises:
        ValueError: ``TSLOCK_SCHEDULES`` is malformed.
        DatabaseError: the journal could not be read.
    """
    # Names as journaled (a long name's stand-in); a configured name the journal has not
    # seen yet gets its row now (its "first seen"), else it could never become late.
    configured = {journal_name(name): schedule for name, schedule in schedules_from_settings().items()}
    if configured and record:
        seen = set(Job.objects.using(using).filter(name__in=list(configured)).values_list("name", flat=True))
        record_first_seen(using, set(configured) - seen, now)
    if groups is None:
        groups = summary(using, now, runs=False).groups
    suspects = [q for q in (_suspects(group, now) for group in groups) if q is not None]
    wanted = []
    if suspects:
        wanted.append(reduce(or_, suspects) & ~Q(name__in=list(configured)))
    if configured:
        wanted.append(Q(name__in=list(configured)))
    if not wanted:
        return Alerting(0)
    candidates = (
        Job.objects.using(using)
        .annotate(since=Coalesce("last_success_at", "first_seen_at"))
        .filter(reduce(or_, wanted))
    )
    evaluate = max(evaluate, limit)
    rows: list[Job] = list(candidates.order_by("name")[:evaluate])
    judged = judge(using, {job.name: job for job in rows}, configured, now)
    found = [(job, judged[job.name]) for job in rows if judged[job.name].status in ALERTING]
    unjudged = candidates.count() - evaluate if len(rows) == evaluate else 0
    return Alerting(len(found) + unjudged, found[:limit])


def _suspects(group: Group, now: datetime) -> Q | None:
    """The rows of ``group`` that may be late, failing or running long, or ``None`` when
    none can be."""
    if not group.schedule:
        return None
    grace = timedelta(seconds=group.grace) if group.grace is not None else None
    try:
        threshold = late_before(stored_schedule(group.schedule, grace), now)
    except ValueError:  # a schedule an older release accepted: it can fail, not be late
        threshold = None
    may_be_late = threshold is not None and group.oldest_since is not None and group.oldest_since < threshold
    started_before = now - timedelta(seconds=group.max_duration) if group.max_duration is not None else None
    may_run_long = (
        started_before is not None
        and group.oldest_running is not None
        and group.oldest_running < started_before
    )
    if not may_be_late and not may_run_long and not group.failing:
        return None
    which = failing_now(now)
    if may_be_late:
        assert threshold is not None  # checked above
        which |= Q(since__lt=to_db(threshold))
    if may_run_long:
        assert started_before is not None  # checked above
        which |= Q(last_outcome=outcomes.RUNNING, last_started_at__lt=to_db(started_before))
    # NULL is not equal to NULL in SQL: a group without grace or bound says so with isnull.
    same = Q(schedule=group.schedule)
    same &= Q(grace=group.grace) if group.grace is not None else Q(grace=None)
    same &= Q(max_duration=group.max_duration) if group.max_duration is not None else Q(max_duration=None)
    return same & Q(paused_at=None) & which


@dataclass(frozen=True)
class Listing:
    """What ``tslock overdue`` lists: every scheduled name that is not ``ok``."""

    #: By name: the alerting ones (at most :data:`EVALUATED`), the new and the paused.
    found: list[JobStatus]
    #: Candidates past those judged, not listed: at most this many more are alerting
    #: (:func:`alerting` counts them so).
    unlisted: int = 0


def not_ok(using: str, now: datetime, *, record: bool = True, limit: int = EVALUATED) -> Listing:
    """The scheduled names that are not ``ok`` at ``now``, in a few queries whatever the
    number of names: the alerting ones as :func:`alerting` finds them, the names that
    never ran (``new``, or ``late`` "never ran") and the paused ones, each kind read by
    an indexed or narrow query and at most ``limit`` of each. A name of
    ``TSLOCK_SCHEDULES`` without a row is judged as never seen (and, with ``record``,
    given its row).

    Raises:
        ValueError: ``TSLOCK_SCHEDULES`` is malformed.
        DatabaseError: the journal could not be read.
    """
    configured = {journal_name(name): schedule for name, schedule in schedules_from_settings().items()}
    found = alerting(using, now, limit=limit, evaluate=limit, record=record)
    statuses = {status.name: status for _, status in found.found}
    jobs = Job.objects.using(using)
    scheduled = ~Q(schedule="") | Q(name__in=list(configured))
    quiet = scheduled & (Q(last_started_at=None) | ~Q(paused_at=None))
    rows: dict[str, Job | None] = {
        job.name: job for job in jobs.filter(quiet).exclude(name__in=list(statuses)).order_by("name")[:limit]
    }
    seen = set(jobs.filter(name__in=list(configured)).values_list("name", flat=True))
    rows.update(dict.fromkeys(set(configured) - seen - set(statuses)))
    for name, status in judge(using, rows, configured, now).items():
        if status.status != "ok":
            statuses[name] = status
    listed = [statuses[name] for name in sorted(statuses)]
    # A name that never ran may be late and listed here though past the judged ones.
    return Listing(listed, max(found.count - sum(s.status in ALERTING for s in listed), 0))
