"""The late or failing names as the database finds them (``journal.alerting``), which
the metrics and the health check read: the same names as the journal's status rule
(``tslock overdue``), found without reading every row."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.db.models.signals import post_init
from django.test.utils import override_settings

from tests.admin.journal_rows import NOW, job
from tslock_django.journal import outcomes
from tslock_django.journal.alerting import alerting, summary
from tslock_django.journal.models import Job
from tslock_django.journal.status import ALERTING, statuses

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)
#: Half past an hour, an hour or so after the rows' NOW: far from any hourly due time.
AT = (NOW + H).replace(minute=30, second=0, microsecond=0)


def before(moment: datetime) -> timedelta:
    """How long before the rows' NOW ``moment`` is (``job()`` takes times as "ago")."""
    return NOW - moment


@pytest.fixture(autouse=True)
def journal_on() -> Iterator[None]:
    with override_settings(TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=None):
        yield


def every_kind_of_row() -> None:
    on_time = before(AT - 10 * M)
    long_ago = before(AT - 5 * H)
    job("period-up", schedule="1h", outcome=outcomes.SUCCEEDED, started=on_time, success=on_time)
    job(
        "period-late", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=long_ago, success=long_ago
    )
    job("period-failed", schedule="1h", outcome=outcomes.FAILED, started=on_time, success=on_time)
    job(
        "cron-up",
        schedule="0 * * * *",
        grace=300,
        outcome=outcomes.SUCCEEDED,
        started=on_time,
        success=on_time,
    )
    job(
        "cron-late",
        schedule="0 * * * *",
        grace=300,
        outcome=outcomes.SUCCEEDED,
        started=long_ago,
        success=long_ago,
    )
    job(
        "running-lost",
        schedule="1d",
        outcome=outcomes.RUNNING,
        started=on_time,
        success=on_time,
        deadline=-(AT - NOW) - M,  # its deadline passed before AT
    )
    job(
        "running-fine",
        schedule="1d",
        outcome=outcomes.RUNNING,
        started=on_time,
        success=on_time,
        deadline=2 * H,
    )
    job("never-ran", schedule="1h", first_seen=before(AT - 3 * H))
    job(
        "never-succeeded",
        schedule="1h",
        outcome=outcomes.SKIPPED,
        started=on_time,
        first_seen=before(AT - 3 * H),
    )
    job("unscheduled-failed", outcome=outcomes.FAILED, started=on_time)
    job("bad-schedule", schedule="every tuesday", outcome=outcomes.FAILED, started=on_time)
    job("settings-say-daily", schedule="1h", outcome=outcomes.SUCCEEDED, started=long_ago, success=long_ago)
    job("settings-say-hourly", schedule="1d", outcome=outcomes.SUCCEEDED, started=long_ago, success=long_ago)


SETTINGS = {"settings-say-daily": {"schedule": "1d"}, "settings-say-hourly": {"schedule": "1h"}}


@override_settings(TSLOCK_SCHEDULES=SETTINGS)
def test_the_database_finds_the_names_the_status_rule_alerts_on() -> None:
    every_kind_of_row()
    by_rule = sorted(s.name for s in statuses("default", now=AT) if s.status in ALERTING)
    found = alerting("default", AT, limit=100)
    assert sorted(s.name for _, s in found.found) == by_rule
    assert found.count == len(by_rule)
    # The rule's own verdicts, pinned, so that both cannot be wrong together.
    assert {"period-late", "period-failed", "cron-late", "running-lost", "settings-say-hourly"} <= set(
        by_rule
    )
    assert not {"period-up", "cron-up", "running-fine", "settings-say-daily", "unscheduled-failed"} & set(
        by_rule
    )


def test_names_are_read_only_when_their_group_may_alert() -> None:
    for i in range(40):
        job(f"sync-{i:02}", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    job("zz-late", schedule="2h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    loaded: list[str] = []

    def count(sender: Any, instance: Job, **kwargs: Any) -> None:
        loaded.append(instance.name)

    now = datetime.now(timezone.utc)
    post_init.connect(count, sender=Job)
    try:
        found = alerting("default", now, limit=5)
    finally:
        post_init.disconnect(count, sender=Job)
    assert [s.name for _, s in found.found] == ["zz-late"]
    assert loaded == ["zz-late"]  # the 40 hourly names on time are not read


def test_candidates_past_the_evaluated_ones_are_counted() -> None:
    for i in range(7):
        job(f"broken-{i}", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H)
    found = alerting("default", datetime.now(timezone.utc), limit=2, evaluate=3)
    assert found.count == 7
    assert [s.name for _, s in found.found] == ["broken-0", "broken-1"]


def test_the_summary_counts_every_name_and_run_in_one_query(django_assert_num_queries: Any) -> None:
    job("a", schedule="1h", outcome=outcomes.FAILED, started=M, runs_failed=3, runs_succeeded=2)
    job("b", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, runs_succeeded=5)
    job("c", outcome=outcomes.SUCCEEDED, started=M, runs_skipped=4)
    with django_assert_num_queries(1):
        whole = summary("default", datetime.now(timezone.utc))
    assert whole.names == 3
    assert whole.runs == {
        "runs_succeeded": 7,
        "runs_failed": 3,
        "runs_lost": 0,
        "runs_skipped": 4,
        "runs_error": 0,
    }
    hourly = next(g for g in whole.groups if g.schedule == "1h")
    assert (hourly.names, hourly.failing) == (2, 1)


@override_settings(TSLOCK_SCHEDULES={**SETTINGS, "configured-unseen": {"schedule": "1h"}})
def test_overdue_lists_the_names_the_status_rule_does_not_call_ok_without_reading_every_row() -> None:
    from tslock_django.journal.alerting import not_ok

    every_kind_of_row()
    job("paused-failed", schedule="1h", outcome=outcomes.FAILED, started=before(AT - 10 * M))
    job("long-running", schedule="1d", outcome=outcomes.RUNNING, started=before(AT - 3 * H), deadline=2 * H)
    Job.objects.filter(name="paused-failed").update(paused_at=NOW)
    Job.objects.filter(name="long-running").update(max_duration=3600.0)
    by_rule = [(s.name, s.status) for s in statuses("default", now=AT, record=False) if s.status != "ok"]
    listing = not_ok("default", AT, record=False)
    assert [(s.name, s.status) for s in listing.found] == by_rule and listing.unlisted == 0
    shown = dict(by_rule)
    assert shown["paused-failed"] == "paused" and shown["long-running"] == "running_long"
    assert shown["configured-unseen"] == "new" and shown["never-ran"] == "late"
    for i in range(3):
        job(f"zz-broken-{i}", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H)
    capped = not_ok("default", AT, record=False, limit=2)
    alerting_now = [s for s in statuses("default", now=AT, record=False) if s.status in ALERTING]
    listed = [s for s in capped.found if s.status in ALERTING]
    assert 2 <= len(listed) < len(alerting_now), "two judged (and never-run names, read apart)"
    # Candidates past the judged ones count as alerting, as in alerting(): an upper bound.
    assert capped.unlisted >= len(alerting_now) - len(listed) > 0
