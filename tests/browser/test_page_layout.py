"""The Locks, Runs and history pages are laid out as Django's own admin pages on the same
site, whatever the Django version: measured in a real headless Chromium against the auth
app's change lists and change form, which Django draws with its own markup.

What is compared: the breadcrumbs (their element, their computed style, where they sit),
the table's width within the change list, and the filter panel beside the table (not
under it). A screenshot of each page goes to ``artifacts/layout-<django version>-*.png``.
Run it on the oldest and the newest Django the app supports (``make matrix`` venvs, or a
venv of each).

Fixtures (Chromium through Playwright, skipped without them except under CI) are in this
folder's conftest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import django
import pytest
from django.contrib.auth.models import Group

from tests.admin.journal_rows import job, run
from tests.admin.tslock_test_providers import MEMORY
from tslock_django import LockConfiguration
from tslock_django.conf import providers
from tslock_django.journal import outcomes

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
#: Pixels two boxes may differ by: sub-pixel rounding, a scroll bar.
SLACK = 2

#: Measured in the page: the breadcrumbs and the boxes of the change list's parts, in
#: page coordinates.
MEASURE = """() => {
  const box = (selector) => {
    const element = document.querySelector(selector);
    if (!element) return null;
    const r = element.getBoundingClientRect();
    return {x: r.x, y: r.y + window.scrollY, width: r.width, height: r.height};
  };
  const crumbs = document.querySelector(".breadcrumbs");
  const style = crumbs ? getComputedStyle(crumbs) : null;
  const link = crumbs ? crumbs.querySelector("a") : null;
  return {
    crumbs: crumbs && {
      tag: crumbs.tagName,
      parent: crumbs.parentElement.tagName,
      box: box(".breadcrumbs"),
      style: Object.fromEntries(
        ["display", "padding", "margin", "background-color", "color", "font-size",
         "line-height", "list-style-type"].map((name) => [name, style.getPropertyValue(name)])
      ),
      link: link && {color: getComputedStyle(link).color, display: getComputedStyle(link).display},
      // The current page's crumb: the last item of a list, or the text after the last
      // separator of a line of links.
      last: (crumbs.querySelector("li:last-child") || crumbs).innerText.split("\\u203a").pop().trim(),
    },
    content: box("#content"),
    changelist: box("#changelist"),
    table: box("#changelist table"),
    filter: box("#changelist-filter"),
    pages: box("#changelist .paginator"),
    scrollWidth: document.documentElement.scrollWidth,
  };
}"""


@pytest.fixture
def site(settings: Any) -> None:
    """A store with two locks and a journal with two names, one of them run twice."""
    settings.TSLOCK_JOURNAL = {"using": "default"}
    settings.TSLOCK_SCHEDULES = None
    settings.TSLOCK_PROVIDERS = {"default": MEMORY}
    assert providers["default"].lock(LockConfiguration("nightly-report", "30m")) is not None
    assert providers["default"].lock(LockConfiguration("sync-users", "5m")) is not None
    job("nightly-report", schedule="1h", outcome=outcomes.SUCCEEDED)
    run("nightly-report", host="web-1", pid=4242, fencing_token=7)
    run("nightly-report", outcome=outcomes.FAILED, host="web-2", pid=99, detail="RuntimeError: boom")
    job("sync-users", outcome=outcomes.SUCCEEDED)
    Group.objects.create(name="operators")


def measure(page: Any, live_server: Any, path: str, shot: str) -> dict[str, Any]:
    page.goto(f"{live_server.url}{path}")
    page.wait_for_selector("#content")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"layout-{django.get_version()}-{shot}.png"), full_page=True)
    measured: dict[str, Any] = page.evaluate(MEASURE)
    return measured


def log_in(page: Any, live_server: Any, user: Any) -> None:
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "password")
    with page.expect_navigation():
        page.click("input[type=submit]")


def crumb_link(page: Any, text: str) -> str:
    """Where the breadcrumb ``text`` leads."""
    href: str = page.locator(".breadcrumbs").get_by_role("link", name=text, exact=True).get_attribute("href")
    return href


def assert_same_breadcrumbs(ours: dict[str, Any], django_s: dict[str, Any], where: str) -> None:
    """Django's element, drawn by Django's style, where Django puts it."""
    assert ours["crumbs"] is not None, f"{where}: no breadcrumbs"
    for key in ("tag", "parent", "style", "link"):
        mine, django_own = ours["crumbs"][key], django_s["crumbs"][key]
        assert mine == django_own, f"{where}: the breadcrumbs' {key} is {mine!r}, Django's own {django_own!r}"
    for key in ("x", "y", "width", "height"):
        assert abs(ours["crumbs"]["box"][key] - django_s["crumbs"]["box"][key]) <= SLACK, (
            f"{where}: the breadcrumbs' {key} is {ours['crumbs']['box'][key]}, "
            f"Django's own {django_s['crumbs']['box'][key]}"
        )


def assert_same_change_list(ours: dict[str, Any], django_s: dict[str, Any], where: str) -> None:
    """The change list and its table start and end as far from the content area's edges
    as on Django's page, the page links stay within the change list, and a filter panel
    sits where Django's does: beside the table, at its top. Measured from the content
    area's edges, which the app's navigation sidebar (shown on Django's pages, not on
    ours) moves."""
    assert ours["table"] is not None and ours["changelist"] is not None, f"{where}: no change list"
    assert ours["scrollWidth"] <= django_s["scrollWidth"], f"{where}: the page scrolls sideways"

    def inset(measured: dict[str, Any], part: str) -> tuple[float, float]:
        """How far ``part`` starts from the content area's left and ends from its right."""
        content, box = measured["content"], measured[part]
        return box["x"] - content["x"], content["x"] + content["width"] - box["x"] - box["width"]

    for part in ("changelist", "table"):
        sides = zip(("left", "right"), inset(ours, part), inset(django_s, part), strict=True)
        for side, ours_px, django_px in sides:
            assert abs(ours_px - django_px) <= SLACK, (
                f"{where}: the {part} is {ours_px}px from the content area's {side}, "
                f"on Django's own page {django_px}px"
            )
    pages, changelist = ours["pages"], ours["changelist"]
    assert pages is not None, f"{where}: no page links"
    assert pages["x"] + pages["width"] <= changelist["x"] + changelist["width"] + SLACK, (
        f"{where}: the page links reach past the change list"
    )
    if django_s["filter"] is None:
        assert ours["filter"] is None, f"{where}: a filter panel Django's own page does not have"
        return
    assert ours["filter"] is not None, f"{where}: no filter panel"
    table, panel = ours["table"], ours["filter"]
    assert panel["x"] >= table["x"] + table["width"], f"{where}: the filter panel is not beside the table"
    assert panel["y"] < table["y"] + table["height"], f"{where}: the filter panel is under the table"
    right, django_right = inset(ours, "filter")[1], inset(django_s, "filter")[1]
    assert abs(right - django_right) <= SLACK, (
        f"{where}: the filter panel is {right}px from the content area's right, "
        f"on Django's own page {django_right}px"
    )
    width = panel["width"]
    assert abs(width - django_s["filter"]["width"]) <= SLACK, f"{where}: the filter panel is {width}px wide"
    top, django_top = (m["filter"]["y"] - m["changelist"]["y"] for m in (ours, django_s))
    assert abs(top - django_top) <= SLACK, f"{where}: the filter panel starts {top}px into the change list"


