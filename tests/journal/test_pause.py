"""Pausing a job (``tslock pause`` / ``tslock resume``): a paused job's journaled runs
skip without taking the lock, journaled ``skipped`` with the detail ``paused``, through
every door (a locked command, ``tslock run``, ``locked_task`` sync and async, Celery,
``lock``/``alock`` with the journal); and the pause is read with one query, only when the
journal is on."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from tests.conftest import database_marks
from tslock_django import JobPaused, LockConfiguration, LockHeld, alock, lock, locked_task, providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Run, journal_name
from tslock_django.journal.pausing import pause, resume
from tslock_django.journal.retention import purge_names

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}

DATABASES = [
    pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
    pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
    pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
]


@pytest.fixture(params=DATABASES)
def using(request: pytest.FixtureRequest) -> Iterator[str]:
    alias = request.param
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": alias}):
        yield alias


@pytest.fixture
def sqlite_journal(db: None) -> Iterator[str]:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        yield "default"


def tslock(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("tslock", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def runs_of(using: str, name: str) -> list[Run]:
    return list(Run.objects.using(using).filter(name=name).order_by("id"))


# -- a paused command ---------------------------------------------------------------------


def test_a_paused_command_skips_without_the_lock_and_says_paused(using: str) -> None:
    out, _ = tslock("pause", "journaled-p")
    assert out.startswith("paused journaled-p at ") and "(never run yet" in out
    out, err = command("journaled_job", "--shard", "p")
    assert out == "", "the command's body did not run"
    assert err == (
        "skipped: job 'journaled-p' is paused; tslock resume journaled-p lets it run again; "
        "journaled_job did not run\n"
    )
    [skip] = runs_of(using, "journaled-p")
    assert skip.outcome == outcomes.SKIPPED and skip.detail == "paused" and skip.held_by == ""
    # The store was never asked: the first lock the name ever gets has fencing token 1.
    assert providers["default"].lock(LockConfiguration("journaled-p", "1m")) is not None
    job = Job.objects.using(using).get(name="journaled-p")
    assert job.runs_skipped == 1 and job.last_run_id is None and job.paused_at is not None


def test_a_paused_job_skips_even_while_its_lock_is_held_and_names_no_holder(using: str) -> None:
    held = providers["default"].lock(LockConfiguration("journaled-h", "1m"))
    assert held is not None
    tslock("pause", "journaled-h")
    _, err = command("journaled_job", "--shard", "h")
    assert "is paused" in err and "held by" not in err
    [skip] = runs_of(using, "journaled-h")
    assert skip.detail == "paused" and skip.held_by == ""


def test_resume_lets_the_next_run_take_the_lock(using: str) -> None:
    tslock("pause", "journaled-r")
    command("journaled_job", "--shard", "r")
    out, _ = tslock("resume", "journaled-r")
    assert out == "resumed journaled-r; its next run takes the lock as usual\n"
    out, err = command("journaled_job", "--shard", "r")
    assert out == "done\n" and err == ""
    assert [(r.outcome, r.detail, r.fencing_token) for r in runs_of(using, "journaled-r")] == [
        (outcomes.SKIPPED, "paused", None),
        (outcomes.SUCCEEDED, "", 1),
    ]
    assert Job.objects.using(using).get(name="journaled-r").paused_at is None


def test_a_paused_run_inside_the_callers_transaction_leaves_it_usable(using: str) -> None:
    tslock("pause", "journaled-tx")
    with transaction.atomic(using=using):
        _, err = command("journaled_job", "--shard", "tx")
        # The caller's transaction goes on after the pause was read and the skip written.
        assert Job.objects.using(using).get(name="journaled-tx").runs_skipped == 1
    assert "is paused" in err
    assert [r.detail for r in runs_of(using, "journaled-tx")] == ["paused"]


def test_pausing_twice_keeps_the_first_time_and_resuming_twice_changes_nothing(using: str) -> None:
    command("journaled_job", "--shard", "twice")  # journaled before it is paused
    first, _ = tslock("pause", "journaled-twice")
    assert "never run yet" not in first
    again, _ = tslock("pause", "journaled-twice")
    assert again.startswith("journaled-twice was already paused (since ")
    assert first.split(" at ")[1].split(";")[0] in again
    tslock("resume", "journaled-twice")
    out, _ = tslock("resume", "journaled-twice")
    assert out == "journaled-twice is not paused; nothing to resume\n"
    out, _ = tslock("resume", "never-journaled")
    assert out == "never-journaled is not paused; nothing to resume\n"
    assert not Job.objects.using(using).filter(name="never-journaled").exists()


def test_json_says_what_happened(sqlite_journal: str) -> None:
    out, _ = tslock("pause", "nightly", "--json")
    paused = json.loads(out)
    assert paused["name"] == "nightly" and paused["paused"] is True and paused["changed"] is True
    assert paused["paused_at"].endswith("+00:00")
    resumed = json.loads(tslock("resume", "nightly", "--json")[0])
    assert resumed == {"name": "nightly", "paused": False, "paused_at": None, "changed": True}


def test_a_name_too_long_for_the_journal_is_paused_under_its_stand_in(sqlite_journal: str) -> None:
    name = "n" * 900
    tslock("pause", name)
    assert Job.objects.get(name=journal_name(name)).paused_at is not None

    @lock(name, "1m", journal=True)
    def job() -> str:
        return "ran"

    assert job() is None


def test_the_journal_off_or_unreadable_is_exit_status_2_with_one_line() -> None:
    with override_settings(TSLOCK_JOURNAL=None), pytest.raises(CommandError) as off:
        tslock("pause", "nightly")
    assert off.value.returncode == 2 and "the journal is off" in str(off.value)
    with override_settings(TSLOCK_JOURNAL={"using": "nowhere"}), pytest.raises(CommandError) as malformed:
        tslock("resume", "nightly")
    assert malformed.value.returncode == 2 and "not in DATABASES" in str(malformed.value)


def test_an_unreachable_journal_is_exit_status_2_and_shows_no_password(django_db_blocker: Any) -> None:
    with override_settings(TSLOCK_JOURNAL={"using": "unreachable"}), django_db_blocker.unblock():
        try:
            with pytest.raises(CommandError) as failed:
                tslock("pause", "nightly")
        finally:
            connections["unreachable"].close()
    message = str(failed.value)
    assert failed.value.returncode == 2 and "\n" not in message
    assert message.startswith("could not pause nightly: the journal on database 'unreachable' failed: ")
    assert "unreachable-db-password" not in message


def test_an_empty_name_is_a_usage_error() -> None:
    with pytest.raises(CommandError, match="the name is empty"):
        tslock("pause", " ")


def test_a_paused_name_without_runs_survives_the_purge(sqlite_journal: str) -> None:
    pause("default", "paused-forever", now=pause_time())
    pause("default", "gone", now=pause_time())
    resume("default", "gone")
    assert purge_names("default", timedelta(days=1)) == 1
    assert list(Job.objects.values_list("name", flat=True)) == ["paused-forever"]


def pause_time() -> datetime:
    return datetime.now(timezone.utc) - timedelta(days=30)


# -- every door ---------------------------------------------------------------------------


def test_tslock_run_exits_as_for_a_skip(sqlite_journal: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    program = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    tslock("pause", "run-paused")
    _, err = tslock("run", "run-paused", "--at-most-for", "1m", "--", *program)
    assert err.startswith("skipped: job 'run-paused' is paused;") and not marker.exists()
    with pytest.raises(CommandError) as failed:
        tslock("run", "run-paused", "--at-most-for", "1m", "--on-locked", "fail", "--", *program)
    assert failed.value.returncode == 75 and "is paused" in str(failed.value)
    assert not marker.exists()
    assert [r.detail for r in runs_of("default", "run-paused")] == ["paused", "paused"]


def test_locked_task_returns_none_and_logs_paused(
    sqlite_journal: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    @locked_task("1m", name="task-paused")
    def sync_me() -> int:
        calls.append(1)
        return 1

    @locked_task("1m", name="task-paused", on_locked="raise")
    def strict() -> int:
        calls.append(1)
        return 1

    tslock("pause", "task-paused")
    with caplog.at_level(logging.INFO, logger="tslock_django"):
        assert sync_me() is None
    assert "skipped: job 'task-paused' is paused;" in caplog.text and "did not run" in caplog.text
    with pytest.raises(JobPaused) as raised:
        strict()
    assert isinstance(raised.value, LockHeld) and raised.value.holder is None
    assert calls == []
    assert [r.detail for r in runs_of("default", "task-paused")] == ["paused", "paused"]


@pytest.mark.django_db(databases=["default"], transaction=True)
def test_async_doors_skip_a_paused_job() -> None:
    calls: list[str] = []

    @locked_task("1m", name="async-task-paused")
    async def task() -> str:
        calls.append("task")
        return "ran"

    @lock("async-decorated-paused", "1m", journal=True)
    async def decorated() -> str:
        calls.append("decorated")
        return "ran"

    async def main() -> None:
        try:
            assert await task() is None
            assert await decorated() is None
            with pytest.raises(JobPaused):
                async with alock("async-block-paused", "1m", journal=True):
                    calls.append("block")
            # Nothing was taken: the store grants each name at once.
            for name in ("async-task-paused", "async-decorated-paused", "async-block-paused"):
                assert await providers["default"].alock(LockConfiguration(name, "1m")) is not None
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        for name in ("async-task-paused", "async-decorated-paused", "async-block-paused"):
            tslock("pause", name)
        asyncio.run(main())
    assert calls == []
    skipped = Run.objects.filter(outcome=outcomes.SKIPPED, detail="paused")
    assert sorted(skipped.values_list("name", flat=True)) == [
        "async-block-paused",
        "async-decorated-paused",
        "async-task-paused",
    ]


def _note_run(path: str, seconds: float = 0.0) -> str:
    """The body of the Celery task of the test below: notes that it ran."""
    with open(path, "a") as file:
        file.write("ran\n")
    return "ran"


def test_a_celery_task_skips_while_paused(sqlite_journal: str, tmp_path: Path) -> None:
    pytest.importorskip("celery", reason="celery is not installed (pip install --group test)")
    from celery import Celery

    # An app of this test's own, in memory: tests/jobs/celery_app.py's app is configured
    # for the Redis that tests/jobs/test_celery.py starts, and a backend made here first
    # would stay with it in this process.
    app = Celery("tests.journal.pause", broker="memory://", backend="cache+memory://")
    once = app.task(name="tests.journal.pause.once")(locked_task("1m", "1m", name="celery-{path}")(_note_run))

    marker = tmp_path / "ran.txt"
    tslock("pause", f"celery-{marker}")
    # Celery's own execution of the task (its tracer, in this process), as a worker runs it.
    assert once.apply(args=(str(marker), 0.0)).get() is None
    assert not marker.exists()
    tslock("resume", f"celery-{marker}")
    assert once.apply(args=(str(marker), 0.0)).get() == "ran"
    assert [r.detail for r in runs_of("default", f"celery-{marker}")] == ["paused", ""]


def test_with_lock_and_the_journal_raises_job_paused(sqlite_journal: str) -> None:
    tslock("pause", "with-paused")
    with (
        pytest.raises(JobPaused, match="job 'with-paused' is paused"),
        lock("with-paused", "1m", journal=True),
    ):
        pytest.fail("the block must not run")
    # Without the journal a lock knows nothing of pauses (there is nowhere to keep one).
    with lock("with-paused", "1m") as held:
        assert held.fencing_token == 1


# -- what it costs ------------------------------------------------------------------------


def test_the_pause_is_read_with_one_query_before_the_lock(using: str) -> None:
    connection = connections[using]

    @lock("cost", "1m", journal=True)
    def job() -> None:
        pass

    with CaptureQueriesContext(connection) as running:
        job()
    assert len(pause_reads(running.captured_queries)) == 1
    tslock("pause", "cost")
    with CaptureQueriesContext(connection) as paused:
        job()
    assert len(pause_reads(paused.captured_queries)) == 1


def pause_reads(queries: list[dict[str, str]]) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().upper().startswith("SELECT") and "paused_at" in q["sql"]
    ]


@pytest.mark.django_db(databases=["default"])
def test_without_the_journal_no_query_is_made() -> None:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL=None):

        @lock("no-journal", "1m", journal=True)
        def job() -> str:
            return "ran"

        with CaptureQueriesContext(connections["default"]) as queries:
            assert job() == "ran"
    assert queries.captured_queries == []


def test_a_pause_that_cannot_be_read_never_stops_the_job(
    django_db_blocker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "unreachable"}),
        django_db_blocker.unblock(),
        caplog.at_level(logging.WARNING, logger="tslock_django"),
    ):
        try:
            out, err = command("journaled_job", "--shard", "blind")
        finally:
            connections["unreachable"].close()
    assert out == "done\n"
    assert "could not read whether 'journaled-blind' is paused" in caplog.text
    assert "unreachable-db-password" not in caplog.text + err


def test_a_job_paused_past_its_due_time_is_not_late_the_moment_it_resumes(using: str) -> None:
    from tslock_django.journal.status import statuses

    day_ago = datetime.now(timezone.utc) - timedelta(days=1)
    Job.objects.using(using).create(
        name="hourly-report", first_seen_at=day_ago, schedule="1h", grace=300.0,
        last_outcome=outcomes.SUCCEEDED, last_started_at=day_ago, last_finished_at=day_ago,
        last_success_at=day_ago, paused_at=day_ago,
    )  # fmt: skip
    resume(using, "hourly-report")
    [status] = [s for s in statuses(using) if s.name == "hourly-report"]
    assert status.status == "ok", status.reason
    # An hour and its grace after the resume without a success, it is late again.
    later = datetime.now(timezone.utc) + timedelta(hours=1, minutes=6)
    [status] = [s for s in statuses(using, now=later) if s.name == "hourly-report"]
    assert status.status == "late", status.reason
