"""Schedules in a named time zone (issue 34): a cron schedule is read in its ``tz``,
daylight saving included, the journal keeps the zone with the schedule, and
``tslock overdue --at`` evaluates at a given instant.

The days: in Europe/Berlin 2026-03-29 goes from 02:00 CET straight to 03:00 CEST (a
``30 2 * * *`` job is due once, at 03:00 local, 01:00 UTC) and 2026-10-25 goes through
02:00-03:00 twice (due once, at the first 02:30, CEST, 00:30 UTC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from tests.conftest import database_marks
from tslock_django import locked_command, locked_task
from tslock_django.checks import check_journal
from tslock_django.journal import outcomes
from tslock_django.journal.alerting import alerting
from tslock_django.journal.models import Job
from tslock_django.journal.recorder import to_db
from tslock_django.journal.schedules import configured_schedules, parse_schedule, stored_schedule
from tslock_django.journal.status import status_of, statuses

ROOT = Path(__file__).resolve().parents[2]
MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}
BERLIN = "Europe/Berlin"
NIGHTLY = "30 2 * * *"
STORED = f"CRON_TZ={BERLIN} {NIGHTLY}"
GRACE = timedelta(minutes=10)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


def berlin_nightly() -> Any:
    return parse_schedule(NIGHTLY, GRACE, tz=BERLIN)


# -- due times around the two days ---------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "next_due"),
    [
        ("2026-03-28T12:00:00+01:00", "2026-03-29T03:00:00+02:00"),  # the skipped 02:30 is due at 03:00
        ("2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"),  # and only once
        ("2026-10-24T12:00:00+02:00", "2026-10-25T02:30:00+02:00"),  # the first 02:30 (CEST)
        ("2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"),  # not the second (CET)
        ("2026-10-25T02:15:00+01:00", "2026-10-26T02:30:00+01:00"),  # from inside the repeated hour
    ],
)
def test_next_due_is_the_wall_clock_time_in_the_zone_once_a_day(after: str, next_due: str) -> None:
    with override_settings(TIME_ZONE="UTC"):
        assert berlin_nightly().next_due(utc(after)) == utc(next_due)


@pytest.mark.parametrize(
    ("now", "last_due"),
    [
        ("2026-03-29T01:59:00+01:00", "2026-03-28T02:30:00+01:00"),
        ("2026-03-29T03:00:00+02:00", "2026-03-29T03:00:00+02:00"),
        ("2026-10-25T02:45:00+02:00", "2026-10-25T02:30:00+02:00"),
        # In the second pass of the repeated hour the due time of the day is still the
        # first 02:30 (cronsim, started there, would answer the day before).
        ("2026-10-25T02:15:00+01:00", "2026-10-25T02:30:00+02:00"),
        ("2026-10-25T02:45:00+01:00", "2026-10-25T02:30:00+02:00"),
    ],
)
def test_last_due_around_the_two_days(now: str, last_due: str) -> None:
    with override_settings(TIME_ZONE="UTC"):
        assert berlin_nightly().last_due(utc(now)) == utc(last_due)


def test_without_tz_cron_is_read_in_time_zone_and_with_it_in_the_zone_whatever_time_zone_says() -> None:
    after = utc("2026-06-01T12:00:00+00:00")
    with override_settings(TIME_ZONE="UTC"):
        assert parse_schedule(NIGHTLY).next_due(after) == utc("2026-06-02T02:30:00+00:00")
        assert parse_schedule(NIGHTLY, tz=BERLIN).next_due(after) == utc("2026-06-02T02:30:00+02:00")
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        assert parse_schedule(NIGHTLY).next_due(after) == utc("2026-06-02T02:30:00+09:00")
        assert parse_schedule(NIGHTLY, tz=BERLIN).next_due(after) == utc("2026-06-02T02:30:00+02:00")


# -- the status rule at fixed instants -----------------------------------------------------


def succeeded_at(success: str) -> Job:
    at = utc(success)
    return Job(
        name="nightly",
        provider="default",
        first_seen_at=at - timedelta(days=30),
        schedule=STORED,
        grace=GRACE.total_seconds(),
        last_started_at=at,
        last_finished_at=at + timedelta(seconds=5),
        last_outcome=outcomes.SUCCEEDED,
        last_success_at=at,
    )


@pytest.mark.parametrize(
    ("success", "now", "status", "due"),
    [
        # Spring forward: due at 03:00 CEST, late once grace has passed after it (within
        # grace the time shown is the next one). Read in UTC (TIME_ZONE) instead, the run
        # of 03:31 CET the day before would cover it.
        ("2026-03-28T03:31:00+01:00", "2026-03-29T03:10:00+02:00", "ok", "2026-03-30T02:30:00+02:00"),
        ("2026-03-28T03:31:00+01:00", "2026-03-29T03:11:00+02:00", "late", "2026-03-29T03:00:00+02:00"),
        ("2026-03-29T03:01:00+02:00", "2026-03-29T12:00:00+02:00", "ok", "2026-03-30T02:30:00+02:00"),
        # Fall back: due at the first 02:30 (CEST).
        ("2026-10-24T02:31:00+02:00", "2026-10-25T02:39:00+02:00", "ok", "2026-10-26T02:30:00+01:00"),
        ("2026-10-24T02:31:00+02:00", "2026-10-25T02:41:00+02:00", "late", "2026-10-25T02:30:00+02:00"),
        # Done at the first 02:30: not due again at the second one (CET).
        ("2026-10-25T02:32:00+02:00", "2026-10-25T02:15:00+01:00", "ok", "2026-10-26T02:30:00+01:00"),
        ("2026-10-25T02:32:00+02:00", "2026-10-25T02:45:00+01:00", "ok", "2026-10-26T02:30:00+01:00"),
    ],
)
def test_late_or_not_at_instants_around_the_two_days(success: str, now: str, status: str, due: str) -> None:
    with override_settings(TIME_ZONE="UTC"):
        found = status_of("nightly", succeeded_at(success), stored_schedule(STORED, GRACE), utc(now))
    assert (found.status, found.due_at) == (status, utc(due)), found.reason


# -- bad zones: one line at import, and the settings check ----------------------------------


@pytest.mark.parametrize("zone", ["Europe/Berlín", "CEST", "../../etc/passwd", "", 2])
def test_a_bad_zone_fails_when_the_decorator_runs_naming_it_and_what_is_accepted(zone: object) -> None:
    for decorate in (
        lambda: locked_command("5m", schedule=NIGHTLY, tz=zone)(type("Command", (BaseCommand,), {})),
        lambda: locked_task("5m", schedule=NIGHTLY, tz=zone),
    ):
        with pytest.raises(ValueError) as caught:
            decorate()
        message = str(caught.value)
        assert message.startswith(f"tz {zone!r} of schedule '30 2 * * *' is not")
        assert "IANA time zone name such as 'Europe/Berlin'" in message and "\n" not in message


def test_tz_needs_a_cron_schedule() -> None:
    with pytest.raises(ValueError, match="tz is given without a schedule"):
        locked_command("5m", tz=BERLIN)
    with pytest.raises(ValueError, match="tz is given without a schedule"):
        locked_task("5m", tz=BERLIN)
    with pytest.raises(ValueError, match="give tz only with a cron schedule"):
        locked_task("5m", schedule="1h", tz=BERLIN)


def test_a_schedule_with_its_zone_must_fit_the_journals_column() -> None:
    often = "0,5,10,15,20,25,30,35,40,45,50,55 0,2,4,6,8,10,12,14,16,18,20,22 * * *"
    with pytest.raises(ValueError, match=r"is 1\d\d characters with its zone; the journal keeps at most 100"):
        parse_schedule(often, tz="America/Argentina/ComodRivadavia")
    assert parse_schedule(often, tz=BERLIN).stored == f"CRON_TZ={BERLIN} {often}"


def test_tslock_schedules_take_a_tz_and_the_settings_check_reports_a_bad_one() -> None:
    found = configured_schedules({"report": {"schedule": NIGHTLY, "tz": BERLIN}})
    assert (
        found["report"].tz == BERLIN
        and found["report"].describe() == "30 2 * * * in Europe/Berlin (grace 2h24m)"
    )
    with override_settings(TSLOCK_SCHEDULES={"report": {"schedule": NIGHTLY, "tz": "Mars/Olympus"}}):
        [error] = check_journal()
    assert error.id == "tslock.E009"
    assert error.msg.startswith("tz 'Mars/Olympus' of TSLOCK_SCHEDULES['report']['schedule'] '30 2 * * *'")


# -- the journal keeps the zone -------------------------------------------------------------


@pytest.mark.parametrize(
    "using",
    [
        pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
        pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
        pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
    ],
)
def test_a_run_stores_its_zone_and_readers_evaluate_it(using: str) -> None:
    @locked_task("1m", name="berlin-nightly", schedule=NIGHTLY, grace="10m", tz=BERLIN)
    def nightly() -> None:
        pass

    @locked_task("1m", name="utc-nightly", schedule=NIGHTLY, grace="10m")
    def plain() -> None:
        pass

    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": using}, TIME_ZONE="UTC"):
        nightly()
        plain()
        rows = {job.name: job for job in Job.objects.using(using).all()}
        assert rows["berlin-nightly"].schedule == STORED and rows["berlin-nightly"].grace == 600.0
        assert rows["utc-nightly"].schedule == NIGHTLY, "without tz the stored text is unchanged"
        # Both last succeeded at 03:31 CET the day before spring-forward: at 01:11 UTC the
        # Berlin one is 11 minutes past its 03:00 CEST, the other not due until 02:30 UTC.
        Job.objects.using(using).update(last_success_at=to_db(utc("2026-03-28T03:31:00+01:00")))
        at = utc("2026-03-29T03:11:00+02:00")
        found = {s.name: s for s in statuses(using, now=at)}
        assert found["berlin-nightly"].status == "late" and found["berlin-nightly"].schedule.tz == BERLIN
        assert found["berlin-nightly"].as_json()["tz"] == BERLIN
        assert found["utc-nightly"].status == "ok" and found["utc-nightly"].as_json()["tz"] is None
        # The grouped reading of the metrics and health check groups by the stored text.
        late = alerting(using, at, limit=10)
        assert [status.name for _, status in late.found] == ["berlin-nightly"]


# -- tslock overdue --at --------------------------------------------------------------------


@pytest.fixture
def berlin_job() -> Iterator[None]:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}, TIME_ZONE="UTC"):
        job = succeeded_at("2026-03-28T03:31:00+01:00")
        job.last_success_at = to_db(job.last_success_at)
        job.save()
        yield


def overdue(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("tslock", "overdue", *args, stdout=out)
    except CommandError as err:
        if err.returncode != 1:
            raise
        return 1, out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db
def test_overdue_at_evaluates_as_of_the_instant_given(berlin_job: None) -> None:
    assert overdue("--at", "2026-03-29T03:10:00+02:00") == (0, "Every scheduled job is on time.\n")
    code, text = overdue("--at", "2026-03-29T03:11:00+02:00")
    assert code == 1 and text.startswith(
        "late         nightly: due at 2026-03-29T01:00:00+00:00 and not done within"
    )
    code, text = overdue("--json", "--at", "2026-03-29T01:11:00Z")
    [shown] = json.loads(text)
    assert code == 1 and shown["status"] == "late" and shown["tz"] == BERLIN
    assert shown["due_at"] == "2026-03-29T01:00:00+00:00" and shown["schedule"] == NIGHTLY
    assert overdue("--at", "2026-03-29T01:10:00z")[0] == 0


@pytest.mark.django_db
def test_overdue_at_another_instant_does_not_record_a_first_sight(berlin_job: None) -> None:
    """A name of TSLOCK_SCHEDULES that has no row yet is first seen by a real evaluation
    only: dated at an instant given with --at, it would become late (or stay new) for
    every later reader."""
    with override_settings(TSLOCK_SCHEDULES={"export": {"schedule": "1h"}}):
        code, text = overdue("--at", "2026-03-29T01:00:00Z")
        assert code == 0 and text == "new          export: has never run\n"
        assert not Job.objects.filter(name="export").exists()
        overdue()
        assert Job.objects.filter(name="export").exists(), "now, as before, the first sight is recorded"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-03-29T03:10:00", "has no offset; give one (e.g. +02:00) or Z"),
        ("2026-03-29", "has no offset"),
        ("tomorrow", "is not an ISO-8601 time"),
    ],
)
def test_overdue_at_refuses_a_time_without_an_offset(berlin_job: None, value: str, words: str) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("tslock", "overdue", "--at", value, stdout=StringIO())
    assert str(caught.value).startswith(f"Error: argument --at: {value!r} {words}")


def test_overdue_at_without_an_offset_is_a_usage_error_in_the_shell(tmp_path: Path) -> None:
    """Exit status 2 and argparse's usage lines, before the journal is read."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-read.sqlite3'}",
        "TSLOCK_URL": "memory://",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "tslock", "overdue", "--at", "2026-03-29T03:10:00"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith(
        "error: argument --at: '2026-03-29T03:10:00' has no offset; give one (e.g. +02:00) or Z, "
        "so the instant is not guessed"
    ), done.stderr
