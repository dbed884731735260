"""The alerts' evaluation (issue 34) on SQLite, PostgreSQL and MariaDB: each change of a
job's status is one notification, sent once to every channel, from the end of a run and
from ``tslock overdue --notify``; a failing or hung channel changes nothing about the
job and loses nothing; four evaluators at once still send each change once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings

from tests.alerts import channels
from tests.alerts.receivers import WebhookReceiver, http_server
from tests.conftest import database_marks
from tslock_django import LockConfiguration
from tslock_django.alerts import after_run, evaluation
from tslock_django.alerts.configured import channel_key
from tslock_django.alerts.evaluation import LOCK_NAME, evaluate
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Notification
from tslock_django.providers.database import DatabaseLockProvider

ROOT = Path(__file__).resolve().parents[2]
MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}
RECORDING = {"channels": [{"BACKEND": "tests.alerts.channels.Recording", "OPTIONS": {"box": "main"}}]}
MAIN = channel_key("tests.alerts.channels.Recording", {"box": "main"})
DOWN = channel_key("tests.alerts.channels.Recording", {"box": "down"})
UP = channel_key("tests.alerts.channels.Recording", {"box": "up"})

DATABASES = [
    pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
    pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
    pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
]


@pytest.fixture(params=DATABASES)
def using(request: pytest.FixtureRequest) -> Iterator[str]:
    alias = request.param
    channels.RECEIVED.clear()
    channels.DOWN.clear()
    channels.RELEASE.clear()
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": alias}, TSLOCK_ALERTS=RECORDING):
        yield alias
        assert after_run.wait(30), "the evaluation after a run never ended"
    channels.RELEASE.set()


def job(*args: str) -> int:
    """``journaled_job ARGS`` as a command line runs it: 0, or the ``CommandError``'s status."""
    try:
        call_command("journaled_job", *args, stdout=StringIO(), stderr=StringIO())
    except CommandError as err:
        return err.returncode
    return 0


def ran(*args: str) -> int:
    """``job`` and then the evaluation it started in the background."""
    status = job(*args)
    assert after_run.wait(30)
    return status


