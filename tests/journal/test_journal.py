"""The run journal on SQLite, PostgreSQL and MariaDB: every run of a locked command is one
row (running, then succeeded or failed; skipped; error), the name's summary follows, a
journal that cannot be written never changes the job, and details carry no secret."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tests.conftest import database_marks
from tests.test_decorator import BrokenStore  # noqa: F401  (the BACKEND below names it)
from tslock_django import LockConfiguration, lock, providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Run
from tslock_django.journal.recorder import from_db
from tslock_django.journal.status import outcome_now, runs, statuses

MEMORY = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "broken": {"BACKEND": "tests.test_decorator.BrokenStore"},
    "edge": {
        "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
        "OPTIONS": {"url": "http://127.0.0.1:9", "token": "s3cret-edge-token-for-the-journal", "timeout": 1},
    },
}

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


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def rows(using: str, name: str) -> list[Run]:
    return list(Run.objects.using(using).filter(name=name).order_by("id"))


def test_a_successful_run_is_one_row_and_the_summary_follows(using: str) -> None:
    out, err = run("journaled_job", "--shard", "ok")
    assert out == "done\n" and err == ""
    [row] = rows(using, "journaled-ok")
    assert row.outcome == outcomes.SUCCEEDED
    assert row.provider == "default" and row.fencing_token == 1 and row.pid and row.host
    assert row.finished_at is not None and row.duration is not None and row.duration >= 0
    assert row.locked_by and row.detail == "" and row.held_by == ""
    job = Job.objects.using(using).get(name="journaled-ok")
    assert job.last_run_id == row.id and job.last_outcome == outcomes.SUCCEEDED
    assert job.last_success_run_id == row.id and job.runs_succeeded == 1
    assert job.schedule == "1h" and job.grace == 300.0
    assert from_db(job.last_success_at) == from_db(row.started_at)


def test_a_failed_run_names_the_exception_and_the_job_still_fails(using: str) -> None:
    with pytest.raises(CommandError, match="the import broke"):
        run("journaled_job", "--shard", "bad", "--fail", "the import broke")
    [row] = rows(using, "journaled-bad")
    assert row.outcome == outcomes.FAILED
    assert row.detail == "CommandError: the import broke"
    job = Job.objects.using(using).get(name="journaled-bad")
    assert job.last_outcome == outcomes.FAILED and job.runs_failed == 1 and job.last_success_at is None


def test_sys_exit_zero_is_a_success_and_nonzero_a_failure(using: str) -> None:
    with pytest.raises(SystemExit):
        run("journaled_job", "--shard", "ex0", "--exit", "0")
    with pytest.raises(SystemExit):
        run("journaled_job", "--shard", "ex3", "--exit", "3")
    assert [r.outcome for r in rows(using, "journaled-ex0")] == [outcomes.SUCCEEDED]
    [failed] = rows(using, "journaled-ex3")
    assert failed.outcome == outcomes.FAILED and failed.detail == "SystemExit: 3"


def test_a_skip_is_one_row_naming_the_holder(using: str) -> None:
    holder = providers["default"].lock(LockConfiguration("journaled-held", "1m"))
    assert holder is not None
    out, err = run("journaled_job", "--shard", "held")
    assert out == "" and err.startswith("skipped: ")
    [row] = rows(using, "journaled-held")
    assert row.outcome == outcomes.SKIPPED and row.held_by == holder.record.locked_by
    job = Job.objects.using(using).get(name="journaled-held")
    assert job.runs_skipped == 1 and job.last_run_id is None, "a skip is no run of the job"
    assert job.last_attempt_outcome == outcomes.SKIPPED


def test_a_store_failure_is_an_error_row_and_the_job_does_not_run(using: str) -> None:
    with pytest.raises(CommandError, match="failing closed"):
        run("journaled_job", "--shard", "err", "--lock-provider", "broken")
    [row] = rows(using, "journaled-err")
    assert row.outcome == outcomes.ERROR and "connection refused" in row.detail
    assert Job.objects.using(using).get(name="journaled-err").runs_error == 1


@pytest.mark.django_db(databases=["default"], transaction=True)
def test_a_detail_never_carries_a_provider_secret() -> None:
    secret = MEMORY["edge"]["OPTIONS"]["token"]  # type: ignore[index]
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        with pytest.raises(CommandError):
            run("journaled_job", "--shard", "leak", "--fail", f"Authorization: Bearer {secret}")
        [row] = rows("default", "journaled-leak")
    assert secret not in row.detail and "***" in row.detail


@pytest.mark.django_db(databases=["default"], transaction=True)
def test_lock_journals_only_when_asked() -> None:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        with lock("hot-path", "1m"):
            pass
        with lock("code-path", "1m", journal=True) as held:
            assert held.fencing_token == 1

        @lock("decorated-path", "1m", journal=True)
        def explode() -> None:
            raise ValueError("no")

        with pytest.raises(ValueError):
            explode()
    assert not Run.objects.filter(name="hot-path").exists()
    assert [r.outcome for r in rows("default", "code-path")] == [outcomes.SUCCEEDED]
    [failed] = rows("default", "decorated-path")
    assert failed.outcome == outcomes.FAILED and failed.detail == "ValueError: no"


def test_the_journal_off_writes_nothing(db: None) -> None:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL=None):
        out, err = run("journaled_job", "--shard", "off")
    assert out == "done\n" and err == ""
    assert not Run.objects.exists()


def test_a_journal_on_a_database_that_is_down_never_changes_the_job(django_db_blocker: object) -> None:
    with (
        override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "unreachable"}),
        django_db_blocker.unblock(),  # type: ignore[attr-defined]
    ):
        out, err = run("journaled_job", "--shard", "down")
        assert out == "done\n", "the job ran"
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "tslock: the journal missed this run of 'journaled-down'"
        )
        assert "the job itself was not affected" in lines[0]
        with pytest.raises(CommandError, match="the import broke"):
            run("journaled_job", "--shard", "down", "--fail", "the import broke")
        holder = providers["default"].lock(LockConfiguration("journaled-down", "1m"))
        assert holder is not None
        out, err = run("journaled_job", "--shard", "down")
        assert out == "" and "skipped: " in err, "skips as without a journal"


@pytest.mark.django_db(databases=["default"])
def test_a_journal_whose_table_is_missing_never_changes_the_job() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE tslock_run")
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        out, err = run("journaled_job", "--shard", "notable")
    assert out == "done\n"
    assert err.count("\n") == 1 and "the journal missed this run of 'journaled-notable'" in err


def test_keep_alive_moves_the_running_rows_deadline(using: str) -> None:
    from tslock_django.guard import GuardedRun

    guarded = GuardedRun(LockConfiguration("kept", "1m"), "default", journal=True)
    held = guarded.enter()
    [row] = rows(using, "kept")
    before = from_db(row.deadline)
    assert row.outcome == outcomes.RUNNING and before is not None
    assert held.extend_now() is True
    row.refresh_from_db()
    assert from_db(row.deadline) is not None and from_db(row.deadline) >= before  # type: ignore[operator]
    assert from_db(Job.objects.using(using).get(name="kept").last_deadline) == from_db(row.deadline)
    guarded.exit()
    row.refresh_from_db()
    assert row.outcome == outcomes.SUCCEEDED


def test_a_running_row_past_its_deadline_reads_lost_and_the_next_run_writes_it(using: str) -> None:
    from tslock_django.guard import GuardedRun

    first = GuardedRun(LockConfiguration("dies", "1m"), "default", journal=True)
    held = first.enter()
    [row] = rows(using, "dies")
    deadline = from_db(row.deadline)
    assert deadline is not None
    assert outcome_now(row.outcome, deadline, deadline - timedelta(seconds=1)) == outcomes.RUNNING
    assert outcome_now(row.outcome, deadline, deadline) == outcomes.LOST
    [status] = statuses(using, names=["dies"], now=deadline + timedelta(seconds=1))
    assert status.status == "failing" and "lost" in status.reason
    # The process "dies": its lock is taken over once expired, without an end written.
    Run.objects.using(using).filter(id=row.id).update(deadline=datetime(2000, 1, 1, tzinfo=timezone.utc))
    held.release()
    second = GuardedRun(LockConfiguration("dies", "1m"), "default", journal=True)
    second.enter()
    second.exit()
    assert [r.outcome for r in rows(using, "dies")] == [outcomes.LOST, outcomes.SUCCEEDED]
    assert Job.objects.using(using).get(name="dies").runs_lost == 1
    assert [r.outcome for r in runs(using, name="dies", outcome=outcomes.LOST)] == [outcomes.LOST]


def test_runs_are_newest_first_with_a_keyset(using: str) -> None:
    for _ in range(5):
        run("journaled_job", "--shard", "many")
    first = runs(using, name="journaled-many", limit=2)
    assert len(first) == 2 and first[0].id > first[1].id
    rest = runs(using, name="journaled-many", limit=10, before=(from_db(first[-1].started_at), first[-1].id))  # type: ignore[arg-type]
    assert [r.id for r in first + rest] == sorted((r.id for r in rows(using, "journaled-many")), reverse=True)
    assert runs(using, outcome=outcomes.FAILED) == []


def test_a_run_that_lost_its_lock_to_keep_alive_ends_lost(using: str) -> None:
    from tslock_django.guard import GuardedRun

    guarded = GuardedRun(LockConfiguration("slipped", "1m"), "default", journal=True)
    held = guarded.enter()
    held.lost.set()  # what keep-alive does when the store refuses an extension
    guarded.exit()
    [row] = rows(using, "slipped")
    assert row.outcome == outcomes.LOST
    assert row.detail == "keep-alive could not keep the lock while the job ran; it ended succeeded"
    job = Job.objects.using(using).get(name="slipped")
    assert job.runs_lost == 1 and job.runs_succeeded == 0 and job.last_success_at is None


def test_a_run_written_lost_by_a_later_one_stays_lost_when_it_ends(using: str) -> None:
    from tslock_django.guard import GuardedRun

    slow = GuardedRun(LockConfiguration("slow", "1m"), "default", journal=True)
    slow.enter()
    [row] = rows(using, "slow")
    Run.objects.using(using).filter(id=row.id).update(outcome=outcomes.LOST)
    slow.exit()
    row.refresh_from_db()
    assert row.outcome == outcomes.LOST and row.detail == "ended succeeded after its lock had expired"
    assert row.finished_at is not None


def test_names_that_differ_only_in_case_or_trailing_space_are_two_jobs(using: str) -> None:
    from tslock_django.guard import GuardedRun

    for name in ("Report", "report", "report "):
        run_ = GuardedRun(LockConfiguration(name, "1m"), "default", journal=True)
        run_.enter()
        run_.exit()
    jobs = sorted(Job.objects.using(using).values_list("name", flat=True))
    assert jobs == ["Report", "report", "report "]
    assert [r.name for r in rows(using, "report")] == ["report"]


def test_a_runs_start_finds_its_names_running_rows_through_an_index_not_its_history(using: str) -> None:
    """A run's start looks for its name's runs still running past their deadline; that
    look goes through ``tslock_run_name_outcome``, so it stays as cheap at 100,000 runs
    of a name as at ten (it read the name's whole history before migration 0008)."""
    from django.db import connections

    from tslock_django.guard import GuardedRun

    started = datetime(2020, 1, 1, tzinfo=timezone.utc)
    Run.objects.using(using).bulk_create(
        Run(
            name="deep",
            provider="default",
            outcome=outcomes.SUCCEEDED,
            started_at=started + timedelta(minutes=i),
            finished_at=started + timedelta(minutes=i, seconds=1),
            deadline=started + timedelta(minutes=i + 1),
        )
        for i in range(3000)
    )
    connection = connections[using]
    if connection.vendor == "postgresql":  # statistics that know how rare "running" is
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE tslock_run")
    sent: list[tuple[str, object]] = []

    def keep(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append((sql, params))
        return execute(sql, params, many, context)

    guarded = GuardedRun(LockConfiguration("deep", "1m"), "default", journal=True)
    with connection.execute_wrapper(keep):
        guarded.enter()
    guarded.exit()
    # The look for lost runs is the one statement of the start that compares deadlines
    # (an UPDATE of its own, or on PostgreSQL part of the start's one statement).
    [(sweep, params)] = [(sql, p) for sql, p in sent if "deadline" in sql and "<=" in sql]
    explain = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    with connection.cursor() as cursor:
        cursor.execute(explain + sweep, params)
        plan = " ".join(str(cell) for row in cursor.fetchall() for cell in row)
    assert "tslock_run_name_outcome" in plan, plan
    assert [r.outcome for r in rows(using, "deep")][-1] == outcomes.SUCCEEDED
