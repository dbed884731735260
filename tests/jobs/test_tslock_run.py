"""``manage.py tslock run``: a program under a lock, in real processes of the demo project
(what a crontab line or a Kubernetes CronJob runs), its journal on an SQLite file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_manage

PY = sys.executable


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file for the module; each test uses lock names of its own."""
    path = tmp_path_factory.mktemp("run") / "journal.sqlite3"
    done = run_manage(path, "migrate", "-v", "0")
    assert done.returncode == 0, done.stderr
    return path


def start(database: Path, *args: str, tslock_url: str = "db://default") -> subprocess.Popen[str]:
    """``manage.py tslock run ARGS`` in a session of its own and without a terminal, as
    cron starts it (so a forwarded SIGINT is never mistaken for a Ctrl-C)."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL=f"sqlite:///{database}",
        TSLOCK_URL=tslock_url,
    )
    env.pop("TSLOCK_EDGE_URL", None)
    return subprocess.Popen(
        [PY, "manage.py", "tslock", "run", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def tslock_run(database: Path, *args: str, **kwargs: str) -> subprocess.CompletedProcess[str]:
    process = start(database, *args, **kwargs)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def journal(database: Path, name: str) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as conn:
        query = "SELECT outcome, detail, held_by FROM tslock_run WHERE name = ? ORDER BY id"
        return list(conn.execute(query, (name,)))


def lock_rows(database: Path, name: str) -> int:
    with sqlite3.connect(database) as conn:
        return int(conn.execute("SELECT count(*) FROM tslock_lock WHERE name = ?", (name,)).fetchone()[0])


def wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    """Until the program has written ``path`` (it is running under the lock)."""
    deadline = time.monotonic() + 60
    while not path.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"tslock run ended ({process.returncode}) before its program started:\n{out}{err}")
        assert time.monotonic() < deadline, f"the program never wrote {path}"
        time.sleep(0.02)


def program(code: str) -> list[str]:
    return ["--", PY, "-c", code]


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def test_the_exit_status_and_output_are_the_programs_and_the_journal_says_failed(database: Path) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    done = tslock_run(database, "exit-three", "--at-most-for", "1m", *program(code))
    assert done.returncode == 3
    assert done.stdout == "to stdout\n"
    assert done.stderr == "to stderr\n"
    assert journal(database, "exit-three") == [("failed", "exit status 3", "")]


def test_a_success_exits_0_and_releases_the_lock_for_the_next_run(database: Path) -> None:
    first = tslock_run(database, "nightly", "--at-most-for", "10m", *program("print('first')"))
    assert (first.returncode, first.stdout, first.stderr) == (0, "first\n", "")
    # lock_at_most_for is ten minutes: only a released lock lets the second run in now.
    second = tslock_run(database, "nightly", "--at-most-for", "10m", *program("print('second')"))
    assert (second.returncode, second.stdout, second.stderr) == (0, "second\n", "")
    assert [row[0] for row in journal(database, "nightly")] == ["succeeded", "succeeded"]


def test_stdin_is_the_programs(database: Path, files: Path) -> None:
    env = dict(
        os.environ, DJANGO_SETTINGS_MODULE="testproject.settings", DATABASE_URL=f"sqlite:///{database}"
    )
    env["TSLOCK_URL"] = "db://default"
    done = subprocess.run(
        [PY, "manage.py", "tslock", "run", "stdin", "--at-most-for", "1m", "--", PY, "-c",
         "import sys; print(sys.stdin.read().upper())"],
        cwd=ROOT, env=env, input="from the pipe", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "FROM THE PIPE\n"), done.stderr


def test_a_held_lock_skips_with_the_commands_line_or_fails_with_75(database: Path, files: Path) -> None:
    ready, go, ran = files / "ready", files / "go", files / "ran"
    holder = start(
        database,
        "report",
        "--at-most-for",
        "10m",
        *program(
            f"import pathlib, time; pathlib.Path({str(ready)!r}).touch()\n"
            f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)"
        ),
    )
    try:
        wait_for(ready, holder)
        touch = program(f"import pathlib; pathlib.Path({str(ran)!r}).touch()")
        skipped = tslock_run(database, "report", "--at-most-for", "10m", *touch)
        assert skipped.returncode == 0
        assert skipped.stdout == ""
        assert skipped.stderr.startswith("skipped: lock 'report' is held by "), skipped.stderr
        assert skipped.stderr.rstrip().endswith(f"; {PY} did not run"), skipped.stderr
        assert "Traceback" not in skipped.stderr
        failed = tslock_run(database, "report", "--at-most-for", "10m", "--on-locked", "fail", *touch)
        assert failed.returncode == 75
        assert "lock 'report' is held by " in failed.stderr and "Traceback" not in failed.stderr
        assert not ran.exists(), "the program ran while the lock was held elsewhere"
    finally:
        go.touch()
        _, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    rows = journal(database, "report")
    assert [row[0] for row in rows] == ["succeeded", "skipped", "skipped"]
    assert rows[1][2] and rows[1][2] == rows[2][2], "a skip names the holder"


def test_a_store_that_fails_exits_1_without_running_the_program(database: Path, files: Path) -> None:
    ran = files / "ran"
    # Nothing listens on port 9 (discard): every request fails to connect.
    done = tslock_run(
        database,
        "unreachable",
        "--at-most-for",
        "1m",
        *program(f"import pathlib; pathlib.Path({str(ran)!r}).touch()"),
        tslock_url="cloudflare-do+http://not-a-secret-token@127.0.0.1:9/",
    )
    assert done.returncode == 1
    assert "did not run (failing closed)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not ran.exists()
    [(outcome, detail, _)] = journal(database, "unreachable")
    assert outcome == "error" and detail


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_a_program_that_cannot_start_exits_127(database: Path, files: Path, kind: str) -> None:
    path = files / "job.sh"
    if kind == "not executable":
        path.write_text("#!/bin/sh\necho hello\n")
        path.chmod(0o644)
    name = f"cannot-start-{kind.replace(' ', '-')}"
    done = tslock_run(database, name, "--at-most-for", "10m", "--", str(path), "--flag")
    assert done.returncode == 127
    assert f"tslock run: cannot start {str(path)!r}" in done.stderr
    assert "Traceback" not in done.stderr
    [(outcome, detail, _)] = journal(database, name)
    assert outcome == "failed" and ("FileNotFoundError" in detail or "PermissionError" in detail)
    # Released: the next run takes the lock at once although lock_at_most_for is 10 minutes.
    again = tslock_run(database, name, "--at-most-for", "10m", *program("pass"))
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_tslock_reaches_the_program_and_its_death_gives_128_plus_n(
    database: Path, files: Path, signum: signal.Signals
) -> None:
    ready, seen = files / "ready", files / "seen"
    name = f"signalled-{signum.name.lower()}"
    # The program notes the signal, then dies of it as a program without a handler would.
    code = (
        "import os, pathlib, signal, time\n"
        "def noted(number, frame):\n"
        f"    pathlib.Path({str(seen)!r}).write_text(str(number))\n"
        "    signal.signal(number, signal.SIG_DFL)\n"
        "    os.kill(os.getpid(), number)\n"
        f"signal.signal({int(signum)}, noted)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(120)\n"
    )
    process = start(database, name, "--at-most-for", "10m", *program(code))
    wait_for(ready, process)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, err
    assert seen.read_text() == str(int(signum))
    assert "Traceback" not in err
    assert journal(database, name) == [("failed", f"killed by signal {int(signum)}", "")]
    again = tslock_run(database, name, "--at-most-for", "10m", *program("pass"))
    assert again.returncode == 0, again.stderr


def test_a_program_that_handles_sigterm_and_exits_0_makes_tslock_exit_0(database: Path, files: Path) -> None:
    ready = files / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(120)\n"
    )
    process = start(database, "graceful", "--at-most-for", "10m", *program(code))
    wait_for(ready, process)
    process.terminate()
    process.communicate(timeout=120)
    assert process.returncode == 0
    assert [row[0] for row in journal(database, "graceful")] == ["succeeded"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-dashes", "--at-most-for", "1m", PY, "-c", "pass"], "no -- before the program"),
        (["no-program", "--at-most-for", "1m", "--"], "no program after --"),
        (["", "--at-most-for", "1m", "--", PY, "-c", "pass"], "the lock name is empty"),
        (["bad-duration", "--at-most-for", "soon", "--", PY, "-c", "pass"], "argument --at-most-for"),
        (["no-at-most", "--", PY, "-c", "pass"], "--at-most-for"),
        (["grace-alone", "--at-most-for", "1m", "--grace", "5m", "--", PY, "-c", "pass"],
         "--grace needs --schedule"),
        (["bad-schedule", "--at-most-for", "1m", "--schedule", "often", "--", PY, "-c", "pass"],
         "not a schedule"),
        (["least-over-most", "--at-most-for", "1m", "--at-least-for", "1h", "--", PY, "-c", "pass"],
         "lock_at_least_for"),
    ],
)  # fmt: skip
def test_usage_mistakes_exit_2_with_a_message_and_lock_nothing(
    database: Path, args: list[str], message: str
) -> None:
    done = tslock_run(database, *args)
    assert done.returncode == 2, done.stderr
    assert "usage: manage.py tslock run NAME" in done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert lock_rows(database, args[0]) == 0
    assert journal(database, args[0]) == []


def test_a_schedule_is_kept_with_the_journal(database: Path) -> None:
    done = tslock_run(
        database, "hourly", "--at-most-for", "1m", "--schedule", "1h", "--grace", "10m", *program("pass")
    )
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT schedule, grace FROM tslock_job WHERE name = 'hourly'").fetchone() == (
            "1h",
            600.0,
        )
