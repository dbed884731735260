"""The Runs page's Pause and Resume buttons (POST, CSRF, ``release_lock``), the paused
badge, and the last notification of each name, read in one query for the page."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse

from tests.admin.journal_rows import NOW, job
from tests.conftest import database_marks
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Notification
from tslock_django.journal.recorder import to_db

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)


@pytest.fixture(autouse=True)
def journal_on() -> Iterator[None]:
    with override_settings(TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=None):
        yield


@pytest.fixture
def runs_url() -> str:
    return reverse("admin:tslock_django_job_changelist")


@pytest.fixture
def pause_url() -> str:
    return reverse("admin:tslock_django_job_pause")


def notify(
    name: str, status: str, *, ago: timedelta, sent: bool = True, reason: str = "", error: str = ""
) -> None:
    at = to_db(NOW - ago)
    Notification.objects.create(
        name=name,
        status=status,
        previous="ok",
        reason=reason,
        at=at,
        sent_at=at if sent else None,
        last_error=error,
    )


def cell(html: str, name: str, css_class: str) -> str:
    """The text of the ``css_class`` cell of ``name``'s row."""
    row = re.search(rf'<tr data-name="{re.escape(name)}".*?</tr>', html, re.S)
    assert row, f"no row for {name}"
    found = re.search(rf'<td class="{css_class}">(.*?)</td>', row.group(0), re.S)
    assert found, f"no {css_class} cell in {name}'s row"
    return found.group(1)


def text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


# -- the buttons --------------------------------------------------------------------------


def test_only_release_lock_sees_the_buttons_and_may_post(
    viewer: Client, releaser: Client, runs_url: str, pause_url: str
) -> None:
    job("nightly", outcome=outcomes.SUCCEEDED, started=H, success=H)
    assert 'class="button tslock-pause"' not in viewer.get(runs_url).content.decode()
    assert viewer.post(pause_url, {"pause": "nightly"}).status_code == 403
    assert Job.objects.get(name="nightly").paused_at is None
    html = releaser.get(runs_url).content.decode()
    assert 'name="pause" value="nightly"' in html and ">Pause</button>" in html


def test_pause_then_resume_from_the_page(releaser: Client, runs_url: str, pause_url: str) -> None:
    job("nightly", schedule="1h", outcome=outcomes.SUCCEEDED, started=H, success=H)
    back = runs_url + "?q=night"
    response = releaser.post(pause_url, {"pause": "nightly", "next": back})
    assert response.status_code == 302 and response["Location"] == back
    assert Job.objects.get(name="nightly").paused_at is not None
    page = releaser.get(back).content.decode()
    assert "Paused nightly at " in text(page)  # the message (the admin capitalises it)
    assert 'class="tslock-badge tslock-paused"' in page
    assert 'name="resume" value="nightly"' in page and ">Resume</button>" in page
    releaser.post(pause_url, {"resume": "nightly", "next": back})
    assert Job.objects.get(name="nightly").paused_at is None
    page = releaser.get(back).content.decode()
    assert "Resumed nightly; its next run takes the lock as usual" in text(page)
    assert 'class="tslock-badge tslock-paused"' not in page
    entries = LogEntry.objects.filter(object_id="nightly").order_by("id")
    assert [e.change_message for e in entries] == ["Paused", "Resumed"]


def test_a_job_can_be_paused_from_its_history_page(releaser: Client, pause_url: str) -> None:
    job("nightly", outcome=outcomes.SUCCEEDED, started=H, success=H)
    history = reverse("admin:tslock_django_job_history") + "?name=nightly"
    assert text(releaser.get(history).content.decode()).count("Paused no") == 1
    releaser.post(pause_url, {"pause": "nightly", "next": history})
    page = text(releaser.get(history).content.decode())
    assert "Paused paused since " in page and "Resume" in page


def test_the_post_needs_its_csrf_token(
    make_client: Callable[..., Client], runs_url: str, pause_url: str
) -> None:
    job("nightly", outcome=outcomes.SUCCEEDED, started=H, success=H)
    strict = make_client("view_lock", "release_lock", enforce_csrf_checks=True)
    assert strict.post(pause_url, {"pause": "nightly"}).status_code == 403
    assert Job.objects.get(name="nightly").paused_at is None
    page = strict.get(runs_url).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    posted = strict.post(pause_url, {"pause": "nightly", "csrfmiddlewaretoken": token.group(1)})
    assert posted.status_code == 302 and Job.objects.get(name="nightly").paused_at is not None


