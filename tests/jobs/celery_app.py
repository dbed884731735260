"""A Celery app for the worker of tests/jobs/test_celery.py; its broker and result
backend are the Redis that the test starts (``TSLOCK_TEST_REDIS``)."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from tslock_django import locked_task

# Celery's Django fix-up sets Django up in the worker (and closes connections across
# forks) when this names the settings.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.jobs.worker_settings")

app = Celery("tests.jobs")
app.conf.update(
    broker_url=os.environ.get("TSLOCK_TEST_REDIS", "redis://127.0.0.1:9/0"),
    result_backend=os.environ.get("TSLOCK_TEST_REDIS", "redis://127.0.0.1:9/0"),
    broker_connection_retry_on_startup=True,
    # One task per pool process at a time: four copies go to four processes at once.
    worker_prefetch_multiplier=1,
)
if os.environ.get("TSLOCK_BENCH_DB_REUSE"):
    # Celery's Django fix-up closes the worker's database connections before and after
    # every task unless this is set; the benchmark keeps them, as a tuned worker does,
    # to time locked_task's writes rather than a new connection per task.
    app.conf.CELERY_DB_REUSE_MAX = int(os.environ["TSLOCK_BENCH_DB_REUSE"])


@app.task
@locked_task("1m", "1m", name="celery-{path}")
def once(path: str, seconds: float = 1.0) -> str:
    """Sleeps under the lock, then notes that it ran."""
    time.sleep(seconds)
    with open(path, "a") as file:
        file.write("ran\n")
    return "ran"


@app.task
def plain(path: str, seconds: float = 0.0) -> str:
    """The same body without the lock (the benchmark's baseline)."""
    time.sleep(seconds)
    return "ran"


@app.task
@locked_task("1m", name="celery-locked-{path}")
def locked(path: str, seconds: float = 0.0) -> str:
    """``plain`` under ``locked_task`` (the benchmark's subject)."""
    time.sleep(seconds)
    return "ran"


_floor_client: Any = None


@app.task
def raw_locked(path: str, seconds: float = 0.0) -> str:
    """``plain`` under the cheapest lock a task can take in Redis: ``SET NX PX`` and a
    compare-and-delete script, on a kept redis-py client of ``TSLOCK_URL`` (the
    benchmark's floor for ``locked``; no record, no fencing token, no journal)."""
    global _floor_client
    if _floor_client is None:
        import redis

        client = redis.Redis.from_url(os.environ["TSLOCK_URL"])
        release = client.register_script(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
        )
        _floor_client = (client, release)
    client, release = _floor_client
    key, token = f"floor-{path}", os.urandom(8).hex()
    if not client.set(key, token, nx=True, px=60_000):
        return "skipped"
    try:
        time.sleep(seconds)
    finally:
        release(keys=[key], args=[token])
    return "ran"
