"""The browser tests' fixtures: Debian's Chromium driven by Playwright, at a wide
window and at a common laptop's 1,366 by 768 pixels."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