def test_the_pages_are_laid_out_as_django_s_own(
    page: Any, live_server: Any, admin_user: Any, site: None
) -> None:
    log_in(page, live_server, admin_user)
    # Django's own pages on the same site: a change list with filters (users), one
    # without (groups), and a page below a change list (a user's change form).
    users = measure(page, live_server, "/admin/auth/user/", "django-users")
    groups = measure(page, live_server, "/admin/auth/group/", "django-groups")
    user = measure(page, live_server, f"/admin/auth/user/{admin_user.pk}/change/", "django-user")
    assert users["filter"] is not None and groups["filter"] is None  # what the comparisons rely on

    locks = measure(page, live_server, "/admin/tslock_django/lock/", "locks")
    assert page.locator("#result_list tbody tr[data-name]").count() == 2
    assert_same_breadcrumbs(locks, users, "Locks")
    assert locks["crumbs"]["last"] == "Locks"
    assert_same_change_list(locks, users, "Locks")

    runs = measure(page, live_server, "/admin/tslock_django/job/", "runs")
    assert page.locator("#result_list tbody tr[data-name]").count() == 2
    assert_same_breadcrumbs(runs, users, "Runs")
    assert runs["crumbs"]["last"] == "Runs"
    assert_same_change_list(runs, users, "Runs")

    history = measure(page, live_server, "/admin/tslock_django/job/history/?name=nightly-report", "history")
    assert page.locator("#result_list tbody tr[data-run]").count() == 2
    assert_same_breadcrumbs(history, user, "a name's runs")
    assert history["crumbs"]["last"] == "nightly-report"
    assert crumb_link(page, "Runs") == "/admin/tslock_django/job/"
    assert_same_change_list(history, groups, "a name's runs")

    releases = measure(page, live_server, "/admin/tslock_django/lock/history/", "release-history")
    assert_same_breadcrumbs(releases, user, "the release history")
    assert crumb_link(page, "Locks") == "/admin/tslock_django/lock/"
    assert_same_change_list(releases, groups, "the release history")
