"""`make bench` is not part of `make test`; its quick run is, so a benchmark that no longer
matches the code fails here instead of on the day someone wants numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_bench_runs_every_section(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--output", str(output)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text())
    assert {"db", "do", "kv", "redis", "admin", "scale", "startup", "targets"} <= set(report)
    if os.environ.get("CI"):
        assert report["missing"] == [], "with CI set every section must run"
        assert set(report["db"]) == {"sqlite", "postgres", "mariadb"}
    assert report["do"]["requests_per_operation"]["acquire"] == 1
    for server, scale in report["scale"].items():
        for size, measured in scale["results"].items():
            assert measured["rows"] == int(size), f"{server}: the table was not filled to {size} rows"
            assert measured["admin"]["first page"]["rows_shown"] == 100, (
                "the first page shows 100 current locks"
            )
            assert measured["cli"]["tslock list --all"]["lines"] > int(size), "--all lists every row"
    assert "tslock" in done.stdout
