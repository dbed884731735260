"""The Runs page and a name's history of runs, read from the journal a page at a time.

The Runs page lists the journal's ``Job`` table (one row per name, keyed by name) in
name order with keyset pages: ``?after=NAME`` and ``?before=NAME``, never OFFSET, so the
first page reads page-size rows at 10 or 10,000 names. Search (a substring of the name)
and the outcome filter are SQL. A status (new, ok, late, failing, ...) is decided by the
journal's own rule (:func:`tslock_django.journal.status.status_of`), which needs the
schedule and the clock: SQL narrows the candidates, the rule decides, and one page view
reads at most ``SCAN_BATCHES`` batches of a page each; when that is not enough to fill a
page, the page says so and its Next link goes on from where the reading stopped.

A name's history reads ``tslock_run`` through its ``(name, started_at)`` index, newest
first, with ``(started_at, id)`` keyset pages.

The journal's text (a run's detail, holders, a status's reason) is shown scrubbed
(:func:`~tslock_django.core.scrubbing.hide_secrets`), so rows written before it was
scrubbed where it is stored show no secret either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.db import DatabaseError
from django.db.models import F, Max, Q
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse
from django.utils.http import urlencode

from ..core.scrubbing import hide_secrets
from ..journal import outcomes
from ..journal.models import Job, Notification, Run, journal_name
from ..journal.recorder import from_db, journal_database, to_db
from ..journal.schedules import Schedule
from ..journal.status import (
    FAILURES,
    STATUSES,
    JobStatus,
    failures_in_a_row,
    job_schedule,
    outcome_now,
    record_first_seen,
    runs,
    schedules_from_settings,
    status_of,
)
from .frame import ListFilter, ListFrame

if TYPE_CHECKING:
    from .model_admins import RunsAdmin

logger = logging.getLogger("tslock_django.admin")

SEARCH_VAR = "q"
STATUS_VAR = "status"
OUTCOME_VAR = "outcome"
AFTER_VAR = "after"
BEFORE_VAR = "before"
NAME_VAR = "name"

#: "Not scheduled" as a status filter value (a name without a schedule has no status).
UNSCHEDULED = "unscheduled"
STATUS_FILTERS: dict[str, str] = {
    "": "All",
    **{status: status for status in STATUSES},
    UNSCHEDULED: "not scheduled",
}
#: The outcome filter: the last run's outcome, or (skipped, error) the newest attempt's.
OUTCOME_FILTERS: dict[str, str] = {"": "All", **{outcome: outcome for outcome in outcomes.OUTCOMES}}
#: At most this many batches (of a page's size) are read per page view when a status
#: filter must be checked row by row.
SCAN_BATCHES = 20


@dataclass(frozen=True)
class RunsFilters:
    """The Runs page's query string; unknown filter values fall back to "All"."""

    search: str
    status: str
    outcome: str
    after: str
    before: str

    @classmethod
    def from_query(cls, params: QueryDict) -> RunsFilters:
        status = params.get(STATUS_VAR, "")
        outcome = params.get(OUTCOME_VAR, "")
        return cls(
            search=params.get(SEARCH_VAR, "").strip(),
            status=status if status in STATUS_FILTERS else "",
            outcome=outcome if outcome in OUTCOME_FILTERS else "",
            after=params.get(AFTER_VAR, ""),
            before="" if params.get(AFTER_VAR) else params.get(BEFORE_VAR, ""),
        )

    def link(self, **changes: str) -> str:
        """This page's URL with ``changes``; without a cursor it is the first page."""
        values = {SEARCH_VAR: self.search, STATUS_VAR: self.status, OUTCOME_VAR: self.outcome}
        values.update(changes)
        return "?" + urlencode({k: v for k, v in values.items() if v})


