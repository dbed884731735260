"""End to end in a real headless Chromium: log in, see three providers' locks in one
table, force-release one through the confirmation page, find it released and in the
history; and page through a merged listing with next and previous.

Needs Playwright for Python (the ``test`` dependency group) and Debian's Chromium at
``/usr/bin/chromium`` (or ``TSLOCK_CHROMIUM``); Playwright's own browser download is not
used. Skipped with a reason when either is missing, except under CI, where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from tests.admin.tslock_test_providers import MEMORY, FencelessMemoryProvider, StaticProvider, path_of
from tslock_django import LockConfiguration
from tslock_django.conf import DATABASE_BACKEND, providers
from tslock_django.core.records import LockRecord

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = os.environ.get("TSLOCK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def missing_browser() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright)"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set TSLOCK_CHROMIUM)"
    return ""


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    reason = missing_browser()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test must run under CI: {reason}")
        pytest.skip(reason)
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test
    # itself makes are still synchronous, so Django's async-safety check must stand aside.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Any:
    return browser.new_context(viewport={"width": 1600, "height": 800}).new_page()


@pytest.fixture
def laptop_page(browser: Any) -> Any:
    """A common laptop screen: 1,366 by 768 pixels."""
    return browser.new_context(viewport={"width": 1366, "height": 768}).new_page()


def test_release_a_lock_in_the_browser(
    page: Any, live_server: Any, settings: Any, django_user_model: Any
) -> None:
    settings.TSLOCK_PROVIDERS = {
        "default": {"BACKEND": DATABASE_BACKEND},
        "mem": MEMORY,
        "kv": {"BACKEND": path_of(FencelessMemoryProvider)},  # an advisory store without fencing tokens
    }
    db_lock = providers["default"].lock(LockConfiguration("db-nightly-report", "30m"))
    mem_lock = providers["mem"].lock(LockConfiguration("mem-invoices", "10m"))
    assert db_lock is not None and mem_lock is not None
    assert providers["mem"].lock(LockConfiguration("mem-cleanup", "2m")) is not None
    assert providers["kv"].lock(LockConfiguration("kv-sync", "5m")) is not None

    operator = django_user_model.objects.create_user("operator", password="pw-for-tests", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="tslock_django", codename__in=["view_lock", "release_lock"]
        )
    )

    page.goto(f"{live_server.url}/admin/login/?next=/admin/tslock_django/lock/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")

    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 4
    # One table across the stores, by name.
    assert [row.get_attribute("data-name") for row in rows.all()] == [
        "db-nightly-report",
        "kv-sync",
        "mem-cleanup",
        "mem-invoices",
    ]
    assert page.locator('tr[data-provider="default"][data-name="db-nightly-report"]').count() == 1
    assert page.locator('tr[data-provider="mem"][data-name="mem-invoices"]').count() == 1
    assert db_lock.token not in page.content() and mem_lock.token not in page.content()
    assert page.locator('tr[data-name="kv-sync"] .tslock-advisory').is_visible()

    page.check('tr[data-name="mem-invoices"] input[name="lock"]')
    page.click("#release-selected")
    page.wait_for_selector("#release-list")
    assert page.locator("#release-list tbody tr").count() == 1
    assert "mem-invoices" in page.inner_text("#release-list")
    assert "fencing token 1" in page.inner_text("#release-list")

    page.click("#confirm-release")
    page.wait_for_selector("#result_list")
    assert "Force-released lock 'mem-invoices'" in page.inner_text("ul.messagelist")
    # Current locks are shown by default; the released one is among the expired ones.
    assert page.locator('tr[data-name="mem-invoices"]').count() == 0
    page.click('#changelist-filter a:text("All, expired too")')
    page.wait_for_selector('tr[data-name="mem-invoices"]')
    released_row = page.locator('tr[data-name="mem-invoices"]')
    assert released_row.locator("td.tslock-state-expired").count() == 1
    assert page.locator('tr[data-name="db-nightly-report"] td.tslock-state-held').count() == 1
    assert page.locator('tr[data-name="mem-cleanup"] td.tslock-state-held').count() == 1
    assert released_row.locator(".tslock-bar.overdue").count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "locks-page.png"), full_page=True)

    page.click("text=Release history")
    page.wait_for_selector("#history-list")
    history = page.inner_text("#history-list")
    assert "mem:mem-invoices" in history and "operator" in history


def test_page_through_three_stores_in_the_browser(
    page: Any, live_server: Any, settings: Any, admin_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import LockAdmin

    monkeypatch.setattr(LockAdmin, "list_per_page", 4)
    settings.TSLOCK_PROVIDERS = {
        "one": MEMORY,
        "two": MEMORY,
        "kv": {"BACKEND": path_of(FencelessMemoryProvider)},
    }
    for i in range(11):
        alias = ("one", "two", "kv")[i % 3]
        assert providers[alias].lock(LockConfiguration(f"job-{i:02d}", f"{10 + i}m")) is not None

    page.goto(f"{live_server.url}/admin/login/?next=/admin/tslock_django/lock/%3Fo%3D-lock_until")
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")

    def shown() -> list[str]:
        return [row.get_attribute("data-name") or "" for row in page.locator("#result_list tbody tr").all()]

    # Longest deadline first: job-10 (20 minutes) down to job-00 (10 minutes).
    pages = [shown()]
    assert page.locator("#previous-page").count() == 0
    while page.locator("#next-page").count():
        page.click("#next-page")
        page.wait_for_selector("#result_list")
        pages.append(shown())
    assert pages == [
        ["job-10", "job-09", "job-08", "job-07"],
        ["job-06", "job-05", "job-04", "job-03"],
        ["job-02", "job-01", "job-00"],
    ]
    assert "11 locks" in page.inner_text("#lock-pages")
    for expected in reversed(pages[:-1]):
        page.click("#previous-page")
        page.wait_for_selector("#result_list")
        assert shown() == expected
    assert page.locator("#previous-page").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "locks-page-paging.png"), full_page=True)


def test_the_table_fits_a_1366_pixel_window(
    laptop_page: Any, live_server: Any, settings: Any, admin_user: Any
) -> None:
    """Long names, long holders and the largest fencing tokens still leave the table's
    right edge inside the window, as Django's own change lists do (long cells wrap)."""
    now = datetime.now(timezone.utc)
    largest = 2**63 - 1

    def record(name: str, fencing_token: int, locked_by: str) -> LockRecord:
        return LockRecord(
            name=name,
            lock_until=now + timedelta(hours=2),
            locked_at=now - timedelta(minutes=3),
            locked_by=locked_by,
            token="",
            fencing_token=fencing_token,
            token_fingerprint="9f86d081",
        )

    records = [
        record(
            "reports.monthly-invoices.customer-4242.region-eu-west-1.batch-0007.retry-3",
            largest,
            "worker-pod-7f9c8d6b5-abcde.jobs.svc.cluster.local:123456",
        ),
        record("x" * 160, largest - 1, "host-" + "y" * 100 + ":1"),
        record("short", 12_345_678_901_234_567, "web-1:42"),
    ]
    settings.TSLOCK_PROVIDERS = {
        "a-provider-alias-of-some-length": {
            "BACKEND": path_of(StaticProvider),
            "OPTIONS": {"records": records},
        }
    }
    page = laptop_page
    page.goto(f"{live_server.url}/admin/login/?next=/admin/tslock_django/lock/")
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3
    assert str(largest) in page.inner_text("#result_list")

    viewport = page.viewport_size["width"]
    table = page.locator("#result_list").bounding_box()
    assert table is not None
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "locks-page-1366.png"), full_page=True)
    assert table["x"] + table["width"] <= viewport, f"the table ends at {table['x'] + table['width']} px"
    for header in page.locator("#result_list thead th").all():
        box = header.bounding_box()
        assert box is not None and box["x"] + box["width"] <= viewport, header.inner_text()
    # Nothing else on the page makes it scroll sideways either.
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport
    # Times are shown short; the full time with its UTC offset is in the tooltip.
    shown = page.locator('tr[data-name="short"] time').first
    full = datetime.fromisoformat(shown.get_attribute("title"))
    assert full.utcoffset() is not None
    assert full == datetime.fromisoformat(shown.get_attribute("datetime")).replace(microsecond=0)
    assert shown.inner_text().strip() == full.strftime("%Y-%m-%d %H:%M:%S")
