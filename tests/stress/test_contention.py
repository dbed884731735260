"""N real processes contend for one lock: at most one holder at a time, fencing tokens
grow in acquisition order, every round ran or skipped and nothing hung."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.conftest import database_marks
from tslock_django.worker.runtime import LocalWorker

from .conftest import StressSize

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.stress

#: Each holder keeps the lock this long, so that others meet it held.
HOLD_S = 0.004
#: No process may take longer than this (start-up of Django included).
PROCESS_TIMEOUT_S = 90


def contend(
    tmp_path: Path, size: StressSize, spec: dict[str, Any]
) -> tuple[list[dict[str, int]], list[tuple[int, ...]]]:
    """Start ``size.processes`` holders, release them at once, collect their outcomes."""
    log, go = tmp_path / "holders.log", tmp_path / "go"
    spec = {
        **spec,
        "name": f"stress-{uuid.uuid4().hex[:8]}",
        "rounds": size.rounds,
        "hold_s": HOLD_S,
        "log": str(log),
        "go": str(go),
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.stress.holder", json.dumps(spec)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(size.processes)
    ]
    go.touch()
    outcomes = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
            assert process.returncode == 0, f"a holder failed (status {process.returncode}):\n{err[-2000:]}"
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    entries = [tuple(int(field) for field in line.split()) for line in log.read_text().splitlines()]
    return outcomes, entries


def assert_one_holder_at_a_time(
    size: StressSize, outcomes: list[dict[str, int]], entries: list[tuple[int, ...]]
) -> None:
    assert len(outcomes) == size.processes
    for outcome in outcomes:
        assert outcome["ran"] + outcome["skipped"] == size.rounds, outcome
    assert sum(o["ran"] for o in outcomes) == len(entries), "every run left exactly one log line"
    assert sum(o["skipped"] for o in outcomes) > 0, "the processes never met the lock held: no contention"
    ordered = sorted(entries, key=lambda e: e[2])
    for before, after in itertools.pairwise(ordered):
        _pid_a, fencing_a, _start_a, end_a = before
        _pid_b, fencing_b, start_b, _end_b = after
        assert start_b >= end_a, f"holders overlap: {before} and {after} (pid, fencing, start, end)"
        assert fencing_b > fencing_a, f"fencing tokens do not grow in acquisition order: {before}, {after}"


def database_spec(alias: str) -> dict[str, Any]:
    settings = connections[alias].settings_dict
    keys = ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
    return {"kind": "db", "database": {k: settings[k] for k in keys if k in settings}}


@pytest.mark.parametrize(
    ("alias", "server"),
    [
        pytest.param("default", "SQLite", marks=database_marks("default", "SQLite"), id="sqlite"),
        pytest.param("postgres", "PostgreSQL", marks=database_marks("postgres", "PostgreSQL"), id="postgres"),
        pytest.param("mariadb", "MariaDB", marks=database_marks("mariadb", "MariaDB"), id="mariadb"),
    ],
)
def test_database_provider_has_one_holder_at_a_time(
    alias: str, server: str, tmp_path: Path, stress_size: StressSize
) -> None:
    outcomes, entries = contend(tmp_path, stress_size, database_spec(alias))
    assert_one_holder_at_a_time(stress_size, outcomes, entries)


def test_durable_object_provider_has_one_holder_at_a_time(
    worker: LocalWorker, tmp_path: Path, stress_size: StressSize
) -> None:
    outcomes, entries = contend(
        tmp_path, stress_size, {"kind": "do", "url": worker.url, "token": worker.token}
    )
    assert_one_holder_at_a_time(stress_size, outcomes, entries)
