"""Schedules and the status rule: new, ok, late, failing; bad values fail at import."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management.base import BaseCommand
from django.test import override_settings

from tests.conftest import database_marks
from tslock_django import lock, locked_command
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job
from tslock_django.journal.recorder import from_db
from tslock_django.journal.schedules import configured_schedules, parse_schedule
from tslock_django.journal.status import status_of, statuses

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("schedule", "grace", "words"),
    [
        ("every hour", None, "has 2 fields"),
        ("often", None, "is not a schedule"),
        ("0 3 * *", None, "has 4 fields"),
        ("61 * * * *", None, "is not a valid cron expression"),
        ("0", None, "period of zero"),
        ("1h", "soon", "grace"),
        ("1h", "-5m", "grace"),
    ],
)
def test_bad_schedules_fail_when_the_decorator_runs(schedule: str, grace: str | None, words: str) -> None:
    with pytest.raises(ValueError, match=words) as caught:

        @locked_command("1m", schedule=schedule, grace=grace)
        class Command(BaseCommand):
            pass

    assert repr(schedule) in str(caught.value) or "grace" in str(caught.value)
    if "grace" not in words:
        assert "five-field cron" in str(caught.value) or "positive period" in str(caught.value)


def test_grace_without_a_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="grace is given without a schedule"):
        locked_command("1m", grace="5m")


def test_default_grace_is_a_tenth_of_the_period_and_at_least_a_minute() -> None:
    assert parse_schedule("10h").grace == timedelta(hours=1)
    assert parse_schedule("5m").grace == timedelta(minutes=1)
    assert parse_schedule("*/30 * * * *").grace == timedelta(minutes=3)
    assert parse_schedule("1h", "10m").grace == timedelta(minutes=10)


def test_cron_due_times_follow_the_time_zone() -> None:
    with override_settings(TIME_ZONE="Europe/Berlin"):
        nightly = parse_schedule("0 3 * * *")
        # 12:00 UTC is 14:00 in Berlin (summer time): 03:00 Berlin was 01:00 UTC.
        assert nightly.last_due(T0) == datetime(2026, 6, 1, 1, 0, tzinfo=timezone.utc)
        assert nightly.next_due(T0) == datetime(2026, 6, 2, 1, 0, tzinfo=timezone.utc)


def test_tslock_schedules_are_checked_with_their_key() -> None:
    found = configured_schedules({"report": {"schedule": "1d", "grace": "1h"}})
    assert found["report"].period == timedelta(days=1) and found["report"].grace == timedelta(hours=1)
    with pytest.raises(ValueError, match=r"TSLOCK_SCHEDULES\['report'\] has unknown keys \['every'\]"):
        configured_schedules({"report": {"schedule": "1d", "every": "1h"}})
    with pytest.raises(ValueError, match=r"TSLOCK_SCHEDULES\['x'\]\['schedule'\] 'often' is not a schedule"):
        configured_schedules({"x": {"schedule": "often"}})


def job(**fields: object) -> Job:
    values: dict[str, object] = {"name": "j", "first_seen_at": T0 - timedelta(days=10), "provider": "default"}
    values.update(fields)
    return Job(**values)


def test_the_status_rule_for_a_period() -> None:
    hourly = parse_schedule("1h", "10m")
    assert status_of("j", None, hourly, T0).status == "new"
    ok = job(
        last_started_at=T0 - timedelta(minutes=30),
        last_outcome=outcomes.SUCCEEDED,
        last_success_at=T0 - timedelta(minutes=30),
    )
    up = status_of("j", ok, hourly, T0)
    assert up.status == "ok" and up.due_at == T0 + timedelta(minutes=30)
    assert status_of("j", ok, hourly, T0 + timedelta(minutes=39)).status == "ok", "within grace"
    late = status_of("j", ok, hourly, T0 + timedelta(minutes=41))
    assert late.status == "late" and late.due_at == T0 + timedelta(minutes=30) and "grace 10m" in late.reason
    failed = job(
        last_started_at=T0 - timedelta(minutes=5),
        last_outcome=outcomes.FAILED,
        last_finished_at=T0 - timedelta(minutes=4),
        last_detail="RuntimeError: boom",
        last_success_at=T0 - timedelta(minutes=30),
    )
    failing = status_of("j", failed, hourly, T0)
    assert failing.status == "failing" and "RuntimeError: boom" in failing.reason
    never = job(
        last_started_at=T0 - timedelta(hours=3),
        last_outcome=outcomes.RUNNING,
        last_deadline=T0 + timedelta(hours=1),
    )
    assert status_of("j", never, hourly, T0).status == "late", "no success since first seen ten days ago"


@override_settings(TIME_ZONE="UTC")
def test_the_status_rule_for_cron() -> None:
    nightly = parse_schedule("0 3 * * *", "1h")
    at_4 = datetime(2026, 6, 2, 4, 30, tzinfo=timezone.utc)
    done = job(
        last_started_at=T0,
        last_outcome=outcomes.SUCCEEDED,
        last_success_at=datetime(2026, 6, 2, 3, 1, tzinfo=timezone.utc),
    )
    up = status_of("j", done, nightly, at_4)
    assert up.status == "ok" and up.due_at == datetime(2026, 6, 3, 3, 0, tzinfo=timezone.utc)
    missed = job(
        last_started_at=T0,
        last_outcome=outcomes.SUCCEEDED,
        last_success_at=datetime(2026, 6, 1, 3, 1, tzinfo=timezone.utc),
    )
    assert status_of("j", missed, nightly, datetime(2026, 6, 2, 3, 59, tzinfo=timezone.utc)).status == "ok"
    late = status_of("j", missed, nightly, at_4)
    assert late.status == "late" and late.due_at == datetime(2026, 6, 2, 3, 0, tzinfo=timezone.utc)


@pytest.fixture
def journal_on() -> Iterator[None]:
    with override_settings(
        TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES={"cron-only": {"schedule": "1d"}}
    ):
        yield


@pytest.mark.django_db
def test_statuses_list_configured_and_declared_names(journal_on: None) -> None:
    Job.objects.create(name="declared", first_seen_at=T0, schedule="1h", grace=600.0)
    Job.objects.create(name="unscheduled", first_seen_at=T0)
    found = {s.name: s for s in statuses("default", now=T0)}
    assert set(found) == {"cron-only", "declared"}
    assert found["cron-only"].status == "new" and found["declared"].schedule is not None
    assert found["declared"].as_json()["status"] == "new"


def test_a_period_job_that_never_ran_is_new_until_its_first_due_time_plus_grace() -> None:
    hourly = parse_schedule("1h", "10m")
    seen = job(first_seen_at=T0)
    new = status_of("j", seen, hourly, T0 + timedelta(minutes=69))
    assert new.status == "new" and new.due_at == T0 + timedelta(hours=1), "within grace of the first due time"
    late = status_of("j", seen, hourly, T0 + timedelta(minutes=71))
    assert late.status == "late" and late.due_at == T0 + timedelta(hours=1)
    assert late.reason.startswith("never ran (scheduled since 2026-06-01") and "grace 10m" in late.reason
    skipped_only = job(first_seen_at=T0, last_attempt_at=T0, last_attempt_outcome=outcomes.SKIPPED)
    assert status_of("j", skipped_only, hourly, T0 + timedelta(hours=2)).status == "late", "a skip is no run"


@override_settings(TIME_ZONE="UTC")
def test_a_cron_job_that_never_ran_is_late_after_the_first_due_time_since_first_seen() -> None:
    nightly = parse_schedule("0 3 * * *", "1h")
    seen = job(first_seen_at=datetime(2026, 6, 1, 3, 30, tzinfo=timezone.utc))  # just after a due time
    first_due = datetime(2026, 6, 2, 3, 0, tzinfo=timezone.utc)
    assert status_of("j", seen, nightly, datetime(2026, 6, 2, 3, 59, tzinfo=timezone.utc)).status == "new"
    late = status_of("j", seen, nightly, datetime(2026, 6, 2, 4, 1, tzinfo=timezone.utc))
    assert late.status == "late" and late.due_at == first_due and "never ran" in late.reason


@pytest.mark.django_db
def test_the_journal_first_sees_a_configured_name_when_it_first_evaluates_it(journal_on: None) -> None:
    """A crontab line that was never installed: no run ever makes a row, so the first
    evaluation records when the name was first seen, and a later one finds it late."""
    assert statuses("default", now=T0)[0].status == "new"
    assert Job.objects.get(name="cron-only").first_seen_at == T0
    again = statuses("default", now=T0 + timedelta(hours=1))
    assert Job.objects.get(name="cron-only").first_seen_at == T0, "first seen once"
    assert again[0].status == "new" and again[0].due_at == T0 + timedelta(days=1)
    [late] = statuses("default", now=T0 + timedelta(days=1, hours=3))
    assert late.name == "cron-only" and late.status == "late" and "never ran" in late.reason
    assert statuses("default", names=["cron-only"], now=T0 + timedelta(days=1, hours=3))[0].status == "late"


@pytest.mark.parametrize(
    "using",
    [
        pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
        pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
        pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
    ],
)
def test_a_name_first_seen_by_an_evaluation_keeps_that_time_when_it_first_runs(using: str) -> None:
    memory = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}
    schedules = {"nightly": {"schedule": "1d"}}
    journal = {"using": using}
    with override_settings(TSLOCK_PROVIDERS=memory, TSLOCK_JOURNAL=journal, TSLOCK_SCHEDULES=schedules):
        assert [s.status for s in statuses(using, now=T0)] == ["new"]
        with lock("nightly", "1m", journal=True):
            pass
        [up] = statuses(using)
    row = Job.objects.using(using).get(name="nightly")
    assert from_db(row.first_seen_at) == T0 and row.runs_succeeded == 1
    assert up.status == "ok" and up.last_outcome == outcomes.SUCCEEDED


@override_settings(TIME_ZONE="Europe/Berlin")
def test_a_cron_job_done_at_the_first_of_two_repeated_times_is_not_late_in_the_second_pass() -> None:
    """2026-10-25 in Berlin: 02:00-03:00 happens twice and ``30 2 * * *`` is due once, at
    the first 02:30 (00:30 UTC). Evaluated in the second pass (02:15 CET, 01:15 UTC), the
    run of 02:32 CEST covers the day: it is up, next due the following night; and read
    from exactly 03:00 CEST on the spring-forward day, that is the day's due time."""
    nightly = parse_schedule("30 2 * * *", "10m")
    done = job(
        last_started_at=datetime(2026, 10, 25, 0, 32, tzinfo=timezone.utc),
        last_outcome=outcomes.SUCCEEDED,
        last_success_at=datetime(2026, 10, 25, 0, 32, tzinfo=timezone.utc),
    )
    up = status_of("j", done, nightly, datetime(2026, 10, 25, 1, 15, tzinfo=timezone.utc))
    assert (up.status, up.due_at) == ("ok", datetime(2026, 10, 26, 1, 30, tzinfo=timezone.utc)), up.reason
    spring = datetime(2026, 3, 29, 1, 0, tzinfo=timezone.utc)  # 03:00 CEST, the skipped 02:30's stand-in
    assert nightly.last_due(spring) == spring
