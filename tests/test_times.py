"""One rule for times shown to people: ISO 8601 to the second, with the offset, in the
current Django time zone. The skip line of a locked command follows it."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone as django_timezone

from tslock_django import providers
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.times import format_time

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}
NOON_UTC = datetime(2026, 11, 30, 12, 0, 5, 987654, tzinfo=timezone.utc)


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_an_aware_time_is_shown_in_the_current_zone_with_its_offset() -> None:
    assert format_time(NOON_UTC) == "2026-11-30T17:30:05+05:30"


def test_an_activated_zone_wins_over_the_setting() -> None:
    with django_timezone.override("America/New_York"):
        assert format_time(NOON_UTC) == "2026-11-30T07:00:05-05:00"


def test_a_naive_time_is_shown_as_it_is() -> None:
    assert format_time(datetime(2026, 11, 30, 12, 0, 5, 1)) == "2026-11-30T12:00:05"


@override_settings(TIME_ZONE="Asia/Kolkata", TSLOCK_PROVIDERS=MEMORY)
def test_the_skip_line_shows_the_holders_time_by_the_rule() -> None:
    held = providers.get("default").lock(LockConfiguration("job-z", timedelta(minutes=5)))
    assert held is not None
    try:
        err = io.StringIO()
        call_command("locked_job", "--shard", "z", stdout=io.StringIO(), stderr=err)
    finally:
        held.unlock()
    until = format_time(held.record.lock_until)
    assert until.endswith("+05:30")
    assert err.getvalue().strip().endswith(f"until {until}; locked_job did not run")
