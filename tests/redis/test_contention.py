"""Real processes contend for one Redis lock: one holder at a time, fencing tokens grow
in acquisition order, every round ran or was skipped. 8 processes; 16 with
``--stress-size=large`` (or ``TSLOCK_STRESS_PROCS``)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.stress.conftest import SIZES

from .conftest import LOCAL_URL, PASSWORD, require_local_redis
from .server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.stress
HOLD_S = 0.004
PROCESS_TIMEOUT_S = 90


def contend(tmp_path: Path, url: str, key_prefix: str, processes: int, rounds: int) -> None:
    log, go = tmp_path / "holders.log", tmp_path / "go"
    spec = json.dumps(
        {
            "kind": "redis",
            "url": url,
            "key_prefix": key_prefix,
            "name": f"stress-{uuid.uuid4().hex[:8]}",
            "rounds": rounds,
            "hold_s": HOLD_S,
            "log": str(log),
            "go": str(go),
        }
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    running = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.stress.holder", spec],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    go.touch()
    outcomes = []
    try:
        for process in running:
            out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
            assert process.returncode == 0, (
                f"a contender failed (status {process.returncode}):\n{err[-2000:]}"
            )
            assert PASSWORD not in out + err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.wait()
    entries = [tuple(int(f) for f in line.split()) for line in log.read_text().splitlines()]
    assert len(outcomes) == processes
    assert all(o["ran"] + o["skipped"] == rounds for o in outcomes), outcomes
    assert sum(o["ran"] for o in outcomes) == len(entries), "every run left exactly one log line"
    assert sum(o["skipped"] for o in outcomes) > 0, "the processes never met the lock held: no contention"
    assert len({e[0] for e in entries}) > 1, "only one process ever got the lock"
    for before, after in itertools.pairwise(sorted(entries, key=lambda e: e[2])):
        assert after[2] >= before[3], f"holders overlap: {before} and {after} (pid, fencing, start, end)"
        assert after[1] > before[1], f"fencing tokens do not grow in acquisition order: {before}, {after}"


def size(pytestconfig: pytest.Config) -> tuple[int, int]:
    processes, rounds = SIZES[pytestconfig.getoption("--stress-size")]
    return (
        int(os.environ.get("TSLOCK_STRESS_PROCS", processes)),
        int(os.environ.get("TSLOCK_STRESS_ROUNDS", rounds)),
    )


def test_processes_on_the_local_redis_hold_one_at_a_time(
    tmp_path: Path, key_prefix: str, pytestconfig: pytest.Config
) -> None:
    require_local_redis()
    contend(tmp_path, LOCAL_URL, key_prefix, *size(pytestconfig))


def test_processes_on_a_password_protected_redis_hold_one_at_a_time(
    tmp_path: Path, server: RedisServer, pytestconfig: pytest.Config
) -> None:
    contend(tmp_path, server.url, "tslock:", *size(pytestconfig))
