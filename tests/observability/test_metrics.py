"""Prometheus metrics with the real prometheus_client: the journal collector read at
scrape time, and the in-process counters fed by the library's signals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import OperationalError
from django.test.utils import override_settings

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.admin.journal_rows import NOW, job
from tests.admin.tslock_test_providers import MEMORY
from tests.observability.stores import BROKEN
from tslock_django import LockConfiguration, metrics, signals
from tslock_django.conf import providers
from tslock_django.exceptions import LockProviderError
from tslock_django.journal import outcomes

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def journal_on() -> Iterator[None]:
    with override_settings(TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=None):
        yield


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition text, by name and labels."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_the_collector_reads_each_name_from_the_journal_at_scrape_time() -> None:
    job(
        "reports",
        schedule="1h",
        outcome=outcomes.SUCCEEDED,
        started=M,
        success=M,
        duration=2.5,
        runs_succeeded=3,
        runs_failed=1,
        runs_skipped=2,
    )
    job("late", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    job("broken", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H, runs_failed=4)
    job("plain", outcome=outcomes.SUCCEEDED, started=M, success=M, provider="edge")
    registry = CollectorRegistry()
    metrics.register_collector(registry)

    samples = scrape(registry)
    assert samples[key("tslock_journal_up")] == 1
    assert samples[key("tslock_overdue", lock_name="reports", provider="default")] == 0
    assert samples[key("tslock_overdue", lock_name="late", provider="default")] == 1
    assert samples[key("tslock_overdue", lock_name="broken", provider="default")] == 1
    # Without a schedule, nothing can be overdue: no sample rather than a misleading 0.
    assert key("tslock_overdue", lock_name="plain", provider="edge") not in samples
    assert samples[key("tslock_last_run_duration_seconds", lock_name="reports", provider="default")] == 2.5
    success = samples[key("tslock_last_success_timestamp_seconds", lock_name="reports", provider="default")]
    assert success == pytest.approx((NOW - M).timestamp(), abs=0.001)
    runs = {
        o: samples[key("tslock_runs_total", lock_name="reports", provider="default", outcome=o)]
        for o in ("succeeded", "failed", "skipped", "error", "lost")
    }
    assert runs == {"succeeded": 3, "failed": 1, "skipped": 2, "error": 0, "lost": 0}

    # Computed at each scrape: a new success is seen at the next one.
    job("later", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M)
    assert key("tslock_overdue", lock_name="later", provider="default") in scrape(registry)


def test_a_real_run_is_counted() -> None:
    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY}):
        call_command("locked_job", shard="m")
        call_command("locked_job", shard="m")
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    samples = scrape(registry)
    assert samples[key("tslock_runs_total", lock_name="job-m", provider="default", outcome="succeeded")] == 2
    assert key("tslock_last_success_timestamp_seconds", lock_name="job-m", provider="default") in samples


def test_names_scheduled_in_settings_that_never_ran_are_not_overdue() -> None:
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    with override_settings(TSLOCK_SCHEDULES={"nightly": {"schedule": "0 3 * * *"}}):
        samples = scrape(registry)
    assert samples[key("tslock_overdue", lock_name="nightly", provider="")] == 0


def test_registering_reads_nothing(django_assert_num_queries: Any) -> None:
    # The default registry describes a collector when it is registered; that must not
    # read the database (registration happens while the project starts).
    with django_assert_num_queries(0):
        metrics.register_collector(CollectorRegistry(auto_describe=True))


def test_an_unreadable_journal_is_a_zero_not_a_failed_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    from tslock_django.journal.models import Job

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("no such table: tslock_job")

    registry = CollectorRegistry()
    metrics.register_collector(registry)
    monkeypatch.setattr(Job.objects, "using", broken)
    assert scrape(registry)[key("tslock_journal_up")] == 0
    monkeypatch.undo()
    with override_settings(TSLOCK_JOURNAL=None):
        assert scrape(registry)[key("tslock_journal_up")] == 0


def test_in_process_counters_follow_the_signals_once_installed() -> None:
    registry = CollectorRegistry()
    labels = {"lock_name": "counted", "provider": "default"}

    def value(name: str, **extra: str) -> float:
        return registry.get_sample_value(name, {**labels, **extra}) or 0.0

    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY, "broken": BROKEN}):
        config = LockConfiguration("counted", "1m")
        held = providers["default"].lock(config)  # before install: not counted
        assert held is not None
        held.unlock()
        metrics.install(registry)
        metrics.install(registry)  # twice changes nothing
        try:
            held = providers["default"].lock(config)
            assert held is not None
            assert providers["default"].lock(config) is None
            with pytest.raises(LockProviderError):
                providers["broken"].lock(config)
            signals.notify(
                signals.keep_alive_failed,
                sender=type(providers["default"]),
                alias="default",
                name="counted",
                record=held.record,
                error=None,
            )
        finally:
            metrics.uninstall()
        assert providers["default"].lock(LockConfiguration("counted", "1m")) is None  # after: not counted

    assert value("tslock_lock_attempts_total") == 2
    assert value("tslock_lock_acquired_total") == 1
    assert value("tslock_lock_skipped_total") == 1
    assert value("tslock_lock_errors_total") == 0
    assert (
        registry.get_sample_value("tslock_lock_errors_total", {"lock_name": "counted", "provider": "broken"})
        == 1
    )
    assert (
        registry.get_sample_value(
            "tslock_lock_attempts_total", {"lock_name": "counted", "provider": "broken"}
        )
        == 1
    )
    assert value("tslock_keep_alive_failures_total") == 1


# -- bounded as names grow -----------------------------------------------------------


def many(count: int, prefix: str = "sync-", **fields: Any) -> None:
    """``count`` names of one pattern, all on time (hourly, last success a minute ago),
    in one insert: what ``@locked_task(name="sync-{account_id}", schedule="1h")`` leaves."""
    from tslock_django.journal.models import Job
    from tslock_django.journal.recorder import to_db

    at = to_db(NOW - M)
    values = {
        "provider": "default",
        "first_seen_at": to_db(NOW - 30 * 24 * H),
        "schedule": "1h",
        "last_outcome": outcomes.SUCCEEDED,
        "last_started_at": at,
        "last_finished_at": at,
        "last_duration": 1.0,
        "last_success_at": at,
        "runs_succeeded": 2,
        "runs_failed": 1,
        **fields,
    }
    Job.objects.bulk_create([Job(name=f"{prefix}{i:05}", **values) for i in range(count)])


@pytest.fixture
def loaded_jobs() -> Iterator[list[str]]:
    """The names of the ``Job`` rows the code under test turned into objects."""
    from django.db.models.signals import post_init

    from tslock_django.journal.models import Job

    names: list[str] = []

    def count(sender: Any, instance: Any, **kwargs: Any) -> None:
        names.append(instance.name)

    post_init.connect(count, sender=Job)
    try:
        yield names
    finally:
        post_init.disconnect(count, sender=Job)


def test_the_default_cap_keeps_many_names_to_a_few_hundred_series() -> None:
    many(300)
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    samples = scrape(registry)
    names = {dict(labels).get("lock_name") for _, labels in samples} - {None}
    # 300 names made 2,401 series before the cap.
    assert len(samples) <= 8 * (metrics.DEFAULT_MAX_NAMES + 1) + 2
    assert len(names) == metrics.DEFAULT_MAX_NAMES + 1
    assert metrics.OTHER in names
    assert samples[key("tslock_journal_names")] == 300


@override_settings(TSLOCK_METRICS={"max_names": 3})
def test_names_past_the_cap_are_summed_under_other() -> None:
    many(10)
    job("zz-broken", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H, runs_failed=4)
    job("zz-late", schedule="1h", grace=60, outcome=outcomes.SUCCEEDED, started=5 * H, success=5 * H)
    job("zz-plain", outcome=outcomes.SUCCEEDED, started=M, success=M, runs_succeeded=7)
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    samples = scrape(registry)

    labelled = {dict(labels)["lock_name"] for name, labels in samples if name == "tslock_runs_total"}
    # Late and failing names first (alerts are about them), then the others by name.
    assert labelled == {"zz-broken", "zz-late", "sync-00000", metrics.OTHER}
    assert samples[key("tslock_overdue", lock_name="zz-broken", provider="default")] == 1
    assert samples[key("tslock_overdue", lock_name="zz-late", provider="default")] == 1
    assert samples[key("tslock_overdue", lock_name=metrics.OTHER, provider="")] == 0
    other = {
        o: samples[key("tslock_runs_total", lock_name=metrics.OTHER, provider="", outcome=o)]
        for o in ("succeeded", "failed")
    }
    # Nine sync names (2 successes, 1 failure each) and zz-plain (7 successes).
    assert other == {"succeeded": 9 * 2 + 7, "failed": 9}
    assert key("tslock_last_success_timestamp_seconds", lock_name="sync-00001", provider="default") not in (
        samples
    )
    assert samples[key("tslock_journal_names")] == 13


@override_settings(TSLOCK_METRICS={"max_names": 2})
def test_overdue_names_past_the_cap_are_counted_under_other() -> None:
    many(5, "late-", last_outcome=outcomes.FAILED)
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    samples = scrape(registry)
    assert samples[key("tslock_overdue", lock_name="late-00000", provider="default")] == 1
    assert samples[key("tslock_overdue", lock_name="late-00001", provider="default")] == 1
    assert samples[key("tslock_overdue", lock_name=metrics.OTHER, provider="")] == 3


@override_settings(TSLOCK_METRICS={"max_names": 4})
def test_a_scrape_reads_the_rows_of_the_labelled_names_only(loaded_jobs: list[str]) -> None:
    many(200)
    job("zz-broken", schedule="1h", outcome=outcomes.FAILED, started=M, success=2 * H)
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    loaded_jobs.clear()
    scrape(registry)
    # One aggregate for the rest; rows only of the late or failing candidates and of
    # the names shown (the old collector read all 201).
    assert sorted(set(loaded_jobs)) == ["sync-00000", "sync-00001", "sync-00002", "zz-broken"]


def test_a_malformed_cap_is_a_zero_not_a_failed_scrape() -> None:
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    for wrong in ({"max_names": 0}, {"max_names": "50"}, {"names": 5}, [50]):
        with override_settings(TSLOCK_METRICS=wrong):
            assert scrape(registry)[key("tslock_journal_up")] == 0
            with pytest.raises(ValueError, match="TSLOCK_METRICS"):
                metrics.install(CollectorRegistry())


def test_in_process_counters_label_at_most_the_cap_of_names() -> None:
    registry = CollectorRegistry()
    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY}, TSLOCK_METRICS={"max_names": 2}):
        metrics.install(registry)
        try:
            for name in ("first", "second", "third", "fourth", "first"):
                held = providers["default"].lock(LockConfiguration(name, "1m"))
                assert held is not None
                held.unlock()
        finally:
            metrics.uninstall()

    def acquired(name: str) -> float | None:
        return registry.get_sample_value(
            "tslock_lock_acquired_total", {"lock_name": name, "provider": "default"}
        )

    assert acquired("first") == 2
    assert acquired("second") == 1
    assert acquired("third") is None
    assert acquired(metrics.OTHER) == 2
    names = {
        sample.labels["lock_name"]
        for family in registry.collect()
        for sample in family.samples
        if "lock_name" in sample.labels
    }
    assert names == {"first", "second", metrics.OTHER}


def test_purge_deletes_the_names_left_without_runs_unless_scheduled_in_settings() -> None:
    from io import StringIO

    from tests.admin.journal_rows import run
    from tslock_django.journal.models import Job, Run

    old = timedelta(days=100)
    for name in ("only-skipped", "scheduled-only-skipped", "recent-skip"):
        job(name, attempt=old, attempt_outcome=outcomes.SKIPPED, first_seen=old)
    run("only-skipped", outcome=outcomes.SKIPPED, started=old)
    run("scheduled-only-skipped", outcome=outcomes.SKIPPED, started=old)
    run("recent-skip", outcome=outcomes.SKIPPED, started=old)
    run("recent-skip", outcome=outcomes.SKIPPED, started=M)
    ran = run("ran-long-ago", started=old)
    job("ran-long-ago", outcome=outcomes.SUCCEEDED, started=old, first_seen=old, last_run_id=ran.id)
    job("never-seen-run", first_seen=M)  # a name whose first run is starting now

    def purge(*extra: str) -> str:
        out = StringIO()
        with override_settings(TSLOCK_SCHEDULES={"scheduled-only-skipped": {"schedule": "1d"}}):
            call_command("tslock", "purge", "--runs-older-than", "90d", *extra, stdout=out)
        return out.getvalue()

    assert "journal: would delete 1 name without a run left" in purge("--dry-run")
    assert Job.objects.filter(name="only-skipped").exists()
    assert "journal: deleted 1 name without a run left" in purge()
    assert sorted(Job.objects.values_list("name", flat=True)) == [
        "never-seen-run",
        "ran-long-ago",  # its latest run is kept, so is its name
        "recent-skip",
        "scheduled-only-skipped",
    ]
    assert not Run.objects.filter(name="only-skipped").exists()
    assert "without a run left" not in purge()  # nothing more to delete: no line about names


def documented_urlconf() -> str:
    """The URLconf the metrics page shows (the block marked ``{.metrics-urlconf}``)."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "reference" / "observability.md"
    text = page.read_text(encoding="utf-8")
    after = text.split("{.metrics-urlconf}\n```python\n", 1)[1]
    return after.split("\n```", 1)[0]


def test_the_documented_url_serves_the_packages_metrics() -> None:
    import sys
    import types

    from django.test import Client
    from prometheus_client import REGISTRY

    module = types.ModuleType("tslock_documented_metrics_urls")
    exec(compile(documented_urlconf(), "observability.md", "exec"), module.__dict__)  # our own page
    sys.modules[module.__name__] = module
    job("reports", schedule="1h", outcome=outcomes.SUCCEEDED, started=M, success=M, runs_succeeded=3)
    collector = metrics.register_collector()  # the default registry, as the page says
    try:
        with override_settings(ROOT_URLCONF=module.__name__):
            response = Client().get("/metrics")
    finally:
        REGISTRY.unregister(collector)
        del sys.modules[module.__name__]
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples[key("tslock_journal_up")] == 1
    assert (
        samples[key("tslock_runs_total", lock_name="reports", provider="default", outcome="succeeded")] == 3
    )
