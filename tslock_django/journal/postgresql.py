"""The journal's writes on PostgreSQL: one statement each.

Through the ORM a run's start is a transaction of four statements and its end one of three.
PostgreSQL runs data-modifying statements inside ``WITH``, so each write here is one
statement in autocommit, atomic on its own: two round trips per run instead of nine
(figures in ``docs/benchmarks.md``). The rows written are the ones the ORM path
(:mod:`tslock_django.journal.recorder`) writes on other databases. Every sub-statement of a
``WITH`` sees the same snapshot and runs exactly once, whether or not the main statement
reads it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import outcomes

_JOB_COLUMNS = (
    "name, provider, first_seen_at, schedule, grace, last_run_id, last_outcome, last_started_at, "
    "last_finished_at, last_duration, last_deadline, last_detail, last_success_at, last_success_run_id, "
    "last_success_duration, last_attempt_at, last_attempt_outcome, runs_succeeded, runs_failed, "
    "runs_skipped, runs_error, runs_lost, failures_before_alert, max_duration, notified_status"
)

#: What a run's start writes on a name's ``Job`` row that exists already; a schedule
#: given by this run replaces the stored one, none keeps it.
_JOB_DESCRIBED = (
    "provider = EXCLUDED.provider, "
    "schedule = CASE WHEN %(scheduled)s THEN EXCLUDED.schedule ELSE job.schedule END, "
    "grace = CASE WHEN %(scheduled)s THEN EXCLUDED.grace ELSE job.grace END, "
    "failures_before_alert = CASE WHEN %(scheduled)s THEN EXCLUDED.failures_before_alert "
    "ELSE job.failures_before_alert END, "
    "max_duration = CASE WHEN %(scheduled)s THEN EXCLUDED.max_duration ELSE job.max_duration END"
)

START = f"""
WITH lost AS (
    UPDATE tslock_run SET outcome = '{outcomes.LOST}'
    WHERE name = %(name)s AND outcome = '{outcomes.RUNNING}' AND deadline <= %(now)s
    RETURNING 1
), run AS (
    INSERT INTO tslock_run (name, provider, outcome, started_at, host, pid, locked_by, fencing_token,
                            held_by, detail, deadline)
    VALUES (%(name)s, %(provider)s, '{outcomes.RUNNING}', %(now)s, %(host)s, %(pid)s, %(locked_by)s,
            %(fencing_token)s, '', '', %(deadline)s)
    RETURNING id
)
INSERT INTO tslock_job AS job ({_JOB_COLUMNS})
SELECT %(name)s, %(provider)s, %(now)s, %(schedule)s, %(grace)s, run.id, '{outcomes.RUNNING}', %(now)s,
       NULL, NULL, %(deadline)s, '', NULL, NULL, NULL, NULL, '', 0, 0, 0, 0, (SELECT count(*) FROM lost),
       %(failures_before_alert)s, %(max_duration)s, ''
FROM run
ON CONFLICT (name) DO UPDATE SET {_JOB_DESCRIBED},
    last_run_id = EXCLUDED.last_run_id, last_outcome = EXCLUDED.last_outcome,
    last_started_at = EXCLUDED.last_started_at, last_finished_at = NULL, last_duration = NULL,
    last_deadline = EXCLUDED.last_deadline, last_detail = '', runs_lost = job.runs_lost + EXCLUDED.runs_lost
RETURNING last_run_id
"""

#: A skip or a store error: one finished row, and the name's last attempt and count.
SINGLE = f"""
WITH run AS (
    INSERT INTO tslock_run (name, provider, outcome, started_at, finished_at, duration, host, pid,
                            locked_by, held_by, detail)
    VALUES (%(name)s, %(provider)s, %(outcome)s, %(now)s, %(now)s, 0.0, %(host)s, %(pid)s, '',
            %(held_by)s, %(detail)s)
    RETURNING id
)
INSERT INTO tslock_job AS job ({_JOB_COLUMNS})
SELECT %(name)s, %(provider)s, %(now)s, %(schedule)s, %(grace)s, NULL, '', NULL, NULL, NULL, NULL, '',
       NULL, NULL, NULL, %(now)s, %(outcome)s, 0, 0, %(skipped)s, %(errored)s, 0,
       %(failures_before_alert)s, %(max_duration)s, ''
