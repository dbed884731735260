"""Sentry Crons check-ins through the installed sentry-sdk: a process that initialises
the SDK with a DSN of a local ingest endpoint (tests/monitors/servers.py) runs a locked
command; the envelopes it receives hold ``in_progress`` then ``ok`` or ``error`` under
one ``check_in_id``, each with the ``monitor_config`` made from the job's schedule."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import override_settings

from tests.monitors.processes import migrated, outcomes, run_child
from tests.monitors.servers import SentryServer
from tslock_django.journal.schedules import parse_schedule
from tslock_django.monitors.sentry import monitor_config

if not os.environ.get("CI"):
    pytest.importorskip("sentry_sdk", reason="sentry-sdk is not installed (the test group installs it)")


def test_a_run_checks_in_in_progress_then_ok_under_one_id_with_its_monitor_config(tmp_path: Path) -> None:
    database = migrated(tmp_path)
    with SentryServer() as sentry:
        done = run_child(
            database, "journaled_job", "--shard", "crons", monitors={"sentry": {}}, sentry_dsn=sentry.dsn
        )
        check_ins = sentry.check_ins()
        paths = set(sentry.paths)
    assert done.returncode == 0, done.stderr
    assert paths == {"/api/1/envelope/"}
    started, ended = check_ins
    assert started["monitor_slug"] == ended["monitor_slug"] == "journaled-crons"
    assert (started["status"], ended["status"]) == ("in_progress", "ok")
    assert started["check_in_id"] == ended["check_in_id"] and len(started["check_in_id"]) == 32
    assert ended["duration"] is not None and 0 <= ended["duration"] < 60
    expected = {
        "schedule": {"type": "interval", "value": 1, "unit": "hour"},
        "timezone": "Europe/Paris",
        "checkin_margin": 5,
        "failure_issue_threshold": 1,
    }
    assert started["monitor_config"] == ended["monitor_config"] == expected
    assert outcomes(database, "journaled-crons") == ["succeeded"]


def test_a_failed_run_checks_in_error_and_exits_as_without_sentry(tmp_path: Path) -> None:
    database = migrated(tmp_path)
    schedules = {
        "journaled-nightly": {
            "schedule": "30 2 * * *",
            "tz": "America/New_York",
            "grace": "90s",
            "max_duration": "1h30m",
            "failures_before_alert": 3,
        }
    }
    with SentryServer() as sentry:
        done = run_child(
            database,
            "journaled_job",
            "--shard",
            "nightly",
            "--fail",
            "broke",
            monitors={"sentry": {}},
            schedules=schedules,
            sentry_dsn=sentry.dsn,
        )
        check_ins = sentry.check_ins()
    assert done.returncode == 1 and "broke" in done.stderr
    started, ended = check_ins
    assert (started["status"], ended["status"]) == ("in_progress", "error")
    assert started["check_in_id"] == ended["check_in_id"]
    assert ended["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "30 2 * * *"},
        "timezone": "America/New_York",
        "checkin_margin": 2,
        "max_runtime": 90,
        "failure_issue_threshold": 3,
    }
    assert outcomes(database, "journaled-nightly") == ["failed"]


def test_sentry_configured_but_not_initialised_sends_nothing_and_changes_nothing(tmp_path: Path) -> None:
    database = migrated(tmp_path)
    done = run_child(database, "journaled_job", "--shard", "uninit", monitors={"sentry": {}})
    assert done.returncode == 0 and done.stdout == "done\n"
    assert "tslock.W002" in done.stderr, "the system check says so at the command's start"
    assert outcomes(database, "journaled-uninit") == ["succeeded"]


@override_settings(TIME_ZONE="UTC")
@pytest.mark.parametrize(
    ("period", "interval"),
    [
        ("15m", {"type": "interval", "value": 15, "unit": "minute"}),
        ("2h", {"type": "interval", "value": 2, "unit": "hour"}),
        ("1d", {"type": "interval", "value": 1, "unit": "day"}),
        ("14d", {"type": "interval", "value": 2, "unit": "week"}),
        ("90m", {"type": "interval", "value": 90, "unit": "minute"}),
        ("90s", {"type": "interval", "value": 2, "unit": "minute"}),
    ],
)
def test_a_period_is_an_interval_in_the_longest_unit_that_divides_it(
    period: str, interval: dict[str, object]
) -> None:
    config = monitor_config(parse_schedule(period, "30s"), "UTC")
    assert config["schedule"] == interval
    assert config["checkin_margin"] == 1, "margins are whole minutes, at least one"
    assert "max_runtime" not in config


def test_a_cron_schedule_keeps_its_zone_or_takes_the_default_one() -> None:
    zoned = monitor_config(
        parse_schedule("0 3 * * 1", tz="Asia/Tokyo", max_duration=timedelta(seconds=61)), "UTC"
    )
    assert zoned["schedule"] == {"type": "crontab", "value": "0 3 * * 1"}
    assert zoned["timezone"] == "Asia/Tokyo" and zoned["max_runtime"] == 2
    assert monitor_config(parse_schedule("0 3 * * 1"), "Europe/Berlin")["timezone"] == "Europe/Berlin"
