"""The run journal's costs.

``python -m bench.journalbench startup REPEATS``: wall time of ``python -m django
bench_locked`` (an empty locked command) with the journal on against the same with it
off, alternating, on SQLite and on PostgreSQL (each a migrated database of its own).

``BENCH_DB=postgres python -m bench.journalbench scale REPEATS``: the journal's reads at
1,000 runs (100 names, 10 runs each) and at 1,000,000 runs (10,000 names, 100 runs each):
a name's history, ``tslock runs NAME``, the Runs page's first page and a name's history
page, and ``tslock overdue``, with the median time and the peak Python memory of each;
and a run's two journal writes (its start and its end) for a name with 100 runs against
the same for a name with 1,000,000 (one name in the table).
Each read is compared with a small table where it shows as much as in the large one (a
history of 100 runs; a first page of 100 names); 10 names are scheduled in every table.

Each prints one JSON line.
"""

from __future__ import annotations

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
            "SELECT 'job-' || (i %% %s), 'default', CASE WHEN i %% 7 = 0 THEN 'failed' ELSE 'succeeded' END, "
            "now() - (i * interval '1 second'), now() - (i * interval '1 second') + interval '1 second', "
            "1.0, 'host', 1, 'host:1', i, '', '', NULL FROM generate_series(1, %s) AS i",
            [names, per_name * names],
        )
        cursor.execute(
            "INSERT INTO tslock_job (name, provider, first_seen_at, schedule, grace, last_run_id, "
            "last_outcome, last_started_at, last_finished_at, last_duration, last_detail, last_success_at, "
            "last_success_run_id, last_attempt_outcome, runs_succeeded, runs_failed, runs_skipped, "
            "runs_error, runs_lost, notified_status) "
            "SELECT name, 'default', min(started_at), '', NULL, max(id), 'succeeded', max(started_at), "
            "max(finished_at), 1.0, '', max(started_at), max(id), '', count(*), 0, 0, 0, 0, '' "
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

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import override_settings

    from tslock_django.journal import status

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    found: dict[str, Any] = {}
    try:
        from django.contrib.auth import get_user_model
        from django.test import Client
        from django.urls import reverse

        admin = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench")
        browser = Client()
        browser.force_login(admin)
        pages = {
            "first": reverse("admin:tslock_django_job_changelist"),
            "history": reverse("admin:tslock_django_job_history") + f"?name={PROBE}",
        }

        def get(url: str) -> None:
            response = browser.get(url)
            assert response.status_code == 200, response.status_code

        with override_settings(TSLOCK_JOURNAL={"using": "default"}, ALLOWED_HOSTS=["testserver"]):
            # What each read shows must be the same size in both: a name's history shows
            # 100 runs (so at 1,000 runs there are 10 names), the Runs page 100 names (so
            # at 1,000 runs each has 10). The large table holds both: 10,000 names x 100.
            reads: dict[str, tuple[str, Callable[[], object]]] = {
                "history": ("names", lambda: status.runs("default", name=PROBE, limit=50)),
                "tslock runs NAME": ("names", lambda: _quiet(call_command, "runs", PROBE)),
                "Runs page, a name's history": ("names", lambda: get(pages["history"])),
                "overdue (library)": ("rows", lambda: status.statuses("default")),
                "tslock overdue": ("rows", lambda: _quiet(call_command, "overdue")),
                "Runs page, first page": ("rows", lambda: get(pages["first"])),
            }
            for size, runs, names in (
                ("1k runs of 10 names", 1_000, 10),
                ("1k runs of 100 names", 1_000, 100),
                ("1M runs of 10,000 names", 1_000_000, 10_000),
                ("1M runs of one name", 1_000_000, 1),
            ):
                _fill(runs, names, scheduled=10)
                kind = {10: "names", 100: "rows", 1: "writes"}.get(names)
                found[size] = {
                    label: _measure(read, repeats)
                    for label, (needs, read) in reads.items()
                    if kind is None or needs == kind
                }
                if names in (10, 1):  # a name with 100 runs, and one with 1,000,000
                    found[size][WRITES] = _measure(_write_a_run, repeats)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    large = {**found["1M runs of 10,000 names"], **found["1M runs of one name"]}
    small = {**found["1k runs of 10 names"], **found["1k runs of 100 names"]}
    ratios = {label: cell["median_ms"] / small[label]["median_ms"] for label, cell in large.items()}
    return {"sizes": found, "large_over_small": ratios}


#: The label of a run's two journal writes in the scale report.
WRITES = "a run's two journal writes"


def _write_a_run() -> None:
    """The start and the end of one run of ``job-0`` through the journal's recorder
    (the name is in every table the scale run fills)."""
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from tslock_django.journal.recorder import RunRecorder

    until = datetime.now(timezone.utc) + timedelta(minutes=1)
    held = SimpleNamespace(
        name="job-0", fencing_token=1, record=SimpleNamespace(lock_until=until, locked_by="bench")
    )
    recorder = RunRecorder("job-0", "default", "default")
    recorder.started(held)
    recorder.finished()
    assert not recorder.missed


def _quiet(call: Callable[..., object], *args: str) -> None:
    from io import StringIO

    from django.core.management.base import CommandError

    try:
        call("tslock", *args, stdout=StringIO(), stderr=StringIO())
    except CommandError as err:
        if err.returncode != 1:  # overdue says 1 when something is late: an answer, not a failure
            raise


if __name__ == "__main__":
    what, repeats = sys.argv[1], int(sys.argv[2])
    result = startup(repeats) if what == "startup" else scale(repeats)
    print(json.dumps(result))
