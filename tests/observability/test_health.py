"""The django-health-check check, run by the installed django-health-check."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.test.utils import override_settings

pytest.importorskip("health_check")

from health_check.exceptions import ServiceReturnedUnexpectedResult, ServiceUnavailable

from tests.admin.journal_rows import job
from tests.admin.tslock_test_providers import MEMORY, FailingProvider, path_of
from tslock_django.exceptions import LockProviderError
from tslock_django.health import TslockHealthCheck
from tslock_django.journal import outcomes
from tslock_django.providers.memory import MemoryLockProvider

H = timedelta(hours=1)
M = timedelta(minutes=1)
DOWN = {"BACKEND": path_of(FailingProvider), "OPTIONS": {"failure": "store"}}


@pytest.fixture(autouse=True)
def journal_on() -> Iterator[None]:
    with override_settings(
        TSLOCK_JOURNAL={"using": "default"},
        TSLOCK_SCHEDULES=None,
        TSLOCK_PROVIDERS={"default": MEMORY, "other": MEMORY},
    ):
        yield


@pytest.mark.django_db
def test_healthy_when_every_store_answers_and_nothing_is_overdue() -> None:
    job("fine", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    job("unscheduled-and-failed", outcome=outcomes.FAILED, started=M)
    TslockHealthCheck().check()  # raises nothing


@pytest.mark.django_db
def test_a_store_that_fails_is_unavailable_and_named() -> None:
    with (
        override_settings(TSLOCK_PROVIDERS={"default": MEMORY, "kv": DOWN}),
        pytest.raises(ServiceUnavailable) as raised,
    ):
        TslockHealthCheck().check()
    assert str(raised.value).count("lock provider 'kv'") == 1
    assert "HTTP 401" in str(raised.value)
    assert "'default'" not in str(raised.value)


@pytest.mark.django_db
def test_late_and_failing_jobs_are_named() -> None:
    job("late", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    job("broken", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H)
    job("new", schedule="1h", first_seen=M)
    with pytest.raises(ServiceReturnedUnexpectedResult) as raised:
        TslockHealthCheck().check()
    assert raised.value.message == "2 scheduled jobs overdue: broken (failing), late (late)"


@pytest.mark.django_db
def test_at_most_five_overdue_names_are_named() -> None:
    for i in range(7):
        job(f"late-{i}", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    with pytest.raises(ServiceReturnedUnexpectedResult) as raised:
        TslockHealthCheck().check()
    assert raised.value.message.startswith("7 scheduled jobs overdue: late-0 (late)")
    assert raised.value.message.endswith("late-4 (late) and 2 more")


@pytest.mark.django_db
def test_journal_off_checks_the_stores_only() -> None:
    with override_settings(TSLOCK_JOURNAL=None):
        TslockHealthCheck().check()


@pytest.mark.django_db(transaction=True)
def test_the_health_check_view_runs_it() -> None:
    """Through django-health-check's own view: on 4.x an async view that runs the check in
    a thread, on 3.x (which Django 4.2 installs on Python 3.10) a sync one."""
    view_module = pytest.importorskip("health_check.views")
    view = view_module.HealthCheckView.as_view(checks=["tslock_django.health.TslockHealthCheck"])

    def ask() -> tuple[int, dict[str, str]]:
        request = RequestFactory().get("/ht/", HTTP_ACCEPT="application/json")
        response = view(request)
        if inspect.isawaitable(response):
            response = asyncio.run(response)
        return response.status_code, json.loads(response.content)

    assert ask() == (200, {"TslockHealthCheck": "OK"})
    job("late", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    status, body = ask()
    assert status == 500
    assert "1 scheduled job overdue: late (late)" in body["TslockHealthCheck"]


class LeakyStore(MemoryLockProvider):
    """A third-party store whose error quotes its connection URL, password and all."""

    def query(self, query: Any) -> Any:
        raise LockProviderError(
            "could not connect to redis://:r3dis-pw-9911@cache:6379/0 (Authorization: Bearer tok-123456789)",
            alias=self.alias,
        )


@pytest.mark.django_db
def test_the_message_is_scrubbed_like_the_journals_text() -> None:
    leaky = {"BACKEND": path_of(LeakyStore)}
    with (
        override_settings(TSLOCK_PROVIDERS={"default": MEMORY, "leaky": leaky}),
        pytest.raises(ServiceUnavailable) as raised,
    ):
        TslockHealthCheck().check()
    message = str(raised.value)
    assert "r3dis-pw-9911" not in message and "tok-123456789" not in message
    assert "redis://:***@cache:6379/0 (Authorization: Bearer ***)" in message


@pytest.mark.django_db
def test_a_probe_reads_only_the_rows_that_may_be_overdue() -> None:
    from django.db.models.signals import post_init

    from tslock_django.journal.models import Job

    for i in range(60):
        job(f"sync-{i:02}", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    job("zz-late", schedule="2h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    loaded: list[str] = []

    def count(sender: object, instance: Job, **kwargs: object) -> None:
        loaded.append(instance.name)

    post_init.connect(count, sender=Job)
    try:
        with pytest.raises(ServiceReturnedUnexpectedResult) as raised:
            TslockHealthCheck().check()
    finally:
        post_init.disconnect(count, sender=Job)
    assert raised.value.message == "1 scheduled job overdue: zz-late (late)"
    assert loaded == ["zz-late"]  # the old check read all 61 scheduled rows


urlpatterns: list[object] = []  # the documented URLconf, filled by the test below


@pytest.mark.django_db(transaction=True)
def test_the_documented_set_up_serves_the_page_and_needs_the_app(client: Client, settings: Any) -> None:
    """The how-to's two steps: ``"health_check"`` in ``INSTALLED_APPS`` (the page's
    template is in it) and the view with the check; without the app the page fails."""
    from django.template import TemplateDoesNotExist
    from django.urls import clear_url_caches, path

    views = pytest.importorskip("health_check.views")
    checks = ["tslock_django.health.TslockHealthCheck"]
    urlpatterns[:] = [path("ht/", views.HealthCheckView.as_view(checks=checks))]
    settings.ROOT_URLCONF = __name__
    clear_url_caches()
    with pytest.raises(TemplateDoesNotExist):
        client.get("/ht/")
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "health_check"]
    page = client.get("/ht/")
    assert page.status_code == 200
    assert "TslockHealthCheck" in page.content.decode()
