"""The Runs page and a name's history: what they show, how they filter, search and page,
who may see them, and the links between them and the Locks page."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from html import unescape
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse

from tests.admin.journal_rows import NOW, job, run
from tests.admin.tslock_test_providers import MEMORY
from tslock_django import LockConfiguration
from tslock_django.conf import providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)
M = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def journal_on() -> Iterator[None]:
    with override_settings(TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=None):
        yield


@pytest.fixture
def runs_url() -> str:
    return reverse("admin:tslock_django_job_changelist")


@pytest.fixture
def run_history_url() -> str:
    return reverse("admin:tslock_django_job_history")


def rows_of(html: str) -> list[dict[str, str]]:
    """The Runs page's rows: name, status and outcome as the row's data attributes say."""
    return [
        {"name": unescape(name), "status": status, "outcome": outcome}
        for name, status, outcome in re.findall(
            r'<tr data-name="([^"]*)" data-status="([^"]*)" data-outcome="([^"]*)">', html
        )
    ]


def names_of(html: str) -> list[str]:
    return [row["name"] for row in rows_of(html)]


def link_of(html: str, link_id: str) -> str:
    found = re.search(rf'<a href="([^"]*)" id="{link_id}"', html)
    assert found, f"no {link_id} link on the page"
    return unescape(found.group(1))


def history_rows(html: str) -> list[tuple[int, str]]:
    return [(int(i), o) for i, o in re.findall(r'<tr data-run="(\d+)" data-outcome="([^"]*)">', html)]


# -- who may see it -----------------------------------------------------------------------


def test_staff_without_view_lock_may_not_see_the_runs_page_or_a_history(
    make_client: Callable[..., Client], runs_url: str, run_history_url: str
) -> None:
    job("nightly", outcome=outcomes.SUCCEEDED, started=H, success=H)
    staff = make_client()  # staff, no permission
    assert staff.get(runs_url).status_code == 403
    assert staff.get(run_history_url, {"name": "nightly"}).status_code == 403
    # view_job (the placeholder model's own permission) is not the page's permission either.
    assert make_client("view_job").get(runs_url).status_code == 403
    not_staff = make_client("view_lock", staff=False)
    assert not_staff.get(runs_url).status_code == 302  # to the login page


def test_view_lock_shows_the_runs_page_and_a_history(
    viewer: Client, runs_url: str, run_history_url: str
) -> None:
    job("nightly", outcome=outcomes.SUCCEEDED, started=H, success=H)
    run("nightly")
    assert viewer.get(runs_url).status_code == 200
    assert viewer.get(run_history_url, {"name": "nightly"}).status_code == 200
    index = viewer.get(reverse("admin:app_list", args=["tslock_django"])).content.decode()
    assert runs_url in index


# -- what a row shows ---------------------------------------------------------------------


def test_one_row_per_name_with_its_status_from_the_journal_rule(viewer: Client, runs_url: str) -> None:
    job("a-up", schedule="1h", grace=600, outcome=outcomes.SUCCEEDED, started=10 * M, success=10 * M)
    job("b-late", schedule="1h", grace=600, outcome=outcomes.SUCCEEDED, started=3 * H, success=3 * H)
    job(
        "c-failing",
        schedule="1h",
        outcome=outcomes.FAILED,
        started=5 * M,
        success=2 * H,
        detail="RuntimeError: disk full",
    )
    job("d-new", schedule="1h", first_seen=M)
    job("e-unscheduled", outcome=outcomes.FAILED, started=5 * M, detail="ValueError: x")
    job("f-lost", schedule="1h", outcome=outcomes.RUNNING, started=2 * H, deadline=-H)
    job("g-running", outcome=outcomes.RUNNING, started=M, deadline=H)

    html = viewer.get(runs_url).content.decode()
    assert rows_of(html) == [
        {"name": "a-up", "status": "ok", "outcome": "succeeded"},
        {"name": "b-late", "status": "late", "outcome": "succeeded"},
        {"name": "c-failing", "status": "failing", "outcome": "failed"},
        {"name": "d-new", "status": "new", "outcome": ""},
        # Without a schedule there is no status to have: shown as a dash.
        {"name": "e-unscheduled", "status": "", "outcome": "failed"},
        # A running row past its deadline reads lost, and its name is failing.
        {"name": "f-lost", "status": "failing", "outcome": "lost"},
        {"name": "g-running", "status": "", "outcome": "running"},
    ]
    text = unescape(html)
    assert "due at" in text and "not done within grace 10m" in text  # b-late's reason
    assert "RuntimeError: disk full" in text  # c-failing's reason
    assert 'title="not scheduled">—</span>' in html
    assert "1h (grace 10m)" in text


def test_a_skip_after_the_last_run_is_shown_and_filtered_as_the_newest_attempt(
    viewer: Client, runs_url: str
) -> None:
    job(
        "skipped-lately",
        outcome=outcomes.SUCCEEDED,
        started=H,
        success=H,
        attempt=M,
        attempt_outcome=outcomes.SKIPPED,
    )
    job(
        "skipped-long-ago",
        outcome=outcomes.SUCCEEDED,
        started=M,
        success=M,
        attempt=H,
        attempt_outcome=outcomes.SKIPPED,
    )
    html = viewer.get(runs_url).content.decode()
    assert html.count("tslock-newer-attempt") == 1
    assert "then skipped" in html
    assert names_of(viewer.get(runs_url, {"outcome": "skipped"}).content.decode()) == ["skipped-lately"]
    assert names_of(viewer.get(runs_url, {"outcome": "succeeded"}).content.decode()) == [
        "skipped-lately",
        "skipped-long-ago",
    ]


def test_untrusted_strings_are_escaped_on_both_pages(
    viewer: Client, runs_url: str, run_history_url: str
) -> None:
    name = '<script>alert("name")</script>'
    detail = '<img src=x onerror="alert(1)">'
    job(name, schedule="1h", outcome=outcomes.FAILED, started=M, detail=detail, provider="<b>p</b>")
    run(
        name,
        outcome=outcomes.FAILED,
        detail=detail,
        host="<i>host</i>",
        locked_by="<u>web</u>:1",
        held_by="<s>x</s>",
    )
    for html in (
        viewer.get(runs_url).content.decode(),
        viewer.get(run_history_url, {"name": name}).content.decode(),
    ):
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "<b>p</b>" not in html
        assert "&lt;script&gt;alert(&quot;name&quot;)&lt;/script&gt;" in html
    history = viewer.get(run_history_url, {"name": name}).content.decode()
    for raw in ("<i>host</i>", "<u>web</u>", "<s>x</s>"):
        assert raw not in history
    assert "&lt;i&gt;host&lt;/i&gt;" in history


def test_journal_off_says_so(viewer: Client, runs_url: str) -> None:
    with override_settings(TSLOCK_JOURNAL=None):
        html = viewer.get(runs_url).content.decode()
    assert 'id="journal-off"' in html
    assert rows_of(html) == []


def test_names_scheduled_in_settings_that_never_ran_are_listed_on_the_first_page(
    viewer: Client, runs_url: str
) -> None:
    job("ran", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    schedules = {"ran": {"schedule": "1h"}, "never-ran": {"schedule": "0 3 * * *"}}
    with override_settings(TSLOCK_SCHEDULES=schedules):
        html = viewer.get(runs_url).content.decode()
        late_only = viewer.get(runs_url, {"status": "late"}).content.decode()
    assert 'id="never-run"' in html and 'data-name="never-ran"' in html
    assert 'id="never-run"' not in late_only
    # Seen now: recorded, so that it turns late if it never runs.
    assert Job.objects.get(name="never-ran").last_started_at is None


# -- filters, search, pages ---------------------------------------------------------------


def test_filter_by_status(viewer: Client, runs_url: str) -> None:
    job("up-1", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    job("late-1", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    job("late-2", schedule="1h", grace=60, outcome=outcomes.FAILED, started=5 * H, success=9 * H)
    job("failing-1", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H)
    job("new-1", schedule="1h", first_seen=M)
    job("never-1", schedule="1h", first_seen=5 * H)  # never ran, first seen five periods ago
    job("plain", outcome=outcomes.SUCCEEDED, started=M, success=M)

    def shown(**params: str) -> list[str]:
        return names_of(viewer.get(runs_url, params).content.decode())

    assert shown(status="ok") == ["up-1"]
    assert shown(status="late") == ["late-1", "never-1"]  # late-2's last run failed: failing comes first
    assert shown(status="failing") == ["failing-1", "late-2"]
    assert shown(status="new") == ["new-1"]
    assert shown(status="unscheduled") == ["plain"]
    assert shown(status="bogus") == shown()  # an unknown value is no filter


def test_filter_by_outcome_and_search(viewer: Client, runs_url: str) -> None:
    job("import-orders", outcome=outcomes.SUCCEEDED, started=M)
    job("import-USERS", outcome=outcomes.FAILED, started=M)
    job("export-orders", outcome=outcomes.RUNNING, started=M, deadline=H)
    job("export-users", outcome=outcomes.RUNNING, started=2 * H, deadline=-H)
    job("100%_done", outcome=outcomes.SUCCEEDED, started=M)

    def shown(**params: str) -> list[str]:
        return names_of(viewer.get(runs_url, params).content.decode())

    assert shown(outcome="failed") == ["import-USERS"]
    assert shown(outcome="running") == ["export-orders"]
    assert shown(outcome="lost") == ["export-users"]
    assert shown(q="users") == ["export-users", "import-USERS"]  # a substring, any case
    assert shown(q="orders", outcome="succeeded") == ["import-orders"]
    assert shown(q="%_") == ["100%_done"]  # LIKE's wildcards are searched for as text
    html = viewer.get(runs_url, {"q": "orders", "outcome": "failed"}).content.decode()
    assert "No runs recorded for names containing" in unescape(html)


def test_keyset_pages_forwards_and_back(
    viewer: Client, runs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import RunsAdmin

    monkeypatch.setattr(RunsAdmin, "list_per_page", 3)
    for i in range(8):
        job(f"job-{i:02d}", outcome=outcomes.SUCCEEDED, started=M)
    pages = []
    html = viewer.get(runs_url).content.decode()
    assert 'id="previous-page"' not in html
    pages.append(names_of(html))
    while 'id="next-page"' in html:
        html = viewer.get(runs_url + link_of(html, "next-page")).content.decode()
        pages.append(names_of(html))
    assert pages == [
        ["job-00", "job-01", "job-02"],
        ["job-03", "job-04", "job-05"],
        ["job-06", "job-07"],
    ]
    for expected in reversed(pages[:-1]):
        html = viewer.get(runs_url + link_of(html, "previous-page")).content.decode()
        assert names_of(html) == expected
    assert 'id="previous-page"' not in html
    # Rows added before the cursor do not shift the page after it (no OFFSET).
    job("job-00a", outcome=outcomes.SUCCEEDED, started=M)
    assert names_of(viewer.get(runs_url, {"after": "job-02"}).content.decode()) == [
        "job-03",
        "job-04",
        "job-05",
    ]


def test_the_first_page_reads_one_page_of_names_whatever_the_table_holds(
    viewer: Client, runs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import RunsAdmin

    monkeypatch.setattr(RunsAdmin, "list_per_page", 5)

    def journal_queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get(runs_url).status_code == 200
        return [q["sql"] for q in captured.captured_queries if "tslock_" in q["sql"]]

    for i in range(6):
        job(f"few-{i}", outcome=outcomes.SUCCEEDED, started=M)
    few = journal_queries()
    for i in range(200):
        job(f"many-{i:03d}", outcome=outcomes.SUCCEEDED, started=M)
    many = journal_queries()
    # One read of the page's names, and one of their newest notifications.
    assert len(few) == len(many) == 2
    assert "LIMIT 6" in many[0] and "OFFSET" not in many[0].upper()
    assert "COUNT(" not in many[0].upper()
    assert "tslock_notification" in many[1] and "tslock_notification" not in many[0]


def test_a_status_filter_reads_a_bounded_number_of_batches_and_says_where_it_stopped(
    viewer: Client, runs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import RunsAdmin, runs_page

    monkeypatch.setattr(RunsAdmin, "list_per_page", 2)
    monkeypatch.setattr(runs_page, "SCAN_BATCHES", 2)
    # "late" cannot be told in SQL: every one of these up names is a candidate.
    for i in range(10):
        job(f"n-{i:02d}", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    job("z-late", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)

    html = viewer.get(runs_url, {"status": "late"}).content.decode()
    assert names_of(html) == []
    assert 'id="scan-stopped"' in html
    pages = 1
    while "z-late" not in names_of(html):
        assert 'id="next-page"' in html
        html = viewer.get(runs_url + link_of(html, "next-page")).content.decode()
        pages += 1
        assert pages < 10
    assert names_of(html) == ["z-late"]


# -- a name's history ---------------------------------------------------------------------


def test_history_newest_first_with_every_field(viewer: Client, run_history_url: str) -> None:
    job("report", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H, runs_succeeded=1)
    ok = run("report", started=2 * H, host="web-1", pid=4242, locked_by="web-1:4242", fencing_token=41)
    skipped = run("report", outcome=outcomes.SKIPPED, started=H, duration=0, held_by="web-2:7")
    failed = run(
        "report",
        outcome=outcomes.FAILED,
        started=M,
        fencing_token=42,
        detail="RuntimeError: the job failed",
    )
    run("other", started=30 * M)
    html = viewer.get(run_history_url, {"name": "report"}).content.decode()
    assert history_rows(html) == [
        (failed.id, "failed"),
        (skipped.id, "skipped"),
        (ok.id, "succeeded"),
    ]
    text = unescape(html)
    for shown in ("web-1", "4242", "web-1:4242", "41", "42", "web-2:7", "RuntimeError: the job failed"):
        assert shown in text
    assert 'id="job-summary"' in html and "1 succeeded" in text


def test_history_shows_a_running_row_past_its_deadline_as_lost(viewer: Client, run_history_url: str) -> None:
    dead = run("worker", outcome=outcomes.RUNNING, started=2 * H, deadline=-H)
    alive = run("worker", outcome=outcomes.RUNNING, started=M, deadline=H)
    html = viewer.get(run_history_url, {"name": "worker"}).content.decode()
    assert history_rows(html) == [(alive.id, "running"), (dead.id, "lost")]


def test_history_pages_by_start_time_and_id(
    viewer: Client, run_history_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import RunsAdmin

    monkeypatch.setattr(RunsAdmin, "list_per_page", 2)
    same = timedelta(minutes=30)
    made = [run("pager", started=H - i * M) for i in range(3)]
    made += [run("pager", started=same) for _ in range(2)]  # two runs started at the same instant
    newest_first = [r.id for r in sorted(made, key=lambda r: (r.started_at, r.id), reverse=True)]
    html = viewer.get(run_history_url, {"name": "pager"}).content.decode()
    pages = [[i for i, _ in history_rows(html)]]
    while 'id="next-page"' in html:
        html = viewer.get(run_history_url + link_of(html, "next-page")).content.decode()
        pages.append([i for i, _ in history_rows(html)])
    assert [i for page in pages for i in page] == newest_first
    assert [len(page) for page in pages] == [2, 2, 1]
    for expected in reversed(pages[:-1]):
        html = viewer.get(run_history_url + link_of(html, "previous-page")).content.decode()
        assert [i for i, _ in history_rows(html)] == expected


def test_history_reads_the_name_index_in_order() -> None:
    """A history page is an index range on (name, started_at, id): no sort, no scan,
    so it costs the same at a thousand runs as at a million."""
    if connection.vendor != "sqlite":
        pytest.skip("the plan is read from SQLite's EXPLAIN QUERY PLAN")
    from tslock_django.journal.status import runs

    older_than = (NOW - H, 10)
    with CaptureQueriesContext(connection) as captured:
        runs("default", name="pager", limit=21, before=older_than)
        runs("default", name="pager", limit=21, after=older_than)
    for query in captured.captured_queries:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        assert "tslock_run_name_started" in plan, plan
        assert "TEMP B-TREE" not in plan.upper(), plan  # the index gives the order


def test_bad_history_links_are_400_with_a_way_back(viewer: Client, run_history_url: str) -> None:
    assert viewer.get(run_history_url).status_code == 400
    response = viewer.get(run_history_url, {"name": "x", "before": "yesterday~1"})
    assert response.status_code == 400
    assert "page position" in response.content.decode()
    assert viewer.get(run_history_url, {"name": "x", "before": "2026-01-01T00:00:00~1"}).status_code == 400


# -- links between Locks and Runs, and a real run ------------------------------------------


def test_a_locked_command_appears_on_the_runs_page_and_links_to_locks(
    viewer: Client, runs_url: str, run_history_url: str, locks_url: str, settings: Any
) -> None:
    settings.TSLOCK_PROVIDERS = {"default": MEMORY}
    call_command("locked_job", shard="ok")
    with pytest.raises(RuntimeError):
        call_command("locked_job", shard="bad", explode=True)
    held = providers["default"].lock(LockConfiguration("job-ok", "10m"))
    assert held is not None

    html = viewer.get(runs_url).content.decode()
    assert rows_of(html) == [
        {"name": "job-bad", "status": "", "outcome": "failed"},
        {"name": "job-ok", "status": "", "outcome": "succeeded"},
    ]
    history = viewer.get(run_history_url, {"name": "job-bad"}).content.decode()
    assert "RuntimeError: the job failed" in unescape(history)
    # From the history to the name's lock on the Locks page...
    locks_link = link_of(history, "lock-of-name")
    assert locks_link.startswith(locks_url) and "q=job-bad" in locks_link
    # ...and from a Locks row to the history of its runs.
    locks = viewer.get(locks_url).content.decode()
    found = re.search(r'<tr data-provider="default" data-name="job-ok">.*?</tr>', locks, re.S)
    assert found is not None
    link = re.search(r'<a href="([^"]*)" class="tslock-runs-link', found.group(0))
    assert link is not None and unescape(link.group(1)) == f"{run_history_url}?name=job-ok"
    assert viewer.get(unescape(link.group(1))).status_code == 200
    assert link_of(locks, "runs-link") == runs_url


def test_locks_rows_have_no_runs_link_when_the_journal_is_off(
    viewer: Client, locks_url: str, settings: Any
) -> None:
    settings.TSLOCK_PROVIDERS = {"default": MEMORY}
    job("job-ok", outcome=outcomes.SUCCEEDED, started=M)
    assert providers["default"].lock(LockConfiguration("job-ok", "10m")) is not None
    with override_settings(TSLOCK_JOURNAL=None):
        html = viewer.get(locks_url).content.decode()
    assert "tslock-runs-link" not in html


def test_both_pages_show_the_journals_text_scrubbed_also_from_rows_written_unscrubbed(
    viewer: Client, runs_url: str, run_history_url: str
) -> None:
    # Rows as a release that stored details unscrubbed wrote them.
    secrets = ("Pg-pass-4417", "eyJhbGciOiJIUzI1NiJ9.e30", "unreachable-db-password", "hunter2-pw")
    detail = (
        "RuntimeError: postgres://app:Pg-pass-4417@db/app; Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30;"
        " DATABASES password unreachable-db-password"
    )
    job("leaky", schedule="1h", outcome=outcomes.FAILED, started=M, detail=detail)
    run(
        "leaky",
        outcome=outcomes.FAILED,
        detail=detail,
        held_by="web:1 password=hunter2-pw",
        locked_by="web:1",
    )
    runs_page = unescape(viewer.get(runs_url).content.decode())
    history = unescape(viewer.get(run_history_url, {"name": "leaky"}).content.decode())
    for html in (runs_page, history):
        for secret in secrets:
            assert secret not in html
        assert (
            "RuntimeError: postgres://app:***@db/app; Authorization: Bearer ***; DATABASES password ***"
            in html
        )
    assert "web:1 password=***" in history


def test_a_name_longer_than_the_journal_column_links_from_locks_to_its_history(
    viewer: Client, run_history_url: str, locks_url: str, settings: Any
) -> None:
    """Redis and memory take 1,024-byte names; the journal keeps a 750-character stand-in,
    and the Locks page and the history find the name's runs by it."""
    from tslock_django import lock
    from tslock_django.journal.models import journal_name

    settings.TSLOCK_PROVIDERS = {"default": MEMORY}
    name = "long-" + "z" * 995
    with lock(name, "1m", journal=True):
        pass
    held = providers["default"].lock(LockConfiguration(name, "10m"))
    assert held is not None
    locks = viewer.get(locks_url).content.decode()
    link = re.search(r'<a href="([^"]*)" class="tslock-runs-link', locks)
    assert link is not None
    assert unescape(link.group(1)) == f"{run_history_url}?{urlencode({'name': journal_name(name)})}"
    assert 'id="job-summary"' in viewer.get(unescape(link.group(1))).content.decode()
    history = viewer.get(run_history_url, {"name": name}).content.decode()
    assert 'id="job-summary"' in history and history_rows(history)[0][1] == "succeeded"


def test_a_schedule_in_a_named_zone_shows_its_zone_and_the_due_time_on_that_zones_clock(
    viewer: Client, runs_url: str, run_history_url: str
) -> None:
    """Issue 34: the page's times are in the admin's zone; a schedule read in another
    zone says which, and its due time is also shown on that zone's wall clock."""
    # Kolkata has no daylight saving: 02:30 there is always the due time shown.
    job("kolkata", schedule="CRON_TZ=Asia/Kolkata 30 2 * * *", grace=600, first_seen=M)
    job("local", schedule="30 2 * * *", grace=600, first_seen=M)
    page = unescape(viewer.get(runs_url).content.decode())
    assert "30 2 * * * in Asia/Kolkata (grace 10m)" in page
    assert len(re.findall(r"\d{4}-\d\d-\d\d 02:30 Asia/Kolkata", page)) == 1
    assert "30 2 * * * (grace 10m)" in page, "without a zone: TIME_ZONE, the page's own"
    history = unescape(viewer.get(run_history_url, {"name": "kolkata"}).content.decode())
    assert re.search(r"\(\d{4}-\d\d-\d\d 02:30 Asia/Kolkata\)", history)
