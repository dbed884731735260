"""Import cost of tslock_django and start-up of a decorated command against an
undecorated one (real ``python -m django`` processes, alternating)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import percentile

ROOT = Path(__file__).resolve().parent.parent
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)")


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "bench.settings", **extra}
    for name in ("BENCH_PROVIDER", "BENCH_EDGE_URL", "TSLOCK_URL", "TSLOCK_EDGE_URL"):
        if name not in extra:
            env.pop(name, None)
    return env


def import_time(repeats: int) -> dict[str, Any]:
    """Cumulative microseconds of ``import tslock_django`` (Django included, as it is
    imported by it), from ``python -X importtime``; the median of ``repeats`` runs."""
    totals = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import tslock_django"],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        cumulative = [int(m[1]) for m in _IMPORT_LINE.findall(done.stderr) if m[2] == "tslock_django"]
        totals.append(cumulative[-1])
    return {
        "median_us": statistics.median(totals),
        "min_us": min(totals),
        "max_us": max(totals),
        "runs": repeats,
    }


def httpx_imported() -> dict[str, bool]:
    """Whether httpx ends up in ``sys.modules``: with only the database provider (after
    building it and running a decorated command), and with a Durable Object provider."""
    probe = (
        "import sys, django; django.setup()\n"
        "from django.core.management import call_command\n"
        "from tslock_django import providers\n"
        "providers['default']\n"
        "call_command('bench_locked')\n"
        "if 'edge' in providers: providers['edge']\n"
        "print('HTTPX', 'httpx' in sys.modules)\n"
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = _migrated_sqlite(Path(tmp))
        for label, extra in {
            "database provider only": {},
            "with a cloudflare-do provider": {"BENCH_EDGE_URL": "cloudflare-do+http://t@127.0.0.1:9/"},
        }.items():
            done = subprocess.run(
                [sys.executable, "-c", probe],
                cwd=ROOT,
                env=_env(BENCH_SQLITE_NAME=str(db), **extra),
                capture_output=True,
                text=True,
                check=True,
            )
            results[label] = done.stdout.strip().endswith("HTTPX True")
    return results


def redis_imported() -> bool:
    """Whether redis-py ends up in ``sys.modules`` with only the database provider
    configured (after building it and running a decorated command)."""
    probe = (
        "import sys, django; django.setup()\n"
        "from django.core.management import call_command\n"
        "from tslock_django import providers\n"
        "providers['default']\n"
        "call_command('bench_locked')\n"
        "print('REDIS', 'redis' in sys.modules)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env=_env(BENCH_SQLITE_NAME=str(_migrated_sqlite(Path(tmp)))),
            capture_output=True,
            text=True,
            check=True,
        )
    return done.stdout.strip().endswith("REDIS True")


def _migrated_sqlite(folder: Path) -> Path:
    db = folder / "startup.sqlite3"
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=_env(BENCH_SQLITE_NAME=str(db)),
        check=True,
    )
    return db


def command_startup(repeats: int) -> dict[str, Any]:
    """Wall time of ``python -m django bench_plain`` and ``bench_locked`` (SQLite
    database provider), alternating, ``repeats`` each."""
    samples: dict[str, list[float]] = {"bench_plain": [], "bench_locked": []}
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(BENCH_SQLITE_NAME=str(_migrated_sqlite(Path(tmp))))
        for i in range(repeats):
            order = ["bench_plain", "bench_locked"] if i % 2 == 0 else ["bench_locked", "bench_plain"]
            for command in order:
                started = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "django", command],
                    cwd=ROOT,
                    env=env,
                    check=True,
                    capture_output=True,
                )
                samples[command].append((time.perf_counter() - started) * 1000)
    summary = {
        name: {
            "median_ms": statistics.median(values),
            "p10_ms": percentile(values, 0.1),
            "p90_ms": percentile(values, 0.9),
            "runs": len(values),
        }
        for name, values in samples.items()
    }
    summary["decorated_minus_plain_ms"] = (
        summary["bench_locked"]["median_ms"] - summary["bench_plain"]["median_ms"]
    )
    summary["decorated_over_plain"] = (
        summary["bench_locked"]["median_ms"] / summary["bench_plain"]["median_ms"]
    )
    return summary


#: Every kind of store beside the database: what a project using all of them configures.
_EVERY_KIND = {
    "default": {"BACKEND": "tslock_django.providers.database.DatabaseLockProvider"},
    "edge": {
        "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
        "OPTIONS": {"url": "https://locks.example.com", "token": "t" * 32},
    },
    "kv": {
        "BACKEND": "tslock_django.providers.cloudflare_kv.KVLockProvider",
        "OPTIONS": {
            "account_id": "a" * 32,
            "namespace_id": "b" * 32,
            "api_token": "c" * 40,
            "acknowledge_advisory_lock": True,
        },
    },
    "redis": {
        "BACKEND": "tslock_django.providers.redis.RedisLockProvider",
        "OPTIONS": {"url": "redis://127.0.0.1:6379/0"},
    },
}

# Runs in a fresh process: Django set up as a command start does, then tslock's checks
# that every command start runs (not the deploy or database ones), timed alone.
_CHECKS_PROBE = """
import json, sys, time, django
from django.conf import settings
django.setup()
if sys.argv[1] != "-":
    settings.TSLOCK_PROVIDERS = json.loads(sys.argv[1])
