"""The run journal's costs.

``python -m bench.journalbench startup REPEATS``: wall time of ``python -m django
bench_locked`` (an empty locked command) with the journal on against the same with it
off, alternating, on SQLite and on PostgreSQL (each a migrated database of its own).

``BENCH_DB=postgres python -m bench.journalbench scale REPEATS``: the journal's reads at
1,000 runs (100 names, 10 runs each) and at 1,000,000 runs (10,000 names, 100 runs each):
a name's history, ``tslock runs NAME``, the Runs page's first page (when the admin has
one) and ``tslock overdue``, with the median time and the peak Python memory of each. In
both sizes 100 names are scheduled, so ``overdue`` answers for the same names.

Each prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The name whose history the scale run reads.
PROBE = "job-7"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "PYTHONPATH": str(ROOT), **extra}


def _django(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", *args], cwd=ROOT, env=env, check=True, capture_output=True
    )


def _alternate(env: dict[str, str], repeats: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(repeats):
        for journal in ("off", "on") if i % 2 == 0 else ("on", "off"):
            started = time.perf_counter()
            _django({**env, "BENCH_JOURNAL": journal}, "bench_locked")
            samples[journal].append((time.perf_counter() - started) * 1000)
    off, on = statistics.median(samples["off"]), statistics.median(samples["on"])
    return {"off_median_ms": off, "on_median_ms": on, "on_over_off": on / off, "runs": repeats}


def startup(repeats: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(BENCH_DB="sqlite", BENCH_SQLITE_NAME=str(Path(tmp) / "journal.sqlite3"))
        _django(env, "migrate", "--verbosity", "0")
        found["sqlite"] = _alternate(env, repeats)
    import psycopg

    name = f"bench_journal_{os.getpid()}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        try:
            env = _env(BENCH_DB="postgres", BENCH_DB_NAME=name)
            _django(env, "migrate", "--verbosity", "0")
            found["postgres"] = _alternate(env, repeats)
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    return found


def _fill(runs: int, names: int, scheduled: int) -> None:
    from django.db import connection

    per_name = runs // names
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE tslock_run, tslock_job")
        cursor.execute(
            "INSERT INTO tslock_run (name, provider, outcome, started_at, finished_at, duration, host, pid, "
            "locked_by, fencing_token, held_by, detail, deadline) "
            "SELECT 'job-' || (i % %s), 'default', CASE WHEN i % 7 = 0 THEN 'failed' ELSE 'succeeded' END, "
            "now() - (i * interval '1 second'), now() - (i * interval '1 second') + interval '1 second', "
            "1.0, 'host', 1, 'host:1', i, '', '', NULL FROM generate_series(1, %s) AS i",
            [names, per_name * names],
        )
        cursor.execute(
            "INSERT INTO tslock_job (name, provider, first_seen_at, schedule, grace, last_run_id, "
            "last_outcome, last_started_at, last_finished_at, last_duration, last_detail, last_success_at, "
            "last_success_run_id, last_attempt_outcome, runs_succeeded, runs_failed, runs_skipped, "
            "runs_error, runs_lost) "
            "SELECT name, 'default', min(started_at), '', NULL, max(id), 'succeeded', max(started_at), "
            "max(finished_at), 1.0, '', max(started_at), max(id), '', count(*), 0, 0, 0, 0 "
            "FROM tslock_run GROUP BY name"
        )
        cursor.execute(
            "UPDATE tslock_job SET schedule = '1h', grace = 600 WHERE name IN "
            "(SELECT name FROM tslock_job ORDER BY name LIMIT %s)",
            [scheduled],
        )
        cursor.execute("ANALYZE tslock_run")
        cursor.execute("ANALYZE tslock_job")


def _measure(operation: Callable[[], object], repeats: int) -> dict[str, float]:
    operation()  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        operation()
        times.append((time.perf_counter() - started) * 1000)
    tracemalloc.start()
    operation()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"median_ms": statistics.median(times), "peak_mib": peak / 2**20}


def scale(repeats: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import override_settings

    from tslock_django.journal import status

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    found: dict[str, Any] = {}
    try:
        with override_settings(TSLOCK_JOURNAL={"using": "default"}):
            for runs, names in ((1_000, 100), (1_000_000, 10_000)):
                _fill(runs, names, scheduled=100)
                cells: dict[str, Any] = {
                    "history": _measure(lambda: status.runs("default", name=PROBE, limit=50), repeats),
                    "overdue (library)": _measure(lambda: status.statuses("default"), repeats),
                }
                for label, argv in (("tslock runs NAME", ["runs", PROBE]), ("tslock overdue", ["overdue"])):
                    try:
                        cells[label] = _measure(lambda argv=argv: _quiet(call_command, *argv), repeats)
                    except Exception as err:  # noqa: BLE001 - a subcommand this checkout lacks
                        cells[label] = {"error": f"{type(err).__name__}: {err}"[:200]}
                found[str(runs)] = cells
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    ratios = {}
    for label, cell in found["1000000"].items():
        small = found["1000"].get(label, {})
        if "median_ms" in cell and "median_ms" in small:
            ratios[label] = cell["median_ms"] / small["median_ms"]
    return {"sizes": found, "large_over_small": ratios}


def _quiet(call: Callable[..., object], *args: str) -> None:
    from io import StringIO

    with contextlib.suppress(SystemExit):  # overdue exits 1 when something is late
        call("tslock", *args, stdout=StringIO(), stderr=StringIO())


if __name__ == "__main__":
    what, repeats = sys.argv[1], int(sys.argv[2])
    result = startup(repeats) if what == "startup" else scale(repeats)
    print(json.dumps(result))
