"""A process killed in the middle of a run leaves ``running``, then ``lost``; never
``succeeded``. Real processes of the demo project, killed with SIGKILL."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.conftest import run_manage, start_manage


def outcomes(database: Path) -> list[str]:
    with sqlite3.connect(database) as conn:
        return [row[0] for row in conn.execute("SELECT outcome FROM tslock_run ORDER BY id")]


def test_a_killed_run_reads_running_then_lost_and_never_succeeded(tmp_path: Path) -> None:
    database = tmp_path / "journal.sqlite3"
    assert run_manage(database, "migrate", "-v", "0").returncode == 0
    job = start_manage(
        database, "demo_report", "--seconds", "120", "--lock-at-most-for", "2s", "--lock-at-least-for", "0"
    )
    assert job.stdout is not None
    line = job.stdout.readline()
    assert line.startswith("ran:"), line + job.stderr.read() if job.stderr else line
    job.kill()
    job.wait(timeout=30)
    job.stdout.close()
    if job.stderr:
        job.stderr.close()
    assert outcomes(database) == ["running"]
    # Once its lock has expired the next run may start, and it writes the dead one down.
    time.sleep(2.5)
    again = run_manage(database, "demo_report", "--seconds", "0", "--lock-at-least-for", "0")
    assert again.returncode == 0, again.stderr
    assert outcomes(database) == ["lost", "succeeded"]
