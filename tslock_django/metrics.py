"""Prometheus metrics (the optional extra ``tslock-django[prometheus]``).

Two kinds, for two kinds of process:

- :class:`JournalCollector`, registered with :func:`register_collector`, computes its
  metrics at scrape time from the journal's ``Job`` table. A management command run by
  cron is gone before any Prometheus server could scrape it, so what it did is read
  back from the journal by the web process that is scraped:
  ``tslock_last_success_timestamp_seconds``, ``tslock_last_run_duration_seconds``,
  ``tslock_overdue`` (1 when late or failing, by the journal's status rule; scheduled
  names only) and ``tslock_runs_total{outcome}``, each labelled ``lock_name`` and
  ``provider``; and ``tslock_journal_up`` (0 when the journal could not be read).
- :func:`install` connects counters to the library's signals for long-lived processes
  (a web server, a worker) that take locks themselves: ``tslock_lock_attempts_total``,
  ``tslock_lock_acquired_total``, ``tslock_lock_skipped_total``,
  ``tslock_lock_errors_total`` and ``tslock_keep_alive_failures_total``, labelled
  ``lock_name`` and ``provider``. Nothing is connected until ``install()`` is called.

The names follow ShedLock's Micrometer listener, in Prometheus form (``_total`` for
counters, ``_seconds`` for times). Importing this module needs ``prometheus_client``;
nothing else in tslock imports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from django.db import DatabaseError
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import signals

logger = logging.getLogger("tslock_django")

LABELS = ["lock_name", "provider"]
#: The ``Job`` counter of each outcome in ``tslock_runs_total``.
RUN_COUNTERS = {
    "succeeded": "runs_succeeded",
    "failed": "runs_failed",
    "lost": "runs_lost",
    "skipped": "runs_skipped",
    "error": "runs_error",
}


class JournalCollector(Collector):
    """Metrics read from the journal at each scrape: one pass over the ``Job`` table
    (one row per lock name), nothing kept between scrapes.

    Args:
        using: the journal's database alias; by default ``TSLOCK_JOURNAL["using"]``,
            read at each scrape.
    """

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def _families(self) -> dict[str, Metric]:
        return {
            "success": GaugeMetricFamily(
                "tslock_last_success_timestamp_seconds",
                "When the last successful run of the job started (Unix time).",
                labels=LABELS,
            ),
            "duration": GaugeMetricFamily(
                "tslock_last_run_duration_seconds",
                "How long the last finished run of the job took.",
                labels=LABELS,
            ),
            "overdue": GaugeMetricFamily(
                "tslock_overdue",
                "1 when the scheduled job is late or failing, else 0.",
                labels=LABELS,
            ),
            "runs": CounterMetricFamily(
                "tslock_runs",
                "Journaled runs of the job by outcome.",
                labels=[*LABELS, "outcome"],
            ),
        }

    def describe(self) -> Iterator[Metric]:
        # Without describe(), registering would call collect() and so read the
        # database at import or start-up time.
        yield from self._families().values()
        yield GaugeMetricFamily("tslock_journal_up", "1 when the journal could be read at this scrape.")

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        up = GaugeMetricFamily("tslock_journal_up", "1 when the journal could be read at this scrape.")
        try:
            self._read(families)
        except (DatabaseError, ValueError) as err:
            # One bad scrape must not fail the whole endpoint (other collectors too).
            logger.warning("tslock metrics: the journal could not be read: %s", type(err).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield from families.values()
        yield up

    def _read(self, families: dict[str, Any]) -> None:
        # The journal's modules load models: imported here, so that this module can be
        # imported (and install() called) before the app registry is ready.
        from .journal.models import Job
        from .journal.recorder import from_db, journal_database
        from .journal.status import ALERTING, job_schedule, schedules_from_settings, status_of

        using = self.using or journal_database()
        if using is None:
            raise ValueError("the journal is off (TSLOCK_JOURNAL = None)")
        now = datetime.now(timezone.utc)
        configured = schedules_from_settings()
        seen: set[str] = set()
        for job in Job.objects.using(using).order_by("name").iterator(chunk_size=2000):
            seen.add(job.name)
            labels = [job.name, job.provider]
            success = from_db(job.last_success_at)
            if success is not None:
                families["success"].add_metric(labels, success.timestamp())
            if job.last_duration is not None:
                families["duration"].add_metric(labels, job.last_duration)
            schedule = job_schedule(job, configured.get(job.name))
            if schedule is not None:
                status = status_of(job.name, job, schedule, now)
                families["overdue"].add_metric(labels, 1 if status.status in ALERTING else 0)
            for outcome, field in RUN_COUNTERS.items():
                families["runs"].add_metric([*labels, outcome], getattr(job, field))
        for name in sorted(set(configured) - seen):  # scheduled, never run: new, not overdue
            families["overdue"].add_metric([name, ""], 0)


def register_collector(
    registry: CollectorRegistry = REGISTRY, *, using: str | None = None
) -> JournalCollector:
    """Add a :class:`JournalCollector` to ``registry`` (the default registry, which
    ``prometheus_client``'s exposition and django-prometheus serve) and return it."""
    collector = JournalCollector(using)
    registry.register(collector)
    return collector


class _Counters:
    """The in-process counters of one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, text: str) -> Counter:
            return Counter(name, text, LABELS, registry=registry)

        self.attempts = counter("tslock_lock_attempts", "Attempts to acquire a lock.")
        self.acquired = counter("tslock_lock_acquired", "Attempts that acquired the lock.")
        self.skipped = counter("tslock_lock_skipped", "Attempts that found the lock held elsewhere.")
        self.errors = counter("tslock_lock_errors", "Attempts that failed because the store failed.")
        self.keep_alive_failures = counter(
            "tslock_keep_alive_failures", "Keep-alive extensions that failed or were refused."
        )


_installed: dict[int, _Counters] = {}
_install_mutex = threading.Lock()
_current: _Counters | None = None


def install(registry: CollectorRegistry = REGISTRY) -> None:
    """Count this process's lock attempts, acquisitions, skips, store errors and
    keep-alive failures in ``registry``, from the library's signals. Calling it again
    changes nothing (the counters of one process go to one registry: the last given)."""
    global _current
    with _install_mutex:
        counters = _installed.get(id(registry))
        if counters is None:
            counters = _installed[id(registry)] = _Counters(registry)
        _current = counters
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"tslock_metrics_{receiver.__name__}")


def uninstall() -> None:
    """Stop counting (the counters keep their values)."""
    global _current
    for signal, receiver in _RECEIVERS:
        signal.disconnect(dispatch_uid=f"tslock_metrics_{receiver.__name__}")
    _current = None


def _labels(kwargs: dict[str, Any]) -> tuple[str, str]:
    return str(kwargs.get("name", "")), str(kwargs.get("alias", ""))


def _on_attempted(**kwargs: Any) -> None:
    if _current is not None:
        _current.attempts.labels(*_labels(kwargs)).inc()


def _on_acquired(**kwargs: Any) -> None:
    if _current is not None:
        _current.acquired.labels(*_labels(kwargs)).inc()


def _on_skipped(**kwargs: Any) -> None:
    if _current is not None:
        _current.skipped.labels(*_labels(kwargs)).inc()


def _on_failed(**kwargs: Any) -> None:
    if _current is not None:
        _current.errors.labels(*_labels(kwargs)).inc()


def _on_keep_alive_failed(**kwargs: Any) -> None:
    if _current is not None:
        _current.keep_alive_failures.labels(*_labels(kwargs)).inc()


_RECEIVERS = [
    (signals.lock_attempted, _on_attempted),
    (signals.lock_acquired, _on_acquired),
    (signals.lock_skipped, _on_skipped),
    (signals.lock_failed, _on_failed),
    (signals.keep_alive_failed, _on_keep_alive_failed),
]