@dataclass(frozen=True)
class JobRow:
    """One name as the Runs page shows it, computed against one ``now``."""

    name: str
    job: Job | None
    schedule: Schedule | None
    #: The journal's status; ``None`` for a name without a schedule.
    status: JobStatus | None
    last_outcome: str
    history_url: str
    now: datetime
    #: The name's newest notification (:func:`with_notifications`), if any.
    notification: Notification | None = None

    @property
    def paused_at(self) -> datetime | None:
        """When the job was paused (``tslock pause`` or the Pause button); ``None``: it runs."""
        return from_db(self.job.paused_at) if self.job else None

    @property
    def notified_at(self) -> datetime | None:
        return from_db(self.notification.at) if self.notification else None

    @property
    def notification_pending(self) -> bool:
        """The newest notification is still to reach a channel (``sent_at`` not set)."""
        return self.notification is not None and self.notification.sent_at is None

    @property
    def notification_title(self) -> str:
        found = self.notification
        if found is None:
            return ""
        title = f"{found.previous or 'ok'} -> {found.status}: {hide_secrets(found.reason)}"
        if found.sent_at is None and found.last_error:
            title += f" (last channel failure: {hide_secrets(found.last_error)})"
        return title

    @property
    def status_label(self) -> str:
        return self.status.status if self.status else "—"

    @property
    def status_title(self) -> str:
        return hide_secrets(self.status.reason) if self.status else "not scheduled"

    @property
    def schedule_label(self) -> str:
        return self.schedule.describe() if self.schedule else ""

    @property
    def provider(self) -> str:
        return self.job.provider if self.job else ""

    @property
    def started_at(self) -> datetime | None:
        return from_db(self.job.last_started_at) if self.job else None

    @property
    def last_success_at(self) -> datetime | None:
        return from_db(self.job.last_success_at) if self.job else None

    @property
    def due_at(self) -> datetime | None:
        return self.status.due_at if self.status else None

    @property
    def due_in_zone(self) -> str:
        """The due time on the wall clock of the schedule's own zone (``""`` when the
        schedule names none: the page's times are then in its zone already), e.g.
        ``2026-03-29 03:00 Europe/Berlin``."""
        if self.due_at is None or self.schedule is None or not self.schedule.tz:
            return ""
        return f"{self.due_at.astimezone(ZoneInfo(self.schedule.tz)):%Y-%m-%d %H:%M} {self.schedule.tz}"

    @property
    def past_due(self) -> bool:
        """The due time shown has passed (a late or failing job's missed due time)."""
        return self.due_at is not None and self.due_at <= self.now

    @property
    def duration_label(self) -> str:
        if self.job is None or self.job.last_started_at is None:
            return "—"
        if self.last_outcome == outcomes.RUNNING:
            return "running"
        return format_duration(self.job.last_duration)

    @property
    def newer_attempt(self) -> str:
        """``"skipped"`` or ``"error"`` when the newest thing journaled for this name is a
        skip or a store error (after its last run), else ``""``."""
        job = self.job
        if job is None or not job.last_attempt_at or not job.last_attempt_outcome:
            return ""
        if job.last_started_at is None or job.last_attempt_at > job.last_started_at:
            return job.last_attempt_outcome
        return ""

    @property
    def newer_attempt_at(self) -> datetime | None:
        return from_db(self.job.last_attempt_at) if self.job else None


@dataclass(frozen=True)
class RunRow:
    """One run as a history page shows it."""

    run: Run
    outcome: str  # as it stands now: a running row past its deadline is lost

    @property
    def started_at(self) -> datetime | None:
        return from_db(self.run.started_at)

    @property
    def detail(self) -> str:
        return hide_secrets(self.run.detail)

    @property
    def locked_by(self) -> str:
        return hide_secrets(self.run.locked_by)

    @property
    def held_by(self) -> str:
        return hide_secrets(self.run.held_by)

    @property
    def finished_at(self) -> datetime | None:
        return from_db(self.run.finished_at)

    @property
    def duration_label(self) -> str:
        if self.outcome == outcomes.RUNNING:
            return "running"
        if self.run.finished_at is None:
            return "—"
        return format_duration(self.run.duration)


