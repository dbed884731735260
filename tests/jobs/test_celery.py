"""``locked_task`` under a real Celery worker (prefork, four processes) on a Redis that
the test starts: four copies of one task sent at once run the body once."""

from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CI, ROOT
from tests.redis.server import REDIS_SERVER, RedisServer

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("celery") is None and not CI,
        reason="celery is not installed (pip install --group test); required when CI is set",
    ),
    pytest.mark.skipif(
        REDIS_SERVER is None and not CI,
        reason="redis-server is not installed (apt-get install redis-server); required when CI is set",
    ),
]


CELERY = [sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app"]


def worker_env(database: Path, redis_url: str) -> dict[str, str]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.jobs.worker_settings",
        DATABASE_URL=f"sqlite:///{database}",
        TSLOCK_URL="db://default",
        TSLOCK_TEST_REDIS=redis_url,
        PYTHONPATH=str(ROOT),
    )
    env.pop("TSLOCK_EDGE_URL", None)
    return env


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path) as server:
        yield server


@pytest.fixture
def worker(tmp_path: Path, redis_server: RedisServer) -> Iterator[Path]:
    """A migrated SQLite journal, and a prefork worker of four processes on it."""
    from tests.jobs.celery_app import app

    database = tmp_path / "celery.sqlite3"
    env = worker_env(database, redis_server.url)
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    app.conf.update(broker_url=redis_server.url, result_backend=redis_server.url)
    log = tmp_path / "worker.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [*CELERY, "worker", "--pool=prefork", "--concurrency=4", "--loglevel=INFO", "--without-gossip"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not app.control.ping(timeout=0.5):
            assert process.poll() is None, f"the worker exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the worker did not answer:\n{log.read_text()}"
        yield database
    finally:
        process.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_four_copies_sent_at_once_run_the_body_once(worker: Path, tmp_path: Path) -> None:
    from tests.jobs.celery_app import once

    path = tmp_path / "ran"
    sent = [once.delay(str(path)) for _ in range(4)]
    results = [result.get(timeout=120) for result in sent]
    assert sorted(results, key=str) == [None, None, None, "ran"]
    assert path.read_text() == "ran\n"
    with sqlite3.connect(worker) as conn:
        query = "SELECT outcome, pid FROM tslock_run WHERE name = ?"
        rows = list(conn.execute(query, (f"celery-{path}",)))
    assert sorted(outcome for outcome, _ in rows) == ["skipped", "skipped", "skipped", "succeeded"]


def test_the_task_object_pickles_by_name_and_keeps_its_path() -> None:
    from tests.jobs.celery_app import once

    assert once.name == "tests.jobs.celery_app.once"
    restored = pickle.loads(pickle.dumps(once))
    assert restored.name == once.name and restored.run is once.run
    assert once.run.__module__ == "tests.jobs.celery_app" and once.run.__qualname__ == "once"
