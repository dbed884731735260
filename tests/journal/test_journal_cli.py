"""tslock runs, tslock overdue and tslock purge --runs-older-than."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tslock_django.journal.models import Job, Run

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}


@pytest.fixture(autouse=True)
def journal_on(db: None) -> Iterator[None]:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        yield


def tslock(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("tslock", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_runs_lists_newest_first_as_text_and_json() -> None:
    call_command("journaled_job", "--shard", "one", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("journaled_job", "--shard", "one", "--fail", "bad\x1b[31m input", stdout=StringIO())
    out, _ = tslock("runs", "journaled-one")
    lines = out.splitlines()
    assert len(lines) == 2 and "failed" in lines[0] and "succeeded" in lines[1]
    assert "\x1b" not in out and "\\x1b" in out, "a detail is escaped on the terminal"
    rows = json.loads(tslock("runs", "--json", "--outcome", "failed")[0])
    assert [r["outcome"] for r in rows] == ["failed"] and rows[0]["name"] == "journaled-one"
    assert rows[0]["started_at"].endswith("+00:00")
    assert json.loads(tslock("runs", "--json", "--limit", "1")[0])[0]["outcome"] == "failed"


@pytest.mark.parametrize(
    "argv", [["runs", "--limit", "0"], ["runs", "--outcome", "fine"], ["runs", "--limit", "x"]]
)
def test_runs_flags_are_validated_by_the_parser(argv: list[str]) -> None:
    with pytest.raises(CommandError, match="argument --"):
        tslock(*argv)


def test_overdue_exits_1_when_late_and_0_when_on_time() -> None:
    call_command("journaled_job", "--shard", "ok", stdout=StringIO())
    out, _ = tslock("overdue")
    assert out == "Every scheduled job is on time.\n"
    Job.objects.filter(name="journaled-ok").update(
        last_success_at=datetime.now(timezone.utc) - timedelta(hours=2)
    )
    with pytest.raises(CommandError, match="late or failing") as caught:
        tslock("overdue", "--json")
    assert caught.value.returncode == 1
    with override_settings(TSLOCK_SCHEDULES={"never-ran": {"schedule": "1d"}}):
        out = StringIO()
        with pytest.raises(CommandError):
            call_command("tslock", "overdue", "--json", stdout=out)
    rows = {r["name"]: r for r in json.loads(out.getvalue())}
    assert rows["journaled-ok"]["status"] == "late" and rows["never-ran"]["status"] == "new"
    assert set(rows["journaled-ok"]) >= {
        "name",
        "status",
        "reason",
        "last_started_at",
        "last_success_at",
        "due_at",
    }


def test_purge_runs_keeps_each_names_latest_run_and_success() -> None:
    for _ in range(3):
        call_command("journaled_job", "--shard", "old", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("journaled_job", "--shard", "old", "--fail", "x", stdout=StringIO())
    Run.objects.update(started_at=datetime.now(timezone.utc) - timedelta(days=100))
    out, _ = tslock("purge", "--runs-older-than", "90d", "--dry-run")
    assert "would delete 2 runs" in out and Run.objects.count() == 4
    out, _ = tslock("purge", "--runs-older-than", "90d")
    assert "deleted 2 runs" in out
    kept = sorted(Run.objects.values_list("outcome", flat=True))
    assert kept == ["failed", "succeeded"], "the latest run and the latest success"


def test_purge_needs_one_of_its_two_ages() -> None:
    with pytest.raises(CommandError, match=r"--expired-for .* --runs-older-than") as caught:
        tslock("purge")
    assert caught.value.returncode == 2