def format_duration(seconds: float | None) -> str:
    """``"0.42 s"``, ``"12.3 s"``, ``"4m 12s"``, ``"2h 5m"`` or ``"—"``."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


# -- the Runs page ------------------------------------------------------------------------


def _outcome_filter(outcome: str, now: datetime) -> Q:
    """The SQL of the outcome filter over ``Job`` rows, exact at ``now``."""
    now_db = to_db(now)
    if outcome == outcomes.RUNNING:
        return Q(last_outcome=outcomes.RUNNING) & (Q(last_deadline__gt=now_db) | Q(last_deadline=None))
    if outcome == outcomes.LOST:
        return Q(last_outcome=outcomes.LOST) | Q(last_outcome=outcomes.RUNNING, last_deadline__lte=now_db)
    if outcome in (outcomes.SKIPPED, outcomes.ERROR):
        # The newest attempt: a skip or store error after the last run (if any).
        return Q(last_attempt_outcome=outcome) & (
            Q(last_started_at=None) | Q(last_attempt_at__gt=F("last_started_at"))
        )
    return Q(last_outcome=outcome)


def _journal_settings(request: HttpRequest) -> tuple[str | None, dict[str, Schedule], bool]:
    """The journal's database alias (``None`` when there is none to read), the schedules of
    ``TSLOCK_SCHEDULES``, and whether the journal is turned off; malformed settings are
    an error message on the page."""
    try:
        using = journal_database()
        configured = schedules_from_settings()
    except ValueError as err:
        messages.error(request, f"The journal's settings are not valid: {err}")
        return None, {}, False
    return using, configured, using is None


def _status_filter(status: str, configured: set[str], now: datetime) -> Q:
    """SQL that keeps every name the status filter could show (and, for new and
    failing, only those): the journal's rule then decides row by row."""
    if status == UNSCHEDULED:
        return Q(schedule="") & ~Q(name__in=configured)
    scheduled = ~Q(schedule="") | Q(name__in=configured)
    if status == "paused":
        return scheduled & ~Q(paused_at=None)
    scheduled &= Q(paused_at=None)
    failing = Q(last_outcome__in=list(FAILURES)) | Q(
        last_outcome=outcomes.RUNNING, last_deadline__lte=to_db(now)
    )
    if status == "new":
        return scheduled & Q(last_started_at=None)
    if status == "failing":
        return scheduled & ~Q(last_started_at=None) & failing
    if status == "running_long":
        return scheduled & Q(last_outcome=outcomes.RUNNING)
    if status == "late":  # a name that never ran too, once its first due time has passed
        return scheduled
    # ok: the rule decides (a failure below failures_before_alert is ok too)
    return scheduled & ~Q(last_started_at=None)


@dataclass
class JobPage:
    rows: list[JobRow]
    next_after: str = ""
    previous_before: str = ""
    #: Set when the page stopped reading before it was full (a status filter).
    stopped_at: str = ""


def _row(
    admin: RunsAdmin,
    name: str,
    job: Job | None,
    configured: Mapping[str, Schedule],
    now: datetime,
    failures: int | None = None,
) -> JobRow:
    schedule = job_schedule(job, configured.get(name))
    status = status_of(name, job, schedule, now, failures=failures) if schedule is not None else None
    last_outcome = ""
    if job is not None and job.last_outcome:
        last_outcome = outcome_now(job.last_outcome, from_db(job.last_deadline), now)
    return JobRow(
        name=name,
        job=job,
        schedule=schedule,
        status=status,
        last_outcome=last_outcome,
        history_url=admin.url("history") + "?" + urlencode({NAME_VAR: name}),
        now=now,
    )


def read_jobs(
    admin: RunsAdmin,
    using: str,
    filters: RunsFilters,
    configured: Mapping[str, Schedule],
    now: datetime,
    size: int,
) -> JobPage:
    """One page of ``Job`` rows in name order after (or before) the filters' cursor."""
    query = Job.objects.using(using).all()
    if filters.search:
        query = query.filter(name__icontains=filters.search)
    if filters.outcome:
        query = query.filter(_outcome_filter(filters.outcome, now))
    if filters.status:
        query = query.filter(_status_filter(filters.status, set(configured), now))
    backward = bool(filters.before)
    cursor = filters.before or filters.after
    query = query.order_by("-name" if backward else "name")
    found: list[JobRow] = []
    full = False
    stopped_at = ""
    # Without a status filter the SQL is exact and one batch answers; with one, the
    # journal's rule decides each row and a bounded number of batches is read.
    for _ in range(SCAN_BATCHES if filters.status else 1):
        batch_query = query
        if cursor:
            batch_query = query.filter(name__lt=cursor) if backward else query.filter(name__gt=cursor)
        batch = list(batch_query[: size + 1])
        in_a_row = failures_in_a_row(
            using, [(job, job_schedule(job, configured.get(job.name))) for job in batch], now
        )
        for job in batch:
            row = _row(admin, job.name, job, configured, now, in_a_row.get(job.name))
            if _wanted(row, filters.status):
                found.append(row)
                if len(found) > size:
                    full = True
                    break
        if full or len(batch) <= size:
            break
        cursor = batch[-1].name
    else:
        if filters.status and not full:
            stopped_at = cursor
    more = full or bool(stopped_at)
    rows = found[:size]
    page = JobPage(rows=list(reversed(rows)) if backward else rows)
    if backward:
        page.next_after = page.rows[-1].name if page.rows else ""
        if more:
            page.previous_before = stopped_at or (page.rows[0].name if page.rows else "")
    else:
        if filters.after and page.rows:
            page.previous_before = page.rows[0].name
        if more:
            page.next_after = stopped_at or page.rows[-1].name
    page.stopped_at = stopped_at
    return page


