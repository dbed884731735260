"""`make demo` as a new user runs it: the overlapping runs, the journal, and a failing run
that tells the operator exactly once (one email, one signed webhook), on a database and a
mail folder of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_tells_the_operator_once_about_a_failing_run(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "DEMO_MAIL_DIR": str(tmp_path / "mail"),
    }
    env.pop("TSLOCK_URL", None)
    env.pop("PROVIDER", None)
    done = subprocess.run(
        [sys.executable, str(ROOT / "testproject" / "run_demo.py")],
        env=env, cwd=ROOT, text=True, capture_output=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--- told once: 1 email, 1 webhook" in done.stdout
    assert '"status": "failing"' in done.stdout
    assert "Subject:" in done.stdout and "demo_report" in done.stdout
    [mail] = (tmp_path / "mail").iterdir()
    assert "failing" in mail.read_text()
