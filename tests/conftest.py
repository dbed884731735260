"""Shared fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db.backends.signals import connection_created

from tslock_django.worker.runtime import LocalWorker

ROOT = Path(__file__).resolve().parent.parent
CI = bool(os.environ.get("CI"))
NO_NODE = "Node.js is not installed: the real Workers runtime (Miniflare/workerd) needs node >= 20"


def sqlite_without_fsync(sender: object, connection: Any, **kwargs: object) -> None:
    """Test databases need not survive a power cut: SQLite connections skip fsync (as the
    PostgreSQL alias in tests/settings.py commits without waiting for its WAL flush), which
    made each commit wait on the disk. Sent on the raw connection, so no query count sees it."""
    if connection.vendor == "sqlite":
        connection.connection.execute("PRAGMA synchronous = OFF")


connection_created.connect(sqlite_without_fsync)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress-size",
        choices=["ci", "large"],
        default="ci",
        help="size of the multi-process contention tests in tests/stress: ci (8 processes) or large (16)",
    )


#: The slowest test modules, slowest first (about 2 minutes for the benchmarks' quick run,
#: 25-80 s for the others in one process): under pytest-xdist they are handed out first
#: (make test passes --no-loadscope-reorder), so that no process is still running one of
#: them long after the other has finished everything else.
LONGEST_FIRST = (
    "tests/test_bench_smoke.py",
    "tests/contract/test_database.py",
    "tests/test_database_query.py",
    "tests/faults/test_worker_faults.py",
    "tests/redis/test_contract.py",
    "tests/worker/test_worker_shards.py",
    "tests/worker/test_worker_contract.py",
)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Under ``pytest -n N --dist loadgroup`` (make test), each test module is one unit of
    work that one process runs whole, unless its tests name an ``xdist_group`` of their
    own: module-scoped fixtures (a Workers runtime, a Redis server) then start once, as in
    a run in one process, and a module's tests keep their order. The marks go on before
    the other hooks run (xdist's reads them); the longest modules go first after them
    (pytest-django's puts the tests in Django's order)."""
    grouped = config.getoption("dist", "no") == "loadgroup"
    if grouped:
        for item in items:
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    yield
    if grouped:
        rank = {module: place for place, module in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def database_marks(alias: str, server: str) -> list[pytest.MarkDecorator]:
    """Marks for tests on one database server: transactional, and skipped with a reason
    when the server is absent (never under CI, where tests/settings.py always adds it)."""
    available = alias in settings.DATABASES
    return [
        pytest.mark.skipif(not available, reason=f"{server} is not reachable here (required when CI is set)"),
        pytest.mark.django_db(databases=[alias] if available else [], transaction=True),
    ]


def require_node() -> None:
    """Skip (with the reason) when Node.js is absent on a developer machine; under CI
    the runtime is required, so the start-up error is raised instead."""
    if shutil.which("node") is None and not CI:
        pytest.skip(reason=NO_NODE)


@pytest.fixture(scope="module")
def worker() -> Iterator[LocalWorker]:
    """The tslock Worker on the real Workers runtime, one per test module."""
    require_node()
    with LocalWorker() as running:
        yield running


def start_manage(database: Path, *args: str) -> subprocess.Popen[str]:
    """``manage.py ARGS`` of the demo project in a real process, on the SQLite file
    ``database`` with the database provider (what a cron job would run)."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL=f"sqlite:///{database}",
        TSLOCK_URL="db://default",
    )
    env.pop("TSLOCK_EDGE_URL", None)
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_manage(database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``start_manage`` to the end (two minutes at most)."""
    process = start_manage(database, *args)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