def _wanted(row: JobRow, status: str) -> bool:
    if not status:
        return True
    if status == UNSCHEDULED:
        return row.status is None
    return row.status is not None and row.status.status == status


def with_notifications(using: str, rows: list[JobRow]) -> list[JobRow]:
    """``rows`` with each name's newest ``Notification``, read in one query for all of
    them (the newest id per name, through the ``(name, -id)`` index), not one per row."""
    names = {journal_name(row.name) for row in rows if row.job is not None}
    if not names:
        return rows
    newest = (
        Notification.objects.using(using).filter(name__in=names).values("name").annotate(newest=Max("id"))
    )
    found = {n.name: n for n in Notification.objects.using(using).filter(id__in=newest.values("newest"))}
    return [replace(row, notification=found.get(journal_name(row.name))) for row in rows]


def never_run(
    admin: RunsAdmin, using: str, filters: RunsFilters, configured: Mapping[str, Schedule], now: datetime
) -> list[JobRow]:
    """Names scheduled in ``TSLOCK_SCHEDULES`` that the journal has never seen (no
    ``Job`` row): listed apart, on the first page, as the settings are small."""
    if filters.after or filters.before or filters.outcome or filters.status not in ("", "new"):
        return []
    wanted = {
        name for name in configured if not filters.search or filters.search.casefold() in name.casefold()
    }
    if not wanted:
        return []
    seen = set(Job.objects.using(using).filter(name__in=wanted).values_list("name", flat=True))
    # Seen now for the first time: recorded, so that a name that never runs turns late.
    first_seen = record_first_seen(using, wanted - seen, now)
    return [_row(admin, name, first_seen.get(name), configured, now) for name in sorted(wanted - seen)]


def render(admin: RunsAdmin, request: HttpRequest, extra_context: Mapping[str, Any] | None) -> HttpResponse:
    """The Runs page for ``request`` (the caller checked the view permission)."""
    filters = RunsFilters.from_query(request.GET)
    now = datetime.now(timezone.utc)
    page = JobPage(rows=[])
    unseen: list[JobRow] = []
    using, configured, journal_off = _journal_settings(request)
    if using is not None:
        try:
            page = read_jobs(admin, using, filters, configured, now, admin.list_per_page)
            page.rows = with_notifications(using, page.rows)
            unseen = never_run(admin, using, filters, configured, now)
        except DatabaseError as err:
            _unreadable(request, using, err)
    status_choices = [
        {"label": label, "selected": value == filters.status, "url": filters.link(**{STATUS_VAR: value})}
        for value, label in STATUS_FILTERS.items()
    ]
    outcome_choices = [
        {"label": label, "selected": value == filters.outcome, "url": filters.link(**{OUTCOME_VAR: value})}
        for value, label in OUTCOME_FILTERS.items()
    ]
    context = admin.context(
        request,
        "Runs",
        rows=page.rows,
        unseen=unseen,
        journal_off=journal_off,
        query=filters.search,
        search_var=SEARCH_VAR,
        hidden_params=[(k, v) for k, v in QueryDict(filters.link()[1:]).items() if k != SEARCH_VAR],
        cl=ListFrame(
            admin.opts,
            [ListFilter.of("status", status_choices), ListFilter.of("last outcome", outcome_choices)],
        ),
        next_url=filters.link(**{AFTER_VAR: page.next_after}) if page.next_after else "",
        previous_url=filters.link(**{BEFORE_VAR: page.previous_before}) if page.previous_before else "",
        first_url=filters.link() if (filters.after or filters.before) else "",
        stopped_at=page.stopped_at,
        scan_limit=SCAN_BATCHES * admin.list_per_page,
        back_url=request.get_full_path(),
        now=now,
        is_nav_sidebar_enabled=False,
        **(extra_context or {}),
    )
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.changelist_template, context)


