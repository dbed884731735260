"""Running ``tests/monitors/child.py`` (a management command in a process of its own) on
a SQLite file, with TSLOCK_MONITORS, TSLOCK_SCHEDULES and a Sentry DSN as given."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def run_child(
    database: Path,
    *args: str,
    monitors: object = None,
    schedules: object = None,
    sentry_dsn: str = "",
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.monitors.child_settings",
        DATABASE_URL=f"sqlite:///{database}",
        CHILD_MONITORS=json.dumps(monitors),
        CHILD_SCHEDULES=json.dumps(schedules),
        CHILD_SENTRY_DSN=sentry_dsn,
    )
    for name in ("TSLOCK_URL", "TSLOCK_EDGE_URL"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, str(Path(__file__).with_name("child.py")), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def migrated(folder: Path) -> Path:
    database = folder / "monitors.sqlite3"
    done = run_child(database, "migrate", "-v", "0")
    assert done.returncode == 0, done.stderr
    return database


def outcomes(database: Path, name: str) -> list[str]:
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT outcome FROM tslock_run WHERE name = ? ORDER BY id", (name,))
        return [row[0] for row in rows]
