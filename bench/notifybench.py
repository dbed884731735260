"""``tslock overdue --notify`` as scheduled names grow (issue 34).

``BENCH_DB=postgres python -m bench.notifybench SIZES REPEATS``: for each number of
names in ``SIZES`` (e.g. ``100,10000``), a journal whose names follow the
``sync-{account_id}`` pattern (hourly, one in 1,000 failing, the rest on time), a
webhook channel to a local receiver, one unmeasured ``overdue --notify`` that records
and sends the failing names' changes, then the median time of ``manage.py tslock
overdue --notify`` as cron runs it (a process of its own: the target's measure), and of
the same command in this process (evaluation and listing without Python's and Django's
start, reported beside it). The largest size is compared with the smallest.

Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any

from bench.metricsbench import _fill
from bench.stats import target


@contextmanager
def _receiver() -> Iterator[tuple[str, list[int]]]:
    """A webhook receiver on 127.0.0.1 answering 204; yields its URL and a count."""
    received = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received[0] += 1
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def _overdue_notify() -> int:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    try:
        call_command("tslock", "overdue", "--notify", stdout=StringIO(), stderr=StringIO())
    except CommandError as err:
        return err.returncode
    return 0


def _process_ms(base: str, database: str) -> float:
    """One ``manage.py tslock overdue --notify`` in a process of its own on ``database``,
    with bench/settings.py's webhook channel at ``base`` (the one this process uses)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "BENCH_DB_NAME": database,
        "BENCH_MONITORS_URL": base,
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "tslock", "overdue", "--notify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode not in (0, 1):
        raise RuntimeError(f"overdue --notify exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def run(sizes: list[int], repeats: int) -> dict[str, Any]:
    import django

    # bench/settings.py, whatever the parent's environment says (the jobs section's Celery
    # app sets another in the parent): the processes timed below use it too.
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    django.setup()
    from django.db import connection
    from django.test.utils import override_settings

    from tslock_django.journal.models import Notification

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    found: dict[str, Any] = {}
    try:
        with _receiver() as (base, received):
            # bench/settings.py's channel, as the processes below configure it (one key).
            webhook = {
                "BACKEND": "tslock_django.alerts.WebhookChannel",
                "OPTIONS": {"url": base + "/webhook"},
            }
            alerts = {"channels": [webhook]}
            with override_settings(
                TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=None, TSLOCK_ALERTS=alerts
            ):
                for names in sizes:
                    Notification.objects.all().delete()
                    _fill(names)
                    before = received[0]
                    status = _overdue_notify()  # records and sends the failing names' changes
                    sent = received[0] - before
                    times, processes = [], []
                    for _ in range(repeats):
                        started = time.perf_counter()
                        _overdue_notify()
                        times.append((time.perf_counter() - started) * 1000)
                        processes.append(_process_ms(base, connection.settings_dict["NAME"]))
                    found[str(names)] = {
                        "process_ms": statistics.median(processes),
                        "in_process_ms": statistics.median(times),
                        "exit_status": status,
                        "notifications_sent": sent,
                        "sent_again": received[0] - before - sent,
                    }
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    small, large = found[str(min(sizes))], found[str(max(sizes))]
    return {
        "sizes": found,
        "repeats": repeats,
        "large_over_small": large["process_ms"] / small["process_ms"],
        "in_process_large_over_small": large["in_process_ms"] / small["in_process_ms"],
    }


def targets(report: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 34: with the largest number of names, at most 2x the time with the smallest."""
    found: dict[str, Any] = {}
    for server, data in (report or {}).items():
        sizes = sorted(data["sizes"], key=int)
        small, large = f"{int(sizes[0]):,}", f"{int(sizes[-1]):,}"
        found[f"alerts: overdue --notify with {large} scheduled names <= 2x with {small} ({server})"] = (
            target(data["large_over_small"], 2, "<=")
        )
    return found


def render(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return []
    lines = ["", "tslock overdue --notify by scheduled names (median ms: as a process; in process)"]
    for server, data in report.items():
        for size, cell in data["sizes"].items():
            lines.append(
                f"  {server:<9} {int(size):>7,} names  {cell['process_ms']:>8.1f} ms  "
                f"{cell['in_process_ms']:>7.2f} ms  "
                f"({cell['notifications_sent']} sent at the first evaluation, {cell['sent_again']} again)"
            )
        lines.append(
            f"  {server:<9} largest / smallest: {data['large_over_small']:.2f}x as a process, "
            f"{data['in_process_large_over_small']:.2f}x in process"
        )
    return lines


if __name__ == "__main__":
    chosen = [int(size) for size in sys.argv[1].split(",")]
    print(json.dumps(run(chosen, int(sys.argv[2]))))
