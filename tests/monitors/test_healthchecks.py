"""Healthchecks pings of every journaled run of a scheduled job, against a local server
that answers Healthchecks' Pinging API (tests/monitors/servers.py): start, then success
or fail under one run id, ``create=1`` until the check exists, the failure's detail as
the body, nothing for a skip or an unscheduled job; and a slow, failing or unreachable
monitor changes nothing about the job."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from io import StringIO

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings

from tests.monitors.servers import HealthchecksServer, Ping
from tests.test_decorator import BrokenStore  # noqa: F401  (the BACKEND below names it)
from tslock_django import LockConfiguration, alock, providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Run
from tslock_django.monitors.sender import sender

KEY = "hc-ping-key-0123456789"
PROVIDERS = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "broken": {"BACKEND": "tests.test_decorator.BrokenStore"},
}

pytestmark = pytest.mark.django_db(databases=["default"], transaction=True)


@pytest.fixture
def hc() -> Iterator[HealthchecksServer]:
    with HealthchecksServer(KEY) as server:
        with monitored(server.url):
            yield server
        assert sender().drain(10), "the pings of the test went out"


def monitored(url: str, **settings: object) -> override_settings:
    return override_settings(
        TSLOCK_PROVIDERS=PROVIDERS,
        TSLOCK_JOURNAL={"using": "default"},
        TSLOCK_MONITORS={"healthchecks": {"url": url, "ping_key": KEY}},
        **settings,
    )


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def pings(server: HealthchecksServer) -> list[Ping]:
    assert sender().drain(10), "every queued ping was sent"
    return list(server.pings)


def test_a_successful_run_pings_start_then_success_under_one_run_id(hc: HealthchecksServer) -> None:
    assert run("journaled_job", "--shard", "ok") == ("done\n", "")
    start, success = pings(hc)
    assert start.path == f"/ping/{KEY}/journaled-ok/start" and start.method == "POST"
    assert start.query == {"rid": start.query["rid"], "create": "1"} and start.status == 201
    assert success.path == f"/ping/{KEY}/journaled-ok" and success.status == 200
    assert success.query == {"rid": start.query["rid"]}, "the same run id, and the check exists now"
    assert start.body == success.body == ""


def test_each_run_has_its_own_run_id(hc: HealthchecksServer) -> None:
    run("journaled_job", "--shard", "twice")
    run("journaled_job", "--shard", "twice")
    first_start, first_end, second_start, second_end = pings(hc)
    assert first_start.query["rid"] == first_end.query["rid"]
    assert second_start.query["rid"] == second_end.query["rid"] != first_start.query["rid"]
    assert "create" not in second_start.query


def test_a_failed_run_pings_fail_with_its_scrubbed_detail_and_still_fails(hc: HealthchecksServer) -> None:
    with pytest.raises(CommandError, match="report broke"):
        run("journaled_job", "--shard", "bad", "--fail", f"report broke; password=hunter2-x9 key {KEY}")
    start, fail = pings(hc)
    assert fail.path == f"/ping/{KEY}/journaled-bad/fail" and fail.query["rid"] == start.query["rid"]
    assert fail.body.startswith("CommandError: report broke; password=***")
    assert "hunter2" not in fail.body and KEY not in fail.body
    [row] = Run.objects.filter(name="journaled-bad")
    assert row.outcome == outcomes.FAILED


def test_an_exit_status_other_than_zero_is_a_failure(hc: HealthchecksServer) -> None:
    with pytest.raises(SystemExit):
        run("journaled_job", "--shard", "ex", "--exit", "3")
    assert [(ping.kind, ping.body) for ping in pings(hc)] == [("start", ""), ("fail", "SystemExit: 3")]


def test_a_store_error_pings_fail_alone(hc: HealthchecksServer) -> None:
    with pytest.raises(CommandError, match="failing closed"):
        run("journaled_job", "--shard", "err", "--lock-provider", "broken")
    [fail] = pings(hc)
    assert fail.kind == "fail" and fail.query["create"] == "1" and "connection refused" in fail.body


def test_a_skip_sends_nothing(hc: HealthchecksServer) -> None:
    holder = providers["default"].lock(LockConfiguration("journaled-held", "1m"))
    assert holder is not None
    out, err = run("journaled_job", "--shard", "held")
    assert out == "" and err.startswith("skipped: ")
    assert pings(hc) == []


def test_a_job_without_a_schedule_is_not_pinged_until_tslock_schedules_names_it(
    hc: HealthchecksServer,
) -> None:
    run("locked_job", "--shard", "plain")
    assert pings(hc) == []
    with override_settings(TSLOCK_SCHEDULES={"job-plain": {"schedule": "0 3 * * *"}}):
        run("locked_job", "--shard", "plain")
    assert [ping.path for ping in pings(hc)] == [f"/ping/{KEY}/job-plain/start", f"/ping/{KEY}/job-plain"]


def test_a_name_that_is_not_a_slug_is_pinged_as_its_slug(hc: HealthchecksServer) -> None:
    run("journaled_job", "--shard", "Daily Report.v2")
    assert [ping.slug for ping in pings(hc)] == ["journaled-daily-report-v2"] * 2


def test_without_tslock_monitors_nothing_is_sent(hc: HealthchecksServer) -> None:
    with override_settings(TSLOCK_MONITORS=None):
        run("journaled_job", "--shard", "quiet")
    assert pings(hc) == []


def test_a_slow_monitor_does_not_hold_the_job() -> None:
    """A monitor that answers after 5 s: the job's call takes at most 0.2 s more than the
    same call against a monitor that answers at once (the pings are queued, not awaited)."""
    with HealthchecksServer(KEY) as fast, monitored(fast.url):
        own = []
        for shard in ("warm", "a", "b", "c"):
            started = time.perf_counter()
            run("journaled_job", "--shard", f"fast-{shard}")
            own.append(time.perf_counter() - started)
        assert sender().drain(10)
    with HealthchecksServer(KEY, delay=5.0) as slow, monitored(slow.url):
        started = time.perf_counter()
        out, _ = run("journaled_job", "--shard", "slow")
        elapsed = time.perf_counter() - started
        assert out == "done\n"
        assert elapsed < max(own[1:]) + 0.2, (elapsed, own)
        slow.release()  # the test is over: let the held answers go
        assert sender().drain(10)
        assert [ping.kind for ping in slow.pings] == ["start", "success"]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_monitor_changes_nothing_and_is_logged_once_without_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tslock_django")
    with monitored(f"http://127.0.0.1:{closed_port()}"):
        assert run("journaled_job", "--shard", "down") == ("done\n", "")
        with pytest.raises(CommandError, match="still fails"):
            run("journaled_job", "--shard", "down", "--fail", "still fails")
        assert sender().drain(10)
    assert [row.outcome for row in Run.objects.filter(name="journaled-down").order_by("id")] == [
        outcomes.SUCCEEDED,
        outcomes.FAILED,
    ]
    told = [record.getMessage() for record in caplog.records if "healthchecks" in record.getMessage()]
    assert len(told) == 1, "logged once until a ping gets through"
    assert "did not get through" in told[0] and "journaled-down" in told[0] and KEY not in told[0]


def test_a_monitor_answering_an_error_is_logged_with_its_status_not_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tslock_django")
    with HealthchecksServer(KEY, status=500) as broken, monitored(broken.url):
        assert run("journaled_job", "--shard", "five") == ("done\n", "")
        assert sender().drain(10)
    told = [record.getMessage() for record in caplog.records if "healthchecks" in record.getMessage()]
    assert len(told) == 1 and "HTTP 500" in told[0] and KEY not in told[0]
    # Once a ping gets through again, the next failure is logged again.
    with HealthchecksServer(KEY) as working, monitored(working.url):
        run("journaled_job", "--shard", "five")
        assert sender().drain(10)
    with HealthchecksServer(KEY, status=503) as broken, monitored(broken.url):
        run("journaled_job", "--shard", "five")
        assert sender().drain(10)
    told = [record.getMessage() for record in caplog.records if "healthchecks" in record.getMessage()]
    assert len(told) == 2 and "HTTP 503" in told[1]


def test_async_runs_are_pinged_like_sync_ones(hc: HealthchecksServer) -> None:
    async def main() -> None:
        try:
            async with alock("async-scheduled", "1m", journal=True):
                pass
            with pytest.raises(ValueError):
                async with alock("async-scheduled", "1m", journal=True):
                    raise ValueError("async job broke")
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    with override_settings(TSLOCK_SCHEDULES={"async-scheduled": {"schedule": "15m"}}):
        asyncio.run(main())
    found = pings(hc)
    assert [ping.kind for ping in found] == ["start", "success", "start", "fail"]
    assert found[3].body == "ValueError: async job broke"