# -- a name's history -------------------------------------------------------------------------


def encode_position(run: Run) -> str:
    """A run's keyset position: its start (ISO 8601, UTC) and id."""
    started = from_db(run.started_at)
    assert started is not None
    return f"{started.isoformat()}~{run.id}"


def decode_position(raw: str) -> tuple[datetime, int]:
    """Parse :func:`encode_position`'s text; ``ValueError`` for anything else."""
    at, sep, run_id = raw.rpartition("~")
    if not sep:
        raise ValueError("not a run position")
    started = datetime.fromisoformat(at)
    if started.tzinfo is None:
        raise ValueError("not a run position")
    number = int(run_id)
    if not 0 < number < 2**63:
        raise ValueError("not a run position")
    return started.astimezone(timezone.utc), number


def history(admin: RunsAdmin, request: HttpRequest) -> HttpResponse:
    """A name's runs, newest first, ``list_per_page`` at a time (the caller checked
    the view permission)."""
    name = request.GET.get(NAME_VAR, "")
    after_raw, before_raw = request.GET.get(AFTER_VAR, ""), request.GET.get(BEFORE_VAR, "")
    base = {NAME_VAR: name}
    if not name:
        return _bad_link(admin, request, "it names no lock (the name parameter is missing)")
    try:
        after = decode_position(after_raw) if after_raw else None
        before = decode_position(before_raw) if before_raw and not after else None
    except ValueError:
        return _bad_link(admin, request, "its page position is not one this page gave out", base)
    size = admin.list_per_page
    now = datetime.now(timezone.utc)
    rows: list[RunRow] = []
    job_row: JobRow | None = None
    counts: list[tuple[str, int]] = []
    next_url = previous_url = ""
    using, configured, journal_off = _journal_settings(request)
    if using is not None:
        try:
            found = runs(using, name=name, limit=size + 1, before=before, after=after)
            more = len(found) > size
            # Going back (after=), the extra run is the newest; otherwise the oldest.
            shown = (found[1:] if after else found[:size]) if more else found
            rows = [RunRow(run, outcome_now(run.outcome, from_db(run.deadline), now)) for run in shown]
            if rows and (more or after):
                next_url = "?" + urlencode({**base, BEFORE_VAR: encode_position(rows[-1].run)})
            if rows and (before or (after and more)):
                previous_url = "?" + urlencode({**base, AFTER_VAR: encode_position(rows[0].run)})
            job = Job.objects.using(using).filter(name=journal_name(name)).first()
            if job is not None or name in configured:
                [job_row] = with_notifications(using, [_row(admin, name, job, configured, now)])
            if job is not None:
                counts = [
                    (outcomes.SUCCEEDED, job.runs_succeeded),
                    (outcomes.FAILED, job.runs_failed),
                    (outcomes.LOST, job.runs_lost),
                    (outcomes.SKIPPED, job.runs_skipped),
                    (outcomes.ERROR, job.runs_error),
                ]
        except DatabaseError as err:
            _unreadable(request, using, err)
    locks_link = admin.sibling_url("lock", "changelist") + "?" + urlencode({"q": name, "state": "all"})
    context = admin.context(
        request,
        f"Runs of {name}",
        original=name,
        name=name,
        rows=rows,
        job=job_row,
        counts=counts,
        journal_off=journal_off,
        next_url=next_url,
        previous_url=previous_url,
        first_url=("?" + urlencode(base)) if (after or before) else "",
        locks_link=locks_link,
        back_url=request.get_full_path(),
        now=now,
        is_nav_sidebar_enabled=False,
    )
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.run_history_template, context)


def _unreadable(request: HttpRequest, using: str, err: Exception) -> None:
    """A page of the journal that could not be read: one message, and the page renders
    without rows (the error's text may quote the database's settings: only its kind)."""
    logger.warning("the Runs pages could not read the journal: %s", type(err).__name__)
    messages.error(
        request, f"The journal (database {using!r}) could not be read: {type(err).__name__}. Try again later."
    )


def _bad_link(
    admin: RunsAdmin, request: HttpRequest, problem: str, base: dict[str, str] | None = None
) -> HttpResponse:
    first = admin.url("history") + "?" + urlencode(base) if base else admin.url("changelist")
    context = admin.context(
        request, "Page link not valid", problem=problem, first_url="", first_link=first, section_title="Runs"
    )
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.bad_cursor_template, context, status=400)
