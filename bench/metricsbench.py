"""The metrics scrape and the health check as job names grow (issue 31, item 8).

``BENCH_DB=postgres python -m bench.metricsbench SIZES REPEATS``: for each number of
names in ``SIZES`` (e.g. ``100,20000``), a journal whose names follow the documented
``sync-{account_id}`` pattern (hourly, one in 1,000 failing, the rest on time), then the
median time of a scrape (``generate_latest`` of a registry holding the journal
collector) and of a health-check probe (``TslockHealthCheck().check()``), and the
series and bytes a scrape returns. The largest size is compared with the smallest.

Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.stats import target


def _fill(names: int) -> None:
    from datetime import datetime, timedelta, timezone

    from tslock_django.journal.models import Job
    from tslock_django.journal.recorder import to_db

    Job.objects.all().delete()
    now = datetime.now(timezone.utc)
    rows = []
    for i in range(names):
        at = to_db(now - timedelta(seconds=60 + i % 3000))
        failing = i % 1000 == 7
        rows.append(
            Job(
                name=f"sync-{i:06}",
                provider="default",
                first_seen_at=to_db(now - timedelta(days=30)),
                schedule="1h",
                grace=600,
                last_run_id=i,
                last_outcome="failed" if failing else "succeeded",
                last_started_at=at,
                last_finished_at=at,
                last_duration=1.0,
                last_success_at=to_db(now - timedelta(hours=2)) if failing else at,
                runs_succeeded=24,
                runs_failed=1 if failing else 0,
            )
        )
    Job.objects.bulk_create(rows, batch_size=2000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE" if connection.vendor == "sqlite" else "ANALYZE tslock_job")


def _median_ms(operation: Callable[[], object], repeats: int) -> float:
    operation()  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        operation()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run(sizes: list[int], repeats: int) -> dict[str, Any]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.db import connection
    from django.test.utils import override_settings
    from health_check.exceptions import ServiceReturnedUnexpectedResult
    from prometheus_client import CollectorRegistry, generate_latest

    from tslock_django import metrics
    from tslock_django.health import TslockHealthCheck

    registry = CollectorRegistry()
    metrics.register_collector(registry)

    def probe() -> None:
        with contextlib.suppress(ServiceReturnedUnexpectedResult):  # the failing names: an answer
            TslockHealthCheck().check()

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    found: dict[str, Any] = {}
    try:
        with override_settings(TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=None):
            for names in sizes:
                _fill(names)
                text = generate_latest(registry)
                found[str(names)] = {
                    "scrape_ms": _median_ms(lambda: generate_latest(registry), repeats),
                    "health_ms": _median_ms(probe, repeats),
                    "series": sum(1 for line in text.splitlines() if line and not line.startswith(b"#")),
                    "bytes": len(text),
                }
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    small, large = found[str(min(sizes))], found[str(max(sizes))]
    return {
        "sizes": found,
        "repeats": repeats,
        "scrape_large_over_small": large["scrape_ms"] / small["scrape_ms"],
        "health_large_over_small": large["health_ms"] / small["health_ms"],
    }


def targets(report: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 31 item 8: at the largest size, at most 1.5x the time at the smallest."""
    found: dict[str, Any] = {}
    for server, data in (report or {}).items():
        sizes = sorted(data["sizes"], key=int)
        small, large = f"{int(sizes[0]):,}", f"{int(sizes[-1]):,}"
        found[f"metrics: scrape with {large} job names <= 1.5x with {small} ({server})"] = target(
            data["scrape_large_over_small"], 1.5, "<="
        )
        found[f"metrics: health check with {large} job names <= 1.5x with {small} ({server})"] = target(
            data["health_large_over_small"], 1.5, "<="
        )
    return found


def render(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return []
    lines = ["", "metrics scrape and health check by job names (median ms; series and bytes per scrape)"]
    for server, data in report.items():
        for size, cell in data["sizes"].items():
            lines.append(
                f"  {server:<9} {int(size):>7,} names  scrape {cell['scrape_ms']:>7.2f} ms  "
                f"health {cell['health_ms']:>7.2f} ms  {cell['series']:>5} series  {cell['bytes']:>7,} B"
            )
        lines.append(
            f"  {server:<9} largest / smallest: scrape {data['scrape_large_over_small']:.2f}x, "
            f"health {data['health_large_over_small']:.2f}x"
        )
    return lines


if __name__ == "__main__":
    chosen = [int(size) for size in sys.argv[1].split(",")]
    print(json.dumps(run(chosen, int(sys.argv[2]))))