def test_get_is_refused_and_a_foreign_next_goes_back_to_the_runs_page(
    releaser: Client, runs_url: str, pause_url: str
) -> None:
    assert releaser.get(pause_url, {"pause": "nightly"}).status_code == 405
    response = releaser.post(pause_url, {"pause": "nightly", "next": "https://evil.example/"})
    assert response["Location"] == runs_url
    # Paused ahead of its first run: the name gets its row.
    assert Job.objects.get(name="nightly").paused_at is not None


def test_a_request_without_a_name_or_action_changes_nothing(
    releaser: Client, runs_url: str, pause_url: str
) -> None:
    job("nightly")
    page = releaser.post(pause_url, {"stop": "nightly"}, follow=True).content.decode()
    assert "named no job or no action" in text(page)
    assert Job.objects.get(name="nightly").paused_at is None


def test_the_journal_off_is_said_on_the_page(releaser: Client, pause_url: str) -> None:
    with override_settings(TSLOCK_JOURNAL=None):
        page = releaser.post(pause_url, {"pause": "nightly"}, follow=True).content.decode()
    assert "The journal is off (TSLOCK_JOURNAL = None), so no job can be paused." in text(page)
    assert not Job.objects.exists()


# -- the last notification ----------------------------------------------------------------


def test_each_row_shows_its_newest_notification_and_pending_while_unsent(
    viewer: Client, runs_url: str
) -> None:
    for name in ("a-failing", "b-pending", "c-quiet"):
        job(name, schedule="1h", outcome=outcomes.FAILED, started=H)
    notify("a-failing", "failing", ago=3 * H)
    notify("a-failing", "ok", ago=2 * H)
    notify("a-failing", "failing", ago=H, reason="RuntimeError: password=hunter2 refused")
    notify("b-pending", "late", ago=H, sent=False, error="WebhookChannel: HTTP 500")
    html = viewer.get(runs_url).content.decode()
    newest = cell(html, "a-failing", "tslock-notification")
    assert text(newest).startswith("failing ") and "pending" not in newest
    assert "hunter2" not in html and "password=***" in unescape(newest)
    pending = cell(html, "b-pending", "tslock-notification")
    assert text(pending).startswith("late ") and text(pending).endswith("pending")
    assert "last channel failure: WebhookChannel: HTTP 500" in unescape(pending)
    assert text(cell(html, "c-quiet", "tslock-notification")) == "—"


def test_the_notifications_are_read_in_one_query_whatever_the_page_holds(
    viewer: Client, runs_url: str
) -> None:
    def notification_queries(names: int) -> int:
        Job.objects.all().delete()
        Notification.objects.all().delete()
        for number in range(names):
            job(f"job-{number:03}", schedule="1h")
            notify(f"job-{number:03}", "late", ago=H)
        with CaptureQueriesContext(connection) as queries:
            assert viewer.get(runs_url).status_code == 200
        return sum("tslock_notification" in q["sql"] for q in queries.captured_queries)

    assert notification_queries(3) == 1
    assert notification_queries(40) == 1


@pytest.mark.parametrize(
    "using",
    [
        pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
        pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
    ],
)
def test_the_newest_notification_query_on_each_server(using: str) -> None:
    from tslock_django.admin.runs_page import JobRow, with_notifications

    rows = []
    for name in ("one", "two", "three"):
        found = job(name, using=using)
        rows.append(JobRow(name, found, None, None, "", "", NOW))
    for status, ago in (("failing", 2 * H), ("ok", H)):
        Notification.objects.using(using).create(name="one", status=status, previous="", at=to_db(NOW - ago))
    Notification.objects.using(using).create(name="two", status="late", previous="", at=to_db(NOW))
    shown = with_notifications(using, rows)
    assert [row.notification.status if row.notification else None for row in shown] == ["ok", "late", None]
