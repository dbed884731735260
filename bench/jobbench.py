"""What the doors of issue 21 cost: ``tslock run -- true`` against ``manage.py`` running an
empty locked command (real processes, alternating), and a Celery task's round trip (send
to result) with and without ``locked_task`` (a real prefork worker on a Redis of its own).

``tslock run`` and the locked command use the SQLite database provider with the journal on,
as a project would by default; the Celery pair runs in six setups (``CELERY_SETUPS``: the
database or the Redis provider, the journal on or off, the project's database an SQLite
file or PostgreSQL), to show which part costs what. Where the lock is in Redis, a third
contender takes the cheapest lock a task can take there (``raw_locked``): the floor that
no lock in that store can go under.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.startup import _env, _migrated_sqlite
from bench.stats import percentile, target

ROOT = Path(__file__).resolve().parent.parent


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(values),
        "p10_ms": percentile(values, 0.1),
        "p90_ms": percentile(values, 0.9),
        "runs": len(values),
    }


def _alternate(contenders: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """Milliseconds of each contender, alternating which goes first."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            contenders[name]()
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def run_startup(repeats: int) -> dict[str, Any]:
    """``python -m django tslock run NAME --at-most-for 1m -- true`` against
    ``python -m django bench_locked`` (an empty ``@locked_command``)."""
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(BENCH_SQLITE_NAME=str(_migrated_sqlite(Path(tmp))))

        def django(*args: str) -> Callable[[], None]:
            return lambda: (
                subprocess.run(
                    [sys.executable, "-m", "django", *args],
                    cwd=ROOT,
                    env=env,
                    check=True,
                    capture_output=True,
                )
                and None
            )

        samples = _alternate(
            {
                "locked command": django("bench_locked"),
                "tslock run -- true": django("tslock", "run", "bench-run", "--at-most-for", "1m", "--", true),
            },
            repeats,
        )
    found: dict[str, Any] = {name: _summary(values) for name, values in samples.items()}
    run_ms, command_ms = found["tslock run -- true"]["median_ms"], found["locked command"]["median_ms"]
    found["run_over_command"] = run_ms / command_ms
    return found


#: The stores a Celery worker may lock in, each with and without the journal: the journal's
#: two commits per run are most of what ``locked_task`` costs on a fast broker.
#: Label: (the lock store, the journal on or off, the project's database).
CELERY_SETUPS = {
    "database provider (SQLite), journal on": ("db://default", "on", "sqlite"),
    "database provider (SQLite), journal off": ("db://default", "off", "sqlite"),
    "database provider (PostgreSQL), journal on": ("db://default", "on", "postgres"),
    "Redis provider, journal on (SQLite)": ("redis", "on", "sqlite"),
    "Redis provider, journal on (PostgreSQL)": ("redis", "on", "postgres"),
    "Redis provider, journal off": ("redis", "off", "sqlite"),
}
#: The PostgreSQL database the PostgreSQL setups create, migrate and drop (one per bench
#: process, so that two runs at once, such as CI's smoke run beside a developer's, never share it).
CELERY_POSTGRES = f"tslock_bench_celery_{os.getpid()}"


def run_celery(round_trips: int) -> dict[str, Any]:
    """``run_celery_with`` for each of ``CELERY_SETUPS``, on one Redis (the broker, the
    result backend and, where a setup says so, the lock store)."""
    from tests.redis.server import RedisServer

    postgres = _postgres_reachable()
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as redis_server:
        return {
            label: run_celery_with(redis_server.url, url, journal, round_trips, database=database)
            for label, (url, journal, database) in CELERY_SETUPS.items()
            if database == "sqlite" or postgres
        }


def _postgres_reachable() -> bool:
    """Whether PostgreSQL answers on 127.0.0.1:5432 (as bench.__main__.reachable checks; not
    imported from there, since bench.__main__ imports this module: tests/test_layout.py
    forbids the circle)."""
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return True
    except OSError:
        return False


def _postgres(action: str) -> None:
    """Create or drop the PostgreSQL setups' database (``action``: ``CREATE``/``DROP``)."""
    import psycopg

    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {CELERY_POSTGRES} WITH (FORCE)")
        if action == "CREATE":
            conn.execute(f"CREATE DATABASE {CELERY_POSTGRES}")