FROM run
ON CONFLICT (name) DO UPDATE SET {_JOB_DESCRIBED},
    last_attempt_at = EXCLUDED.last_attempt_at, last_attempt_outcome = EXCLUDED.last_attempt_outcome,
    runs_skipped = job.runs_skipped + EXCLUDED.runs_skipped, runs_error = job.runs_error + EXCLUDED.runs_error
"""

#: The end of a run still ``running``, and its name's summary while the run is the
#: name's last; answers how many runs it ended (0: a later run had written it lost).
_FINISH = """
WITH done AS (
    UPDATE tslock_run SET outcome = %(outcome)s, finished_at = %(now)s, duration = %(duration)s,
                          detail = %(detail)s
    WHERE id = %(run_id)s AND outcome = '{running}'
    RETURNING id
), summary AS (
    UPDATE tslock_job SET last_outcome = %(outcome)s, last_finished_at = %(now)s,
                          last_duration = %(duration)s, last_detail = %(detail)s, {counted}
    WHERE name = %(name)s AND last_run_id = %(run_id)s AND EXISTS (SELECT 1 FROM done)
    RETURNING 1
)
SELECT count(*) FROM done
"""
FINISH = {
    outcomes.SUCCEEDED: _FINISH.format(
        running=outcomes.RUNNING,
        counted="last_success_at = %(started_at)s, last_success_duration = %(duration)s, "
        "last_success_run_id = %(run_id)s, runs_succeeded = runs_succeeded + 1",
    ),
    outcomes.FAILED: _FINISH.format(running=outcomes.RUNNING, counted="runs_failed = runs_failed + 1"),
    outcomes.LOST: _FINISH.format(running=outcomes.RUNNING, counted="runs_lost = runs_lost + 1"),
    # A run whose lock was taken but whose job never started (cancelled on the way in).
    outcomes.ERROR: _FINISH.format(running=outcomes.RUNNING, counted="runs_error = runs_error + 1"),
}


def start(cursor: Any, described: dict[str, Any], **fields: Any) -> int:
    """Write a run's start; returns its id. ``described``: the name's provider and
    schedule (``job_description``); ``fields``: the run's own."""
    cursor.execute(START, {**described, **fields})
    return int(cursor.fetchone()[0])


def single(cursor: Any, described: dict[str, Any], *, outcome: str, **fields: Any) -> None:
    """Write a skip or a store error."""
    cursor.execute(
        SINGLE,
        {
            **described,
            **fields,
            "outcome": outcome,
            "skipped": int(outcome == outcomes.SKIPPED),
            "errored": int(outcome == outcomes.ERROR),
        },
    )


def finish(cursor: Any, *, outcome: str, **fields: Any) -> bool:
    """Write a run's end; ``False`` when the run was no longer ``running``."""
    cursor.execute(FINISH[outcome], {**fields, "outcome": outcome})
    return bool(cursor.fetchone()[0])


def job_description(name: str, provider: str, schedule: Any, now: datetime) -> dict[str, Any]:
    """The parameters every write of a name's ``Job`` row shares."""
    return {
        "name": name,
        "provider": provider,
        "now": now,
        "scheduled": schedule is not None,
        "schedule": schedule.stored if schedule is not None else "",
        "grace": schedule.grace.total_seconds() if schedule is not None else None,
        **threshold_columns(schedule),
    }


def threshold_columns(schedule: Any) -> dict[str, Any]:
    """The ``Job`` columns of ``schedule``'s alert thresholds (both ``None`` without one)."""
    if schedule is None:
        return {"failures_before_alert": None, "max_duration": None}
    bound = schedule.max_duration
    return {
        "failures_before_alert": schedule.failures_before_alert,
        "max_duration": bound.total_seconds() if bound is not None else None,
    }
