"""Prometheus metrics (the optional extra ``tslock-django[prometheus]``); the metrics and
their labels are listed in ``docs/reference/observability.md``.

Two kinds, for two kinds of process: :class:`JournalCollector` (:func:`register_collector`)
computes its metrics at scrape time from the journal, because a command run by cron is gone
before any server could scrape it; :func:`install` connects in-process counters to the
library's signals, for long-lived processes that take locks themselves. Both label at most
:func:`max_names` names and sum the rest under ``lock_name="__other__"`` (``OTHER``),
so a name pattern cannot grow the series without bound. Names follow ShedLock's Micrometer
listener, in Prometheus form. Only this module imports ``prometheus_client``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from django.conf import settings
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
#: The ``lock_name`` of the names past the cap, summed.
OTHER = "__other__"
#: ``TSLOCK_METRICS["max_names"]`` when unset: 8 journal series a name and 5 counters
#: a name and provider keep 2,000 names to well under 1,000 series in all.
DEFAULT_MAX_NAMES = 50


def max_names() -> int:
    """How many lock names get labels of their own: ``TSLOCK_METRICS["max_names"]``,
    read at each call (50 when unset).

    Raises:
        ValueError: ``TSLOCK_METRICS`` is not a dict whose only key is ``max_names``, a
            whole number of 1 or more.
    """
    configured = getattr(settings, "TSLOCK_METRICS", None)
    if configured is None:
        return DEFAULT_MAX_NAMES
    if not isinstance(configured, Mapping) or set(configured) - {"max_names"}:
        raise ValueError(
            f"TSLOCK_METRICS must be a dict with the one key 'max_names', e.g. "
            f"{{'max_names': {DEFAULT_MAX_NAMES}}}; got {configured!r}"
        )
    cap = configured.get("max_names", DEFAULT_MAX_NAMES)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"TSLOCK_METRICS['max_names'] must be a whole number of 1 or more, got {cap!r}")
    return cap


class JournalCollector(Collector):
    """Metrics read from the journal at each scrape, nothing kept between scrapes: one
    aggregate over the ``Job`` table, the late or failing names, and the rows of at most
    :func:`max_names` names; the others summed under ``OTHER``.

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
            "names": GaugeMetricFamily(
                "tslock_journal_names",
                "Lock names in the journal, with labels of their own or summed under __other__.",
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
        from .journal.alerting import alerting, summary
        from .journal.models import Job
        from .journal.recorder import from_db, journal_database
        from .journal.status import ALERTING, job_schedule, schedules_from_settings, status_of

        using = self.using or journal_database()
        if using is None:
            raise ValueError("the journal is off (TSLOCK_JOURNAL = None)")
        cap = max_names()
        now = datetime.now(timezone.utc)
        configured = schedules_from_settings()
        whole = summary(using, now)
        overdue = alerting(using, now, limit=cap, groups=whole.groups)
        # Names of their own, in this order up to the cap: the late or failing ones
        # (what alerts are about), those of TSLOCK_SCHEDULES (chosen by the operator),
        # then the rest by name (an index range; the same names from one scrape to the
        # next, so no series come and go while nothing changes).
        chosen: dict[str, Job | None] = {job.name: job for job, _ in overdue.found}
        alerting_names = set(chosen)
        for name in sorted(configured):
            if len(chosen) >= cap:
                break
            chosen.setdefault(name, None)
        jobs = Job.objects.using(using)
        missing = [name for name, job in chosen.items() if job is None]
        if missing:
            chosen.update({job.name: job for job in jobs.filter(name__in=missing)})
        if len(chosen) < cap:
            rest = jobs.exclude(name__in=list(chosen)).order_by("name")[: cap - len(chosen)]
            chosen.update({job.name: job for job in rest})
        other_runs = dict(whole.runs)
        labelled_overdue = 0
        labelled_rows = 0
        for name in sorted(chosen):
            job = chosen[name]
            if job is None:  # scheduled in settings, never run: new, not overdue
                families["overdue"].add_metric([name, ""], 0)
                continue
            labelled_rows += 1
            labels = [job.name, job.provider]
            success = from_db(job.last_success_at)
            if success is not None:
                families["success"].add_metric(labels, success.timestamp())
            if job.last_duration is not None:
                families["duration"].add_metric(labels, job.last_duration)
            schedule = job_schedule(job, configured.get(job.name))
            if name in alerting_names or schedule is not None:
                late = name in alerting_names or status_of(name, job, schedule, now).status in ALERTING
                labelled_overdue += late
                families["overdue"].add_metric(labels, 1 if late else 0)
            for outcome, column in RUN_COUNTERS.items():
                families["runs"].add_metric([*labels, outcome], getattr(job, column))
                other_runs[column] -= getattr(job, column)
        families["names"].add_metric([], whole.names)
        if whole.names > labelled_rows:
            labels = [OTHER, ""]
            families["overdue"].add_metric(labels, max(overdue.count - labelled_overdue, 0))
            for outcome, column in RUN_COUNTERS.items():
                families["runs"].add_metric([*labels, outcome], max(other_runs[column], 0))


def register_collector(
    registry: CollectorRegistry = REGISTRY, *, using: str | None = None
) -> JournalCollector:
    """Add a :class:`JournalCollector` to ``registry`` (the default registry, which
    ``prometheus_client``'s exposition and django-prometheus serve) and return it."""
    collector = JournalCollector(using)
    registry.register(collector)
    return collector


class _Counters:
    """The in-process counters of one registry, and the (name, provider) pairs that
    have labels of their own: the first :func:`max_names` seen; later ones count under
    ``(OTHER, provider)``. Provider aliases come from settings, so they stay few."""

    def __init__(self, registry: CollectorRegistry, cap: int) -> None:
        def counter(name: str, text: str) -> Counter:
            return Counter(name, text, LABELS, registry=registry)

        self.cap = cap
        self.labelled: set[tuple[str, str]] = set()
        self.mutex = threading.Lock()
        self.attempts = counter("tslock_lock_attempts", "Attempts to acquire a lock.")
        self.acquired = counter("tslock_lock_acquired", "Attempts that acquired the lock.")
        self.skipped = counter("tslock_lock_skipped", "Attempts that found the lock held elsewhere.")
        self.errors = counter("tslock_lock_errors", "Attempts that failed because the store failed.")
        self.keep_alive_failures = counter(
            "tslock_keep_alive_failures", "Keep-alive extensions that failed or were refused."
        )

    def labels(self, kwargs: dict[str, Any]) -> tuple[str, str]:
        """The labels a signal's lock is counted under."""
        pair = str(kwargs.get("name", "")), str(kwargs.get("alias", ""))
        if pair in self.labelled:
            return pair
        with self.mutex:
            if len(self.labelled) < self.cap:
                self.labelled.add(pair)
                return pair
        return OTHER, pair[1]


_installed: dict[int, _Counters] = {}
_install_mutex = threading.Lock()
_current: _Counters | None = None


def install(registry: CollectorRegistry = REGISTRY) -> None:
    """Count this process's lock attempts, acquisitions, skips, store errors and
    keep-alive failures in ``registry``, from the library's signals. Calling it again
    changes nothing (the counters of one process go to one registry: the last given).
    The first :func:`max_names` (name, provider) pairs are labelled as such, the later
    ones counted under ``lock_name="__other__"``; the cap is read here.

    Raises:
        ValueError: ``TSLOCK_METRICS`` is malformed.
    """
    global _current
    cap = max_names()
    with _install_mutex:
        counters = _installed.get(id(registry))
        if counters is None:
            counters = _installed[id(registry)] = _Counters(registry, cap)
        counters.cap = cap
        _current = counters
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"tslock_metrics_{receiver.__name__}")


