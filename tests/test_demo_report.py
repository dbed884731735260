"""The demo project's ``demo_report`` command, as the overdue how-to runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_negative_seconds_is_one_line_and_a_failed_run(tmp_path: Path) -> None:
    """docs/howto/overdue.md shows one line for `demo_report --seconds -1`; it used to
    be a traceback (time.sleep's ValueError)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSLOCK_")}
    env.update(
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        TSLOCK_URL="db://default",
        PYTHONPATH=str(ROOT),
    )

    def manage(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert manage("migrate", "--verbosity", "0").returncode == 0
    done = manage("demo_report", "--seconds", "-1")
    assert done.stderr == "CommandError: --seconds must be 0 or more, got -1\n"
    assert (done.returncode, done.stdout) == (1, "")
    runs = manage("tslock", "runs", "demo_report", "--outcome", "failed", "--json")
    assert runs.returncode == 0, runs.stderr
    assert '"detail": "CommandError: --seconds must be 0 or more, got -1"' in runs.stdout
