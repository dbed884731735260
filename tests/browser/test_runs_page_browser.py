"""The Runs page in a real headless Chromium: see each name's status, filter by status
and by outcome, open a name's history, go from there to the name's lock on the Locks
page and back to its runs; and the pages fit a 1,366 px window with long strings.

Fixtures (Chromium through Playwright, skipped without them except under CI) are in
this folder's conftest.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from tests.admin.journal_rows import job, run
from tests.admin.tslock_test_providers import MEMORY
from tslock_django import LockConfiguration
from tslock_django.conf import providers
from tslock_django.journal import outcomes

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
H = timedelta(hours=1)
M = timedelta(minutes=1)


@pytest.fixture
def journal(settings: Any) -> None:
    settings.TSLOCK_JOURNAL = {"using": "default"}
    settings.TSLOCK_SCHEDULES = None
    settings.TSLOCK_PROVIDERS = {"default": MEMORY}


def log_in(page: Any, live_server: Any, user: Any, path: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={path}")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")


def shown(page: Any) -> list[str]:
    return [
        row.get_attribute("data-name") or "" for row in page.locator("#result_list tbody tr[data-name]").all()
    ]


def follow(page: Any, selector: str) -> None:
    """Click a link and wait for the page it leads to."""
    with page.expect_navigation():
        page.click(selector)


def test_filter_open_a_history_and_go_to_the_lock_and_back(
    page: Any, live_server: Any, admin_user: Any, journal: None
) -> None:
    # Two real runs of the test command (one fails), and two names written as the
    # journal would have them hours ago: one late, one on time.
    call_command("locked_job", shard="ok")
    with pytest.raises(RuntimeError):
        call_command("locked_job", shard="bad", explode=True)
    job("nightly-report", schedule="1h", grace=600, outcome=outcomes.SUCCEEDED, started=3 * H, success=3 * H)
    run("nightly-report", started=3 * H, host="web-1", pid=4242, fencing_token=7)
    job("sync-users", schedule="1h", outcome=outcomes.SUCCEEDED, started=5 * M, success=5 * M)
    assert providers["default"].lock(LockConfiguration("job-bad", "10m")) is not None

    log_in(page, live_server, admin_user, "/admin/tslock_django/job/")
    page.wait_for_selector("#result_list")
    assert shown(page) == ["job-bad", "job-ok", "nightly-report", "sync-users"]
    late = page.locator('tr[data-name="nightly-report"]')
    assert late.locator(".tslock-badge.status-late").inner_text() == "late"
    assert "not done within grace 10m" in late.inner_text()
    assert page.locator('tr[data-name="job-bad"] .tslock-badge.outcome-failed').is_visible()
    assert page.locator('tr[data-name="job-ok"] .tslock-badge.status-none').inner_text() == "—"

    follow(page, '#changelist-filter details[data-filter-title="status"] a:text-is("late")')
    page.wait_for_selector("#result_list")
    assert shown(page) == ["nightly-report"]
    follow(page, '#changelist-filter details[data-filter-title="status"] a:text-is("All")')
    follow(page, '#changelist-filter details[data-filter-title="last outcome"] a:text-is("failed")')
    page.wait_for_selector("#result_list")
    assert shown(page) == ["job-bad"]
    page.fill("#searchbar", "nightly")
    with page.expect_navigation():
        page.press("#searchbar", "Enter")
    page.wait_for_selector("#result_list")
    assert shown(page) == []  # the search keeps the outcome filter
    follow(page, '#changelist-filter details[data-filter-title="last outcome"] a:text-is("All")')
    page.wait_for_selector("#result_list")
    assert shown(page) == ["nightly-report"]
    ARTIFACTS.mkdir(exist_ok=True)

    # A history: its runs newest first, with where and how each ran.
    follow(page, 'tr[data-name="nightly-report"] a.tslock-history-link')
    page.wait_for_selector("#job-summary")
    assert page.locator("#result_list tbody tr").count() == 1
    row_text = page.inner_text("#result_list tbody tr")
    assert "web-1" in row_text and "4242" in row_text and "7" in row_text
    follow(page, '.breadcrumbs a:text-is("Runs")')
    page.wait_for_selector("#result_list")

    # job-bad's history, then its lock on the Locks page, then back to its runs.
    follow(page, 'tr[data-name="job-bad"] a.tslock-history-link')
    page.wait_for_selector("#job-summary")
    assert "RuntimeError: the job failed" in page.inner_text("#result_list")
    page.screenshot(path=str(ARTIFACTS / "run-history.png"), full_page=True)
    follow(page, "#lock-of-name")
    page.wait_for_selector('#result_list tr[data-name="job-bad"]')
    follow(page, 'tr[data-name="job-bad"] a.tslock-runs-link')
    page.wait_for_selector("#job-summary")
    assert "Runs of job-bad" in page.title()
    follow(page, '.breadcrumbs a:text-is("Runs")')
    page.wait_for_selector("#result_list")
    assert shown(page) == ["job-bad", "job-ok", "nightly-report", "sync-users"]
    page.screenshot(path=str(ARTIFACTS / "runs-page.png"), full_page=True)


def test_the_runs_pages_fit_a_1366_pixel_window(
    laptop_page: Any, live_server: Any, admin_user: Any, journal: None
) -> None:
    long_name = "reports.monthly-invoices.customer-4242.region-eu-west-1.batch-0007.retry-3"
    detail = "RuntimeError: " + "the upstream answered 503 " * 38
    job(
        long_name,
        schedule="0 3 * * *",
        outcome=outcomes.FAILED,
        started=M,
        success=26 * H,
        detail=detail,
        provider="a-provider-alias-of-some-length",
    )
    job("x" * 200, schedule="15m", outcome=outcomes.SUCCEEDED, started=M, success=M)
    run(
        long_name,
        outcome=outcomes.FAILED,
        started=M,
        host="worker-pod-7f9c8d6b5-abcde.jobs.svc.cluster.local",
        pid=4_194_304,
        locked_by="worker-pod-7f9c8d6b5-abcde.jobs.svc.cluster.local:4194304",
        fencing_token=2**63 - 1,
        detail=detail,
    )
    page = laptop_page
    viewport = page.viewport_size["width"]
    log_in(page, live_server, admin_user, "/admin/tslock_django/job/")
    page.wait_for_selector("#result_list")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs-page-1366.png"), full_page=True)
    assert page.locator("#result_list tbody tr").count() == 2
    for where in ("runs page", "history"):
        table = page.locator("#result_list").bounding_box()
        assert table is not None
        assert table["x"] + table["width"] <= viewport, (
            f"{where}: the table ends at {table['x'] + table['width']}"
        )
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport, where
        if where == "runs page":
            follow(page, f'tr[data-name="{long_name}"] a.tslock-history-link')
            page.wait_for_selector("#job-summary")
            page.screenshot(path=str(ARTIFACTS / "run-history-1366.png"), full_page=True)
    assert str(2**63 - 1) in page.inner_text("#result_list")


def test_pause_and_resume_a_job_from_the_runs_page(
    page: Any, live_server: Any, admin_user: Any, journal: None
) -> None:
    job("sync-users", schedule="1h", outcome=outcomes.SUCCEEDED, started=5 * M, success=5 * M)
    log_in(page, live_server, admin_user, "/admin/tslock_django/job/")
    page.wait_for_selector("#result_list")
    row = page.locator('tr[data-name="sync-users"]')
    assert not row.locator(".tslock-paused").count()
    follow(page, 'tr[data-name="sync-users"] button.tslock-pause')
    page.wait_for_selector("#result_list")
    assert "Paused sync-users at " in page.inner_text(".messagelist")
    assert row.locator(".tslock-badge.tslock-paused").inner_text() == "paused"
    follow(page, 'tr[data-name="sync-users"] button.tslock-resume')
    page.wait_for_selector("#result_list")
    assert "Resumed sync-users" in page.inner_text(".messagelist")
    assert not row.locator(".tslock-paused").count()
