"""`make bench` is not part of `make test`; its quick run is, so a benchmark that no longer
matches the code fails here instead of on the day someone wants numbers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import CI

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip carries
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def missing_bench_packages() -> list[str]:
    """The packages of pyproject's ``bench`` group that are not installed."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        group = tomllib.load(file)["dependency-groups"]["bench"]
    missing = []
    for requirement in group:
        name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


# The test group alone runs the suite; the benchmarks need the bench group too. Under CI
# (which installs both) a missing package is a failure, not a skip.
MISSING = missing_bench_packages()
pytestmark = pytest.mark.skipif(
    bool(MISSING) and not CI,
    reason=f"the bench dependency group is not installed (missing: {', '.join(MISSING)}); "
    "`pip install --group bench` runs this test",
)


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
    sections = {
        "db",
        "contention",
        "do",
        "kv",
        "redis",
        "admin",
        "scale",
        "startup",
        "jobs",
        "metrics",
        "notify",
        "targets",
    }
    assert sections <= set(report)
    if os.environ.get("CI"):
        assert report["missing"] == [], "with CI set every section must run"
        assert set(report["db"]) == {"sqlite", "postgres", "mariadb"}
    assert report["do"]["requests_per_operation"]["acquire"] == 1
    for server, contended in report["contention"].items():
        for entry in contended["cells"]:
            tslock = entry["results"]["tslock"]
            assert tslock["acquisitions_per_s"] > 0, f"{server}: tslock acquired nothing in {entry}"
            if entry["mode"] == "distinct names":
                # Nobody shares a name: every attempt is granted.
                assert tslock["acquisitions_per_s"] == tslock["attempts_per_s"], (server, entry)
    for server, scale in report["scale"].items():
        for size, measured in scale["results"].items():
            assert measured["rows"] == int(size), f"{server}: the table was not filled to {size} rows"
            assert measured["admin"]["first page"]["rows_shown"] == 100, (
                "the first page shows 100 current locks"
            )
            assert measured["cli"]["tslock list --all"]["lines"] > int(size), "--all lists every row"
    for server, measured in report["metrics"].items():
        sizes = measured["sizes"]
        # The cap: as many series with 20,000 names as with 100.
        assert sizes["20000"]["series"] == sizes["100"]["series"], (server, sizes)
    for server, measured in report["notify"].items():
        sizes = measured["sizes"]
        # One in 1,000 names fails: its change is sent once, and never again.
        assert (sizes["100"]["notifications_sent"], sizes["10000"]["notifications_sent"]) == (1, 10), server
        assert sizes["100"]["sent_again"] == sizes["10000"]["sent_again"] == 0, server
    assert "tslock" in done.stdout
