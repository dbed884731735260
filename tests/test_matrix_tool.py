"""tools/matrix.py: which Django release each run takes, and how the table reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import matrix

OFFERED = ["6.1.3", "6.1", "6.0.10", "5.2.19", "5.2.9", "5.2", "4.2.30", "4.2.4", "4.2"]


def test_the_newest_release_of_a_series_is_chosen_numerically() -> None:
    assert matrix.newest_of("5.2", OFFERED) == "5.2.19", "5.2.19 is newer than 5.2.9"
    assert matrix.newest_of("4.2", OFFERED) == "4.2.30"
    assert matrix.newest_of("5.1", OFFERED) == "", "a series pip does not offer"
    assert matrix.numeric("3.10") > matrix.numeric("3.9")


def test_the_table_names_what_was_not_offered_and_the_floor_pins() -> None:
    runs = [
        matrix.Run("3.10", "python3.10", "", "6.1"),
        matrix.Run("3.13", "python3.13", "6.1.3", "6.1", result="passed", counts="900 passed", seconds=90),
        matrix.Run("3.10", "python3.10", "4.2", "4.2", pins={"httpx": "0.25", "django-environ": "0.11"}),
    ]
    lines = matrix.table(runs).splitlines()
    assert lines[2] == "| 3.10 | 6.1: not offered for this Python | newest | newest | - |  | 0.0 |"
    assert lines[3] == "| 3.13 | 6.1.3 | newest | newest | passed | 900 passed | 1.5 |"
    assert lines[4].startswith("| 3.10 | 4.2 | 0.25 | 0.11 | not run |")
    assert runs[2].name == "py3.10-django4.2-floor"


def test_without_any_interpreter_the_ci_run_skips_saying_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(matrix, "find_interpreter", lambda version: None)
    monkeypatch.setattr(matrix, "OUT", tmp_path)
    assert matrix.main(["--newest"]) == 0
    out = capsys.readouterr().out
    assert "Python 3.13: not found on PATH or under pyenv" in out
    assert "skipped: none of Python 3.10, 3.11, 3.12, 3.13 was found to run the suite on" in out


def test_ci_runs_the_newest_and_the_oldest_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` runs both ends: the newest Django on the newest Python (what breaks
    first) and the oldest Django on the oldest Python (what most users pin)."""
    monkeypatch.setattr(matrix, "find_interpreter", lambda version: f"python{version}")
    offered = {"python3.10": ["5.2.19", "4.2.30"], "python3.13": ["6.1.3", "5.2.19", "4.2.30"]}
    monkeypatch.setattr(matrix, "offered_djangos", lambda interpreter: offered[interpreter])
    runs, _ = matrix.plan(["3.10", "3.13"], ["4.2", "5.2", "6.1"], floor=True, newest=True, oldest=True)
    assert [(run.python, run.django) for run in runs] == [("3.13", "6.1.3"), ("3.10", "4.2.30")]
    only_newest, _ = matrix.plan(["3.10", "3.13"], ["4.2", "6.1"], floor=True, newest=True)
    assert [(run.python, run.django) for run in only_newest] == [("3.13", "6.1.3")]


def test_make_test_installs_system_packages_before_anything_runs_in_parallel() -> None:
    """Two apt-gets at once fail on dpkg's lock: every Debian package `make test` needs is
    installed by one step, before the parallel make (`make -n` prints the order)."""
    import os
    import subprocess

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MAKEFLAGS": ""}
    # -B: as on a fresh clone (no stamp makes a step look done); -n: print, run nothing.
    printed = subprocess.run(
        ["make", "-n", "-B", "test"], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    parallel = next(i for i, line in enumerate(printed) if "-j2" in line)
    installs = [i for i, line in enumerate(printed) if "apt-get install" in line]
    assert installs, "make -n test shows no apt-get install step"
    assert installs[0] < parallel, "the system packages are installed inside the parallel step"
    # The sub-make's targets install nothing themselves: their apt step is the same one,
    # which finds every package present by then.
    sub = subprocess.run(
        ["make", "-n", "-B", "browser", "mysqlclient"], cwd=root, env=env, capture_output=True, text=True
    ).stdout
    assert sub.count("apt-get install") == 1, sub
