"""``locked_task`` under django-tasks (the backport of Django's tasks framework): the
immediate backend in this process, and the database backend with two real ``db_worker``
processes working one queue."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.conftest import CI, ROOT
from tslock_django import LockConfiguration, providers
from tslock_django.journal.models import Run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("django_tasks") is None and not CI,
    reason="django-tasks is not installed (pip install --group test); required when CI is set",
)

IMMEDIATE = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}


@pytest.fixture
def immediate() -> Iterator[None]:
    with override_settings(TASKS=IMMEDIATE, TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):
        yield


@pytest.mark.django_db(transaction=True)
def test_the_immediate_backend_runs_the_body_then_skips_while_held(immediate: None, tmp_path: Path) -> None:
    from django_tasks import TaskResultStatus

    from tests.jobs.dt_tasks import report

    path = tmp_path / "ran"
    first = report.enqueue(str(path))
    assert first.status == TaskResultStatus.SUCCEEDED and first.return_value == "ran"
    # lock_at_least_for is ten minutes: the next copy in that period skips, and succeeds.
    second = report.enqueue(str(path))
    assert second.status == TaskResultStatus.SUCCEEDED and second.return_value is None
    assert path.read_text() == "ran\n"
    name = f"report-{path}"
    assert list(Run.objects.filter(name=name).order_by("id").values_list("outcome", flat=True)) == [
        "succeeded",
        "skipped",
    ]
    [record] = providers["default"].list_locks(prefix=name)
    assert record.released  # given back, kept for its at-least time
    assert providers["default"].lock(LockConfiguration(name, "1m")) is None


@pytest.mark.django_db(transaction=True)
def test_the_immediate_backend_runs_a_coroutine_task_under_its_lock(immediate: None, tmp_path: Path) -> None:
    from django_tasks import TaskResultStatus

    from tests.jobs.dt_tasks import async_report

    path = tmp_path / "ran"
    first = async_report.enqueue(str(path))
    second = async_report.enqueue(str(path))
    assert [first.status, second.status] == [TaskResultStatus.SUCCEEDED] * 2
    assert [first.return_value, second.return_value] == ["ran", None]
    assert path.read_text() == "ran\n"
    outcomes = (
        Run.objects.filter(name=f"async-report-{path}").order_by("id").values_list("outcome", flat=True)
    )
    assert list(outcomes) == ["succeeded", "skipped"]


def worker_env(database: Path) -> dict[str, str]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.jobs.worker_settings",
        DATABASE_URL=f"sqlite:///{database}",
        TSLOCK_URL="db://default",
        PYTHONPATH=str(ROOT),
    )
    env.pop("TSLOCK_EDGE_URL", None)
    return env


def python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_two_db_workers_run_the_body_once_per_lock_period(tmp_path: Path) -> None:
    database, path = tmp_path / "tasks.sqlite3", tmp_path / "ran"
    env = worker_env(database)
    migrated = python(env, "manage.py", "migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    copies = 6
    enqueued = python(
        env,
        "-c",
        "import django; django.setup()\n"
        "from tests.jobs.dt_tasks import report\n"
        f"for _ in range({copies}): report.enqueue({str(path)!r}, seconds=0.3)\n",
    )
    assert enqueued.returncode == 0, enqueued.stderr
    # --batch: each worker takes tasks until the queue is empty, then exits.
    command = [sys.executable, "manage.py", "db_worker", "--batch", "--interval", "0.05"]
    command.append("--no-startup-delay")
    workers = [
        subprocess.Popen(
            [*command, "--worker-id", f"worker-{n}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in (1, 2)
    ]
    logs = [worker.communicate(timeout=300)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], logs
    with sqlite3.connect(database) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM django_tasks_database_dbtaskresult")]
        query = "SELECT outcome FROM tslock_run WHERE name = ? ORDER BY id"
        runs = [row[0] for row in conn.execute(query, (f"report-{path}",))]
    assert statuses == ["SUCCEEDED"] * copies, logs
    assert path.read_text() == "ran\n", "the body ran more than once in one lock period"
    assert sorted(runs) == ["skipped"] * (copies - 1) + ["succeeded"]
