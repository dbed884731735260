"""Durations shown to people: one form in the admin, the command line and messages."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command, load_command_class

from tests.admin.tslock_test_providers import MEMORY
from tslock_django import LockConfiguration, providers
from tslock_django.admin import rows
from tslock_django.core import human
from tslock_django.core.durations import parse_duration
from tslock_django.core.human import format_duration, format_remaining


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (7199, "1h 59m"),
        (252, "4m 12s"),
        (59, "59s"),
        (90061, "1d 1h"),
        (0, "overdue 0s"),
        (-3, "overdue 3s"),
        (-7200, "overdue 2h"),
    ],
)
def test_remaining_time_reads_in_the_two_largest_units(seconds: int, shown: str) -> None:
    assert format_remaining(timedelta(seconds=seconds)) == shown


def test_unknown_remaining_time_is_a_dash() -> None:
    assert format_remaining(None) == "-"


def test_the_admin_and_the_command_line_share_one_formatter() -> None:
    assert rows.format_remaining is human.format_remaining


@pytest.mark.parametrize(
    ("duration", "shown"),
    [
        (timedelta(days=30), "30d"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(hours=2), "2h"),
        (timedelta(0), "0s"),
        (timedelta(milliseconds=500), "0.5s"),
        (timedelta(minutes=2, microseconds=1), "2m0.000001s"),
        (timedelta(days=1, seconds=1), "1d1s"),
    ],
)
def test_a_duration_is_written_exactly_and_reads_back(duration: timedelta, shown: str) -> None:
    assert format_duration(duration) == shown
    assert parse_duration(shown) == duration


def test_tslock_list_shows_remaining_time_as_the_admin_does(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY}
    assert providers["a"].lock(LockConfiguration("nightly", "2h")) is not None
    out = io.StringIO()
    call_command("tslock", "list", stdout=out)
    header, row = out.getvalue().splitlines()
    start = header.index("REMAINING")
    # Seconds pass between taking the lock and listing it: 2h less a little.
    assert row[start:].split("  ")[0] == "1h 59m", out.getvalue()


def test_lock_wait_help_states_the_limit_as_a_duration() -> None:
    parser = load_command_class("tests.lockapp", "locked_job").create_parser("manage.py", "locked_job")
    assert "(at most 1h)" in " ".join(parser.format_help().split())
