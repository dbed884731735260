"""The journal's one-statement writes on PostgreSQL (journal/postgresql.py) write the rows
the ORM path writes, for every way a run goes: the same sequence of runs through both
paths, under two names, leaves equal ``Run`` and ``Job`` rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connections, transaction

from tests.conftest import database_marks
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Run
from tslock_django.journal.recorder import RunRecorder
from tslock_django.journal.schedules import parse_schedule

pytestmark = database_marks("postgres", "PostgreSQL")

USING = "postgres"
RUN_FIELDS = (
    "provider",
    "outcome",
    "duration",
    "host",
    "pid",
    "locked_by",
    "fencing_token",
    "held_by",
    "detail",
)
#: The summary's fields but its times (compared as set or not) and its name.
JOB_FIELDS = [
    f.name
    for f in Job._meta.get_fields()
    if f.name not in ("name", "first_seen_at", "last_deadline") and not f.name.endswith("_at")
]


def recorder(name: str, one_statement: bool, schedule: Any = None) -> RunRecorder:
    made = RunRecorder(name, "edge", USING, schedule=schedule)
    assert made._one_statement  # the database is PostgreSQL: the fast path is the default
    made._one_statement = one_statement
    return made


def held(name: str, token: int, until: datetime) -> Any:
    return SimpleNamespace(
        name=name, fencing_token=token, record=SimpleNamespace(lock_until=until, locked_by="me")
    )


def story(name: str, one_statement: bool) -> None:
    """Every way a run goes, in an order that exercises the summary's updates."""
    now = datetime.now(timezone.utc)
    hourly = parse_schedule("1h", "10m")
    recorder(name, one_statement).skipped(SimpleNamespace(locked_by="other"))  # a new name, by a skip
    first = recorder(name, one_statement, hourly)
    first.started(held(name, 1, now + timedelta(minutes=1)))
    first.finished()  # succeeded
    failing = recorder(name, one_statement)  # no schedule: the stored one stays
    failing.started(held(name, 2, now + timedelta(minutes=1)))
    failing.finished(RuntimeError("no"))
    recorder(name, one_statement).errored(ConnectionError("store down"))
    dead = recorder(name, one_statement)
    dead.started(held(name, 3, now - timedelta(seconds=1)))  # its deadline has passed: lost
    late = recorder(name, one_statement)
    late.started(held(name, 4, now + timedelta(minutes=1)))  # writes the dead run lost
    dead.finished()  # ended after it was written lost: stays lost, says how it ended
    late.finished(lock_lost=True)  # keep-alive lost its lock: lost
    again = recorder(name, one_statement, parse_schedule("0 3 * * *", "1h"))
    again.started(held(name, 5, now + timedelta(minutes=1)))
    again.finished(exit_status=3)
    assert not any(r.missed for r in (first, failing, dead, late, again))


def rows(name: str) -> list[tuple[Any, ...]]:
    found = Run.objects.using(USING).filter(name=name).order_by("id")
    return [
        tuple(getattr(run, f) if f != "duration" else run.duration is None for f in RUN_FIELDS)
        for run in found
    ]


def summary(name: str) -> dict[str, Any]:
    job = Job.objects.using(USING).get(name=name)
    found = {f: getattr(job, f) for f in JOB_FIELDS}
    ids = list(Run.objects.using(USING).filter(name=name).order_by("id").values_list("id", flat=True))
    # Run ids differ between the names: compare their places in the name's history.
    for field in ("last_run_id", "last_success_run_id"):
        found[field] = ids.index(found[field]) if found[field] is not None else None
    for field in ("last_duration", "last_success_duration"):
        found[field] = found[field] is None
    for field in (
        "last_started_at",
        "last_finished_at",
        "last_success_at",
        "last_attempt_at",
        "last_deadline",
    ):
        found[field + " is set"] = getattr(job, field) is not None
    return found


def test_both_paths_write_the_same_rows_for_every_way_a_run_goes() -> None:
    story("by-orm", one_statement=False)
    story("by-one-statement", one_statement=True)
    assert rows("by-one-statement") == rows("by-orm")
    assert summary("by-one-statement") == summary("by-orm")
    job = Job.objects.using(USING).get(name="by-one-statement")
    assert (job.runs_succeeded, job.runs_failed, job.runs_skipped, job.runs_error, job.runs_lost) == (
        1,
        2,
        1,
        1,
        2,
    )
    assert job.schedule == "0 3 * * *" and job.grace == 3600.0
    outcomes_seen = [r[1] for r in rows("by-one-statement")]
    assert outcomes_seen == [
        outcomes.SKIPPED, outcomes.SUCCEEDED, outcomes.FAILED, outcomes.ERROR, outcomes.LOST, outcomes.LOST,
        outcomes.FAILED,
    ]  # fmt: skip


def test_a_write_is_one_statement_and_no_transaction_of_its_own() -> None:
    sent: list[str] = []

    def keep(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    run = recorder("counted", one_statement=True)
    with connections[USING].execute_wrapper(keep):
        run.started(held("counted", 1, datetime.now(timezone.utc) + timedelta(minutes=1)))
        run.finished()
    assert len(sent) == 2, sent
    assert Run.objects.using(USING).get(name="counted").outcome == outcomes.SUCCEEDED


def test_inside_the_callers_transaction_a_failed_write_leaves_it_usable() -> None:
    """A journal write that fails inside the caller's atomic block runs in a savepoint:
    the caller's transaction goes on."""
    run = RunRecorder("x", "p" * 101, USING)  # too long for the provider column: the write fails
    assert run._one_statement
    with transaction.atomic(using=USING):
        run.started(held("x", 1, datetime.now(timezone.utc) + timedelta(minutes=1)))
        assert run.missed
        Run.objects.using(USING).create(
            name="after", provider="p", outcome=outcomes.SUCCEEDED, started_at=datetime.now(timezone.utc)
        )
    assert Run.objects.using(USING).filter(name="after").exists()


@pytest.mark.parametrize("one_statement", [False, True])
def test_a_new_name_seen_by_two_writes_at_once_is_one_job(one_statement: bool) -> None:
    """A skip and a start of a new name race for its Job row: one row, both counted."""
    import threading

    name = f"race-{one_statement}"
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def write(kind: str) -> None:
        try:
            barrier.wait()
            made = recorder(name, one_statement)
            if kind == "skip":
                made.skipped(None)
            else:
                made.started(held(name, 1, datetime.now(timezone.utc) + timedelta(minutes=1)))
                made.finished()
            assert not made.missed
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(kind,)) for kind in ("skip", "run")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    job = Job.objects.using(USING).get(name=name)
    assert (job.runs_skipped, job.runs_succeeded) == (1, 1)
