"""A django-tasks task under ``@locked_task``, for the immediate backend in-process and
for ``db_worker`` processes (tests/jobs/worker_settings.py)."""

from __future__ import annotations

import time

from django_tasks import task

from tslock_django import locked_task


# lock_at_least_for well beyond the test: every copy enqueued together falls in one
# lock period, whichever worker takes it and however fast the body is.
@task()
@locked_task("10m", "10m", name="report-{path}")
def report(path: str, seconds: float = 0.0) -> str:
    time.sleep(seconds)
    with open(path, "a") as file:
        file.write("ran\n")
    return "ran"


@task()
@locked_task("10m", "10m", name="async-report-{path}")
async def async_report(path: str) -> str:
    """``report`` as a coroutine function, which django-tasks runs on an event loop."""
    with open(path, "a") as file:
        file.write("ran\n")
    return "ran"