from django.core.checks.registry import registry
ours = [c for c in registry.get_checks(include_deployment_checks=False)
        if c.__module__ == "tslock_django.checks" and "database" not in getattr(c, "tags", ())]
started = time.perf_counter()
found = [m for check in ours for m in check(app_configs=None, databases=None)]
elapsed = time.perf_counter() - started
assert not found, found
print(json.dumps({"ms": elapsed * 1000, "checks": len(ours)}))
"""


def checks_time(repeats: int) -> dict[str, Any]:
    """Milliseconds that tslock's system checks add to a command's start (in a fresh
    process each time, bytecode cached), with the database provider only and with every
    kind of store configured; the median of ``repeats`` processes each."""
    found: dict[str, Any] = {}
    for label, providers in (("database provider only", None), ("every kind of store", _EVERY_KIND)):
        argument = "-" if providers is None else json.dumps(providers)
        env = {k: v for k, v in _env().items() if k != "PYTHONDONTWRITEBYTECODE"}
        values = []
        for _ in range(repeats + 1):
            done = subprocess.run(
                [sys.executable, "-c", _CHECKS_PROBE, argument],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            values.append(json.loads(done.stdout.strip().splitlines()[-1])["ms"])
        values = values[1:]  # the first run may have written the bytecode cache
        found[label] = {
            "median_ms": statistics.median(values),
            "p10_ms": percentile(values, 0.1),
            "p90_ms": percentile(values, 0.9),
            "runs": len(values),
        }
    return found


class _AnswerServer:
    """A local server answering every request ``200 OK`` (healthchecks pings, webhook
    posts), counting them: the monitors and alerts of the start-up benchmark."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        counted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                counted.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def monitored_startup(repeats: int) -> dict[str, Any]:
    """Wall time of the scheduled ``bench_locked`` command (SQLite, the journal on) with
    ``TSLOCK_MONITORS`` (healthchecks) and ``TSLOCK_ALERTS`` (a webhook) pointing at a
    local server, and without them, alternating, ``repeats`` each; the ratio of the
    medians. The process's time includes its pings going out at exit."""
    samples: dict[str, list[float]] = {"without": [], "with": []}
    server = _AnswerServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = _env(BENCH_SQLITE_NAME=str(_migrated_sqlite(Path(tmp))), BENCH_SCHEDULED="on")
            envs = {"without": base, "with": {**base, "BENCH_MONITORS_URL": server.url}}
            for i in range(repeats + 1):
                order = ["without", "with"] if i % 2 == 0 else ["with", "without"]
                for label in order:
                    started = time.perf_counter()
                    subprocess.run(
                        [sys.executable, "-m", "django", "bench_locked"],
                        cwd=ROOT,
                        env=envs[label],
                        check=True,
                        capture_output=True,
                    )
                    if i:  # the first pair warms the bytecode cache and the disk
                        samples[label].append((time.perf_counter() - started) * 1000)
    finally:
        server.close()
    summary: dict[str, Any] = {
        label: {
            "median_ms": statistics.median(values),
            "p10_ms": percentile(values, 0.1),
            "p90_ms": percentile(values, 0.9),
            "runs": len(values),
        }
        for label, values in samples.items()
    }
    summary["requests_received"] = server.requests
    summary["with_over_without"] = summary["with"]["median_ms"] / summary["without"]["median_ms"]
    return summary
