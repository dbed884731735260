"""Listing at scale: the admin's Locks page and ``tslock list`` over a ``tslock_lock``
table of 1,000 to 1,000,000 rows (run in its own process, one database server).

Usage: ``BENCH_DB=postgres python -m bench.scalebench SIZES REPEATS`` prints one JSON
object; SIZES is a comma list such as ``1000,100000,1000000``, filled in that order.

The table is filled as a busy project fills it: names locked once per argument
(``import-<n>``, ``report-<n>`` ...), almost all of them long expired, and a fixed set of
500 current locks (400 held, 100 in their ``lock_at_least_for``) spread across the name
range, so a listing of current locks by name has to skip expired names. Rows are written
with the server's own bulk insert (``generate_series`` on PostgreSQL, batches of
``executemany`` elsewhere), then ``ANALYZE``d as autovacuum would.

Per size it measures, each as the median of REPEATS requests (server time through
``django.test.Client``, logged in as a superuser), plus the peak Python memory of one
more request of each (``tracemalloc``):

- the first page (current locks by name), a search, a provider filter, a sort
  (lock until, descending), the next page (the page's own "next" link), and a search
  over every state (expired included), which no index can serve (not a target);
- ``manage.py tslock list`` (current locks) and ``tslock list --all`` (every row) in a
  fresh process each, with its peak resident memory and wall time.
"""

from __future__ import annotations

import html
import json
import os
import re
import statistics
import subprocess
import sys
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import django

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("import", "report", "sync", "user", "invoice")
CURRENT = 500
AT_LEAST = 100
#: Current names are spread over the name range by this stride.
STRIDE = 1999
SEARCH = "-00042"


def main(sizes: list[int], repeats: int) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.DEBUG = False
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        from django.contrib.auth.models import User
        from django.test import Client

        user = User.objects.create_superuser("bench", "bench@example.com", "bench")
        client = Client()
        client.force_login(user)
        results: dict[str, Any] = {}
        expired_rows = 0
        fill_current(connection)
        for size in sizes:
            started = time.perf_counter()
            expired_rows = fill_expired(connection, expired_rows, size - CURRENT)
            analyze(connection)
            fill_s = time.perf_counter() - started
            results[str(size)] = {
                "rows": count(connection),
                "fill_s": round(fill_s, 1),
                "admin": admin_pages(client, repeats),
                "cli": {
                    "tslock list": cli_list(connection, []),
                    "tslock list --all": cli_list(connection, ["--all"]),
                },
            }
            print(f"scale: {connection.vendor} {size:,} rows done", file=sys.stderr, flush=True)
        return {
            "server": connection.vendor,
            "unit": "server time per request (ms, median); peak Python memory per request (KiB)",
            "current_locks": CURRENT,
            "results": results,
        }
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


# -- filling -----------------------------------------------------------------------------


def _text(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def fill_current(connection: Any) -> None:
    """The current locks: 400 held (with a token) and 100 released but at least held."""
    now = datetime.now(timezone.utc)
    rows = []
    for k in range(CURRENT):
        family = FAMILIES[k % len(FAMILIES)]
        name = f"{family}-{k * STRIDE:07}-now"
        locked_at = now - timedelta(seconds=k)
        lock_until = now + timedelta(hours=2, minutes=k)
        token = "" if k < AT_LEAST else f"{k:032x}"
        rows.append((name, lock_until, locked_at, f"web-{k % 7}:{1000 + k}", token, k + 1))
    insert(connection, rows)


def fill_expired(connection: Any, have: int, want: int) -> int:
    """Add expired rows ``have .. want - 1`` (names ``<family>-<n>``)."""
    if want <= have:
        return have
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO tslock_lock (name, lock_until, locked_at, locked_by, token, fencing_token)
                SELECT (ARRAY['import','report','sync','user','invoice'])[g %% 5 + 1]
                           || '-' || lpad(g::text, 7, '0'),
                       now() - (g %% 90 + 1) * INTERVAL '1 day' + INTERVAL '10 minutes',
                       now() - (g %% 90 + 1) * INTERVAL '1 day',
                       'worker-' || (g %% 16) || ':' || (g %% 30000), '', g %% 1000 + 1
                FROM generate_series(%s, %s) AS g
                """,
                [have, want - 1],
            )
        return want
    now = datetime.now(timezone.utc)
    batch: list[tuple[Any, ...]] = []
    for g in range(have, want):
        locked_at = now - timedelta(days=g % 90 + 1)
        name = f"{FAMILIES[g % 5]}-{g:07}"
        batch.append(
            (
                name,
                locked_at + timedelta(minutes=10),
                locked_at,
                f"worker-{g % 16}:{g % 30000}",
                "",
                g % 1000 + 1,
            )
        )
        if len(batch) == 5000:
            insert(connection, batch)
            batch = []
    insert(connection, batch)
    return want


def insert(connection: Any, rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    if connection.vendor == "sqlite":
        rows = [(n, _text(u), _text(a), by, tok, f) for n, u, a, by, tok, f in rows]
    elif connection.vendor == "mysql":
        rows = [
            (n, u.replace(tzinfo=None), a.replace(tzinfo=None), by, tok, f) for n, u, a, by, tok, f in rows
        ]
    from django.db import transaction

    # One transaction per batch: in autocommit SQLite would sync the file for every row.
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO tslock_lock (name, lock_until, locked_at, locked_by, token, fencing_token) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )


def analyze(connection: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tslock_lock" if connection.vendor != "sqlite" else "ANALYZE")


def count(connection: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM tslock_lock")
        return int(cursor.fetchone()[0])


# -- measuring -----------------------------------------------------------------------------


NEXT_LINK = re.compile(r'<a[^>]*\brel="next"[^>]*\bhref="([^"]+)"|<a[^>]*\bhref="([^"]+)"[^>]*\brel="next"')


def admin_pages(client: Any, repeats: int) -> dict[str, Any]:
    from django.urls import reverse

    url = reverse("admin:tslock_django_lock_changelist")
    first = client.get(url)
    found = NEXT_LINK.search(first.content.decode())
    if first.status_code != 200 or found is None:
        raise RuntimeError(f"the first page (HTTP {first.status_code}) has no rel=next link")
    next_href = html.unescape(found.group(1) or found.group(2))
    pages = {
        "first page": url,
        "search": f"{url}?q={SEARCH}",
        "provider filter": f"{url}?provider=default",
        "sort by lock until, descending": f"{url}?o=-lock_until",
        "next page": url + next_href if next_href.startswith("?") else next_href,
        "search, every state (no index)": f"{url}?q={SEARCH}&state=all",
    }
    measured: dict[str, Any] = {}
    for label, target in pages.items():
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            response = client.get(target)
            samples.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{label}: HTTP {response.status_code}")
        tracemalloc.start()
        tracemalloc.reset_peak()
        response = client.get(target)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        measured[label] = {
            "median_ms": round(statistics.median(samples), 2),
            "min_ms": round(min(samples), 2),
            "max_ms": round(max(samples), 2),
            "peak_kib": peak // 1024,
            "rows_shown": response.content.decode().count("<tr data-provider="),
        }
    return measured


def cli_list(connection: Any, extra: list[str]) -> dict[str, Any]:
    """``tslock list`` in a fresh process on this database; its peak RSS and wall time."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "BENCH_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bench.scalelist", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"tslock list {' '.join(extra)} failed:\n{done.stderr[-2000:]}")
    child = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 2), **child}


if __name__ == "__main__":
    print(json.dumps(main([int(s) for s in sys.argv[1].split(",")], int(sys.argv[2]))))