def overdue(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("tslock", "overdue", *args, stdout=out, stderr=err)
    except CommandError as caught:
        return caught.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def sent(box: str = "main") -> list[tuple[str, str, str]]:
    return [(n.name, n.previous, n.status) for n in channels.RECEIVED[box]]


def notes(using: str) -> list[Notification]:
    return list(Notification.objects.using(using).order_by("id"))


def scheduled_job(using: str, name: str, **columns: Any) -> None:
    """A ``Job`` row written as the journal writes one (an hourly schedule, grace 5m)."""
    now = datetime.now(timezone.utc)
    fields: dict[str, Any] = {"first_seen_at": now - timedelta(days=1), "schedule": "1h", "grace": 300.0}
    Job.objects.using(using).create(name=name, **{**fields, **columns})


def test_a_failed_run_is_one_failing_notice_and_the_next_success_one_ok(using: str) -> None:
    assert ran("--shard", "a", "--fail", "disk full") == 1, "the job fails as it would without alerts"
    assert sent() == [("journaled-a", "ok", "failing")]
    [failing] = channels.RECEIVED["main"]
    assert "disk full" in failing.reason and failing.id is not None
    assert ran("--shard", "a", "--fail", "still full") == 1
    assert sent() == [("journaled-a", "ok", "failing")], "still failing is no change"
    assert ran("--shard", "a") == 0
    assert sent() == [("journaled-a", "ok", "failing"), ("journaled-a", "failing", "ok")]
    rows = notes(using)
    assert [(n.status, n.previous, n.delivered) for n in rows] == [
        ("failing", "ok", [MAIN]),
        ("ok", "failing", [MAIN]),
    ]
    assert all(n.sent_at is not None and n.attempts == 1 and n.last_error == "" for n in rows)
    assert Job.objects.using(using).get(name="journaled-a").notified_status == "ok"


def test_failures_before_alert_3_alerts_on_the_third_failure_in_a_row(using: str) -> None:
    schedules = {"journaled-b": {"schedule": "1h", "grace": "5m", "failures_before_alert": 3}}
    with override_settings(TSLOCK_SCHEDULES=schedules):
        assert ran("--shard", "b", "--fail", "one") == 1
        assert ran("--shard", "b", "--fail", "two") == 1
        assert sent() == []
        code, out, _ = overdue("--notify")
        assert code == 0 and "journaled-b" not in out, "two failures of three are ok"
        assert ran("--shard", "b") == 0
        assert ran("--shard", "b", "--fail", "one again") == 1
        assert ran("--shard", "b", "--fail", "two again") == 1
        assert sent() == [], "a success in between starts the count again"
        assert ran("--shard", "b", "--fail", "three") == 1
    assert sent() == [("journaled-b", "ok", "failing")]
    assert channels.RECEIVED["main"][0].reason.startswith("3 runs in a row failed; last run failed at ")


def test_running_long_after_max_duration_then_failing_once_lost(using: str) -> None:
    started = datetime.now(timezone.utc).replace(microsecond=0)
    scheduled_job(
        using, "nightly", last_outcome=outcomes.RUNNING, last_started_at=started,
        last_deadline=started + timedelta(hours=1), max_duration=600.0, last_success_at=started,
    )  # fmt: skip
    within = (started + timedelta(minutes=9)).isoformat()
    assert overdue("--notify", "--at", within)[0] == 0
    assert sent() == []
    code, out, _ = overdue("--notify", "--at", (started + timedelta(minutes=11)).isoformat())
    assert code == 1 and out.startswith("running_long nightly: running since ")
    assert sent() == [("nightly", "ok", "running_long")]
    assert "longer than its max_duration 10m" in channels.RECEIVED["main"][0].reason
    assert overdue("--notify", "--at", (started + timedelta(minutes=30)).isoformat())[0] == 1
    assert len(sent()) == 1, "still running long is no change"
    # Past the lock's deadline the run is lost: failing.
    assert overdue("--notify", "--at", (started + timedelta(hours=2)).isoformat())[0] == 1
    assert sent() == [("nightly", "ok", "running_long"), ("nightly", "running_long", "failing")]


def test_late_and_never_ran_are_sent_once_at_the_instant_given(using: str) -> None:
    with override_settings(TSLOCK_SCHEDULES={"export": {"schedule": "1h", "grace": "10m"}}):
        assert ran("--shard", "c") == 0
        code, out, _ = overdue("--notify")  # first sight of "export": new, not a change
        assert code == 0 and out.startswith("new          export: has never run")
        assert sent() == []
        later = (datetime.now(timezone.utc) + timedelta(hours=2)).isoformat()
        code, out, _ = overdue("--notify", "--at", later)
        assert code == 1
        assert sorted(sent()) == [("export", "ok", "late"), ("journaled-c", "ok", "late")]
        reasons = {n.name: n.reason for n in channels.RECEIVED["main"]}
        assert reasons["export"].startswith("never ran (scheduled since ")
        assert overdue("--notify", "--at", later)[0] == 1
        assert len(sent()) == 2, "each change once"
        assert ran("--shard", "c") == 0  # back on time, now
    assert sent()[-1] == ("journaled-c", "late", "ok")


def test_a_channel_that_raises_changes_nothing_and_gets_the_notice_once_it_works(using: str) -> None:
    two = {
        "channels": [
            {"BACKEND": "tests.alerts.channels.Recording", "OPTIONS": {"box": "down"}},
            {"BACKEND": "tests.alerts.channels.Recording", "OPTIONS": {"box": "up"}},
        ]
    }
    channels.DOWN.add("down")
    with override_settings(TSLOCK_ALERTS=two):
        assert ran("--shard", "d", "--fail", "boom") == 1
        [row] = Job.objects.using(using).filter(name="journaled-d").values_list("last_outcome", flat=True)
        assert row == outcomes.FAILED, "the run is journaled as it ended"
        [note] = notes(using)
        assert note.sent_at is None and note.delivered == [UP]
        assert note.last_error.startswith(f"{DOWN}: ConnectionRefusedError: ")
        assert sent("up") == [("journaled-d", "ok", "failing")] and sent("down") == []
        code, _, err = overdue("--notify")
        assert code == 1 and f"channel {DOWN} failed (ConnectionRefusedError" in err
        channels.DOWN.clear()
        assert overdue("--notify")[0] == 1
        assert overdue("--notify")[0] == 1
    assert sent("down") == [("journaled-d", "ok", "failing")], "sent once it works, once"
    assert sent("up") == [("journaled-d", "ok", "failing")], "the channel that took it is not sent it again"
    [note] = notes(using)
    assert note.sent_at is not None and note.attempts == 4 and len(note.delivered) == 2


def database_url(using: str) -> str:
    name = connections[using].settings_dict["NAME"]
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return f"postgres://postgres@127.0.0.1:5432/{name}"
    if vendor == "mysql":
        return f"mysql://root@127.0.0.1:3306/{name}?charset=utf8mb4"
    return f"sqlite:///{name}"


def manage(using: str, *args: str, **env: str) -> subprocess.Popen[str]:
    """``manage.py ARGS`` in a process of its own on the test database, with the
    channels ``env`` names (tests/alerts/process_settings.py)."""
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.alerts.process_settings",
        "DATABASE_URL": database_url(using),
        "TSLOCK_URL": "memory://",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environ, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def test_an_http_500_leaves_tslock_runs_exit_status_and_the_notice_is_sent_once_later(
    using: str, tmp_path: Path
) -> None:
    taken = tmp_path / "taken.txt"
    secret = "whsec-evaluation-test-secret"
    hook = WebhookReceiver(secret=secret, status=500)
    with http_server(hook) as base:
        env = {"ALERTS_URL": f"{base}/hook", "ALERTS_SECRET": secret, "ALERTS_FILE": str(taken)}
        program = [sys.executable, "-c", "import sys; sys.exit(3)"]
        argv = ["tslock", "run", "report", "--at-most-for", "1m", "--schedule", "1h", "--", *program]
        code, _, err = finished(manage(using, *argv, **env))
        assert code == 3, f"the program's own exit status, whatever the channel does: {err}"
        assert [json.loads(r.body)["status"] for r in hook.received] == ["failing"]
        assert len(taken.read_text().splitlines()) == 1, "the other channel took it at once"
        [note] = notes(using)
        assert note.sent_at is None and "500" in note.last_error and secret not in note.last_error
        hook.status = 204
        for _ in range(2):
            code, out, err = finished(manage(using, "tslock", "overdue", "--notify", **env))
            assert code == 1 and "failing      report: last run failed at " in out, err
    ids = [r.headers["x-tslock-notification-id"] for r in hook.received]
    assert ids == [str(note.id)] * 2, "one retry, then no more"
    assert all(r.signature_valid for r in hook.received)
    assert len(taken.read_text().splitlines()) == 1
    note.refresh_from_db(using=using)
    assert note.sent_at is not None and note.attempts == 3


def test_four_overdue_notify_processes_at_once_send_each_change_once(using: str, tmp_path: Path) -> None:
    failed_at = datetime.now(timezone.utc) - timedelta(minutes=5)
    names = [f"sync-{n}" for n in range(6)]
    for name in names:
        scheduled_job(
            using, name, last_outcome=outcomes.FAILED, last_started_at=failed_at,
            last_finished_at=failed_at, last_detail="exit status 1",
        )  # fmt: skip
    taken = tmp_path / "taken.txt"
    env = {"ALERTS_FILE": str(taken), "ALERTS_DELAY": "0.05"}
    processes = [manage(using, "tslock", "overdue", "--notify", **env) for _ in range(4)]
    results = [finished(process) for process in processes]
    assert [code for code, _, _ in results] == [1] * 4, [err for _, _, err in results]
    lines = [line.split() for line in taken.read_text().splitlines()]
    assert sorted(name for _, name, _, _, _ in lines) == names, "each change sent once"
    assert len({note_id for note_id, *_ in lines}) == len(names)
    assert Notification.objects.using(using).count() == len(names)
    assert not Notification.objects.using(using).filter(sent_at=None).exists()


def test_a_paused_job_raises_nothing(using: str) -> None:
    failed_at = datetime.now(timezone.utc) - timedelta(minutes=5)
    scheduled_job(
        using, "paused-job", last_outcome=outcomes.FAILED, last_started_at=failed_at,
        last_finished_at=failed_at, paused_at=failed_at,
    )  # fmt: skip
    code, out, _ = overdue("--notify")
    assert code == 0 and out.startswith("paused       paused-job: paused since ")
    assert sent() == [] and notes(using) == []


def test_a_hung_channel_does_not_hold_the_jobs_call(using: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation, "SEND_DEADLINE", 1.0)
    hung = {"channels": [{"BACKEND": "tests.alerts.channels.Hung"}]}
    with override_settings(TSLOCK_ALERTS=hung):
        began = time.monotonic()
        assert job("--shard", "e", "--fail", "slow alerts") == 1
        returned = time.monotonic() - began
        assert after_run.wait(30)
    assert returned < 10, f"the job's call waited {returned:.1f} s for a channel that hangs for 60 s"
    [note] = notes(using)
    assert note.sent_at is None and "no answer within 1 s" in note.last_error


def test_without_channels_changes_are_recorded_as_sent_and_nothing_is_sent(using: str) -> None:
    with override_settings(TSLOCK_ALERTS=None):
        assert job("--shard", "f", "--fail", "x") == 1
        assert after_run.wait(30)
        assert notes(using) == [], "no channel: a run's end evaluates nothing"
        assert overdue("--notify")[0] == 1
    [note] = notes(using)
    assert (note.name, note.status, note.delivered) == ("journaled-f", "failing", [])
    assert note.sent_at is not None


def test_an_evaluation_returns_at_once_while_another_holds_the_lock(using: str) -> None:
    scheduled_job(using, "held", last_outcome=outcomes.FAILED, last_started_at=datetime.now(timezone.utc))
    other = DatabaseLockProvider("other", using=using).lock(LockConfiguration(LOCK_NAME, "1m"))
    assert other is not None
    try:
        assert evaluate(using=using).evaluated is False
        assert notes(using) == []
    finally:
        other.unlock()
    done = evaluate(using=using)
    assert done.evaluated and [n.name for n in done.recorded] == ["held"] and done.sent == 1


def test_a_run_that_changes_no_status_does_not_take_the_evaluators_lock(using: str) -> None:
    from tslock_django.models import Lock

    assert ran("--shard", "calm") == 0
    assert ran("--shard", "calm") == 0
    assert sent() == []
    assert not Lock.objects.using(using).filter(name=LOCK_NAME).exists(), (
        "a success of a job that is ok needs no evaluation: two reads, not the lock"
    )
    assert ran("--shard", "calm", "--fail", "broken") == 1
    assert sent() == [("journaled-calm", "ok", "failing")]
    assert Lock.objects.using(using).filter(name=LOCK_NAME).exists()


def test_a_dead_channel_does_not_hold_up_the_others_past_a_page(
    using: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = {
        "channels": [
            {"BACKEND": "tests.alerts.channels.Recording", "OPTIONS": {"box": "down"}},
            {"BACKEND": "tests.alerts.channels.Recording", "OPTIONS": {"box": "up"}},
        ]
    }
    monkeypatch.setattr(evaluation, "BATCH", 2)
    channels.DOWN.add("down")
    with override_settings(TSLOCK_ALERTS=two):
        for shard in ("p", "q", "r"):
            assert ran("--shard", shard, "--fail", "boom") == 1
        assert overdue("--notify")[0] == 1
    # The third notice lies past a page of notices that only the dead channel still needs.
    reached = sorted(n.name for n in channels.RECEIVED["up"])
    assert reached == ["journaled-p", "journaled-q", "journaled-r"]
    assert all(n.sent_at is None for n in notes(using))


def test_a_failing_jobs_next_run_under_way_is_no_recovery(using: str) -> None:
    assert ran("--shard", "f", "--fail", "boom") == 1
    assert sent() == [("journaled-f", "ok", "failing")]
    Job.objects.using(using).filter(name="journaled-f").update(
        last_outcome=outcomes.RUNNING,
        last_started_at=datetime.now(timezone.utc),
        last_finished_at=None,
        last_deadline=datetime.now(timezone.utc) + timedelta(minutes=10),
    )
    assert overdue("--notify")[0] in (0, 1)
    assert sent() == [("journaled-f", "ok", "failing")], "no 'ok' while the next run has no result"
    assert Job.objects.using(using).get(name="journaled-f").notified_status == "failing"


def test_notification_names_compare_byte_for_byte(using: str) -> None:
    at = datetime.now(timezone.utc)
    for name in ("Report", "report", "Report "):
        Notification.objects.using(using).create(name=name, status="failing", previous="ok", at=at)
    assert Notification.objects.using(using).filter(name="Report").count() == 1
    ordered = list(Notification.objects.using(using).order_by("name").values_list("name", flat=True))
    assert ordered == ["Report", "Report ", "report"], "code point order, as the Runs page sorts"