def run_celery_with(
    redis_url: str, lock_url: str, journal: str, round_trips: int, *, database: str = "sqlite"
) -> dict[str, Any]:
    """Median milliseconds from ``delay()`` to ``get()`` of one task, alone and under
    ``locked_task`` (a new lock each call: ``lock_at_least_for`` 0), in alternating
    batches of ten, one prefork worker process so calls never overlap; the project's
    database (the journal's, and the database provider's) on an SQLite file or on
    PostgreSQL."""
    from tests.jobs.celery_app import app, locked, plain, raw_locked

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if database == "postgres":
            _postgres("CREATE")
            database_url = f"postgres://postgres@127.0.0.1:5432/{CELERY_POSTGRES}"
        else:
            database_url = f"sqlite:///{folder / 'celery.sqlite3'}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.jobs.worker_settings",
            "DATABASE_URL": database_url,
            "TSLOCK_URL": redis_url if lock_url == "redis" else lock_url,
            "TSLOCK_BENCH_JOURNAL": journal,
            "TSLOCK_TEST_REDIS": redis_url,
            "TSLOCK_BENCH_DB_REUSE": "1000",
        }
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        app.conf.update(broker_url=redis_url, result_backend=redis_url)
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app", "worker", "--pool=prefork",
             "--concurrency=1", "--loglevel=WARNING", "--without-gossip"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not app.control.ping(timeout=0.5):
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Celery worker did not start")
            key = str(folder / "k")

            def trips(task: Any) -> Callable[[], None]:
                def go() -> None:
                    for _ in range(10):
                        assert task.delay(key).get(timeout=60) == "ran"

                return go

            contenders = {"plain task": trips(plain), "under locked_task": trips(locked)}
            if lock_url == "redis":
                # The floor: the cheapest lock a task can take in the same Redis.
                contenders["under a raw Redis lock"] = trips(raw_locked)
            for _ in range(3):  # warm up connections and imports on both sides
                for warm in contenders.values():
                    warm()
            batches = _alternate(contenders, max(1, round_trips // 10))
        finally:
            worker.terminate()
            worker.wait(timeout=60)
            if database == "postgres":
                _postgres("DROP")
    found: dict[str, Any] = {name: _summary([v / 10 for v in values]) for name, values in batches.items()}
    found["locked_over_plain"] = found["under locked_task"]["median_ms"] / found["plain task"]["median_ms"]
    floor = found.get("under a raw Redis lock")
    if floor is not None:
        found["floor_over_plain"] = floor["median_ms"] / found["plain task"]["median_ms"]
        found["locked_over_floor"] = found["under locked_task"]["median_ms"] / floor["median_ms"]
    return found


def run(quick: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"startup": run_startup(3 if quick else 15)}
    if importlib.util.find_spec("celery") is None or shutil.which("redis-server") is None:
        report["celery"] = None
    else:
        report["celery"] = run_celery(20 if quick else 200)
    return report


def targets(report: dict[str, Any] | None) -> dict[str, Any]:
    if not report:
        return {}
    found = {
        "tslock run -- true <= 1.1x manage.py running an empty locked command": target(
            report["startup"]["run_over_command"], 1.1, "<="
        )
    }
    for setup, cell in (report.get("celery") or {}).items():
        found[f"locked_task adds <= 1.05x to a Celery task's round trip ({setup})"] = target(
            cell["locked_over_plain"], 1.05, "<="
        )
    # Issue 33: against the raw Redis lock on the same broker, the journal off.
    floor_cell = (report.get("celery") or {}).get("Redis provider, journal off")
    if floor_cell and "locked_over_floor" in floor_cell:
        found["locked_task round trip <= 1.1x the same task under a raw Redis lock (journal off)"] = target(
            floor_cell["locked_over_floor"], 1.1, "<="
        )
    return found


def render(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return []
    lines = ["", "job runners: ms per run (median, p10-p90)"]
    for name, r in report["startup"].items():
        if isinstance(r, dict):
            lines.append(f"  {name:<28} {r['median_ms']:>8.1f} ms  ({r['p10_ms']:.1f}-{r['p90_ms']:.1f})")
    lines.append(f"  tslock run / locked command: {report['startup']['run_over_command']:.3f}x")
    for setup, celery in (report.get("celery") or {}).items():
        lines.append(f"  Celery round trip, send to result; {setup}:")
        for name, r in celery.items():
            if isinstance(r, dict):
                spread = f"({r['p10_ms']:.2f}-{r['p90_ms']:.2f})"
                lines.append(f"    {name:<26} {r['median_ms']:>8.2f} ms  {spread}")
        lines.append(f"    locked_task / plain: {celery['locked_over_plain']:.3f}x")
        if "floor_over_plain" in celery:
            lines.append(f"    raw Redis lock / plain (the floor): {celery['floor_over_plain']:.3f}x")
            lines.append(f"    locked_task / raw Redis lock: {celery['locked_over_floor']:.3f}x")
    return lines