def uninstall() -> None:
    """Stop counting (the counters keep their values)."""
    global _current
    for signal, receiver in _RECEIVERS:
        signal.disconnect(dispatch_uid=f"tslock_metrics_{receiver.__name__}")
    _current = None


def _on_attempted(**kwargs: Any) -> None:
    counters = _current
    if counters is not None:
        counters.attempts.labels(*counters.labels(kwargs)).inc()


def _on_acquired(**kwargs: Any) -> None:
    counters = _current
    if counters is not None:
        counters.acquired.labels(*counters.labels(kwargs)).inc()


def _on_skipped(**kwargs: Any) -> None:
    counters = _current
    if counters is not None:
        counters.skipped.labels(*counters.labels(kwargs)).inc()


def _on_failed(**kwargs: Any) -> None:
    counters = _current
    if counters is not None:
        counters.errors.labels(*counters.labels(kwargs)).inc()


def _on_keep_alive_failed(**kwargs: Any) -> None:
    counters = _current
    if counters is not None:
        counters.keep_alive_failures.labels(*counters.labels(kwargs)).inc()


_RECEIVERS = [
    (signals.lock_attempted, _on_attempted),
    (signals.lock_acquired, _on_acquired),
    (signals.lock_skipped, _on_skipped),
    (signals.lock_failed, _on_failed),
    (signals.keep_alive_failed, _on_keep_alive_failed),
]
