"""``manage.py tslock run``: a program under a lock, in real processes of the demo project
(what a crontab line or a Kubernetes CronJob runs), its journal on an SQLite file."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def environment(
    database: Path, tslock_url: str = "db://default", settings: str = "testproject.settings"
) -> dict[str, str]:
    """The environment a cron line would give ``manage.py`` of the demo project."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=settings, DATABASE_URL=f"sqlite:///{database}")
    env["TSLOCK_URL"] = tslock_url
    env.pop("TSLOCK_EDGE_URL", None)
    return env


def start(
    database: Path,
    *args: str,
    tslock_url: str = "db://default",
    settings: str = "testproject.settings",
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """``manage.py tslock run ARGS`` in a session of its own and without a terminal, as
    cron starts it; ``env`` instead of :func:`environment`'s."""
    return subprocess.Popen(
        [PY, "manage.py", "tslock", "run", *args],
        cwd=ROOT,
        env=env if env is not None else environment(database, tslock_url, settings),
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def tslock_run(database: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
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


def pid_in(path: Path, process: subprocess.Popen[str]) -> int:
    """The process id a program wrote to ``path`` (one line) once it is there."""
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().endswith("\n")):
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(
                f"tslock run ended ({process.returncode}) before {path.name} was written:\n{out}{err}"
            )
        assert time.monotonic() < deadline, f"the program never wrote {path}"
        time.sleep(0.02)
    return int(path.read_text())


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie that its new parent has not reaped
    yet has ended too)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def wait_gone(*pids: int) -> None:
    """Until every process of ``pids`` has ended (a generous deadline: a loaded machine)."""
    deadline = time.monotonic() + 60
    while not all(gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            alive = [pid for pid in pids if not gone(pid)]
            for pid in alive:  # leave nothing behind for the next test
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            pytest.fail(f"still running a minute later: {alive}")
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
        (["tz-alone", "--at-most-for", "1m", "--tz", "Europe/Berlin", "--", PY, "-c", "pass"],
         "--tz needs --schedule"),
        (["bad-tz", "--at-most-for", "1m", "--schedule", "30 2 * * *", "--tz", "Nowhere/City", "--", PY,
          "-c", "pass"],
         "tz 'Nowhere/City' of --schedule '30 2 * * *' is not a known time zone. Accepted: an IANA"),
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


def test_a_schedules_zone_is_kept_with_the_journal(database: Path) -> None:
    done = tslock_run(
        database, "nightly", "--at-most-for", "1m", "--schedule", "30 2 * * *", "--tz", "Europe/Berlin",
        *program("pass"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(database) as conn:
        [stored] = conn.execute("SELECT schedule FROM tslock_job WHERE name = 'nightly'").fetchone()
    assert stored == "CRON_TZ=Europe/Berlin 30 2 * * *"


# -- The program never outlives its lock (issue 31, item 2) ----------------------------

GRANDCHILD_NOTES_SIGTERM = (
    "import pathlib, signal, sys, time\n"
    "def noted(number, frame):\n"
    "    pathlib.Path(sys.argv[1]).write_text(str(number))\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, noted)\n"
    "pathlib.Path(sys.argv[2]).touch()\n"
    "time.sleep(120)\n"
)


def test_a_signal_to_tslock_reaches_what_the_program_started_too(database: Path, files: Path) -> None:
    seen, ready = files / "seen", files / "ready"
    # sh starts a grandchild that notes SIGTERM, then waits for it; sh itself dies of it.
    script = f'{PY} -c "$0" "$1" "$2" & wait'
    process = start(
        database, "group-term", "--at-most-for", "10m", "--", "sh", "-c", script,
        GRANDCHILD_NOTES_SIGTERM, str(seen), str(ready),
    )  # fmt: skip
    wait_for(ready, process)
    process.terminate()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert seen.read_text() == str(int(signal.SIGTERM)), "the grandchild got the SIGTERM"
    assert [row[0] for row in journal(database, "group-term")] == ["failed"]


def test_sigkill_of_tslock_kills_the_program_and_what_it_started(database: Path, files: Path) -> None:
    shell, grandchild = files / "sh.pid", files / "sleep.pid"
    # Neither holds tslock's output: the test waits for processes, not for end-of-file.
    script = f"exec >/dev/null 2>&1; echo $$ > {shell}; sleep 1000 & echo $! > {grandchild}; wait"
    process = start(database, "killed-runner", "--at-most-for", "10m", "--", "sh", "-c", script)
    pids = (pid_in(shell, process), pid_in(grandchild, process))
    process.kill()  # nothing in tslock can catch this one
    process.communicate(timeout=120)
    wait_gone(*pids)


def test_what_the_program_leaves_running_is_killed_before_the_lock_is_released(
    database: Path, files: Path
) -> None:
    left = files / "sleep.pid"
    script = f"sleep 1000 >/dev/null 2>&1 & echo $! > {left}"
    done = tslock_run(database, "left-behind", "--at-most-for", "10m", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    wait_gone(int(left.read_text()))


def test_a_sigterm_at_the_grant_keeps_the_program_from_starting_and_is_journaled(
    database: Path, files: Path
) -> None:
    ran = files / "ran"
    touch = program(f"import pathlib; pathlib.Path({str(ran)!r}).touch()")
    # The settings send SIGTERM to the runner from a lock_acquired receiver: at the grant.
    done = tslock_run(
        database,
        "term-at-grant",
        "--at-most-for",
        "10m",
        *touch,
        settings="tests.jobs.sigterm_at_grant_settings",
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert not ran.exists(), "the program started after the SIGTERM"
    assert journal(database, "term-at-grant") == [
        ("failed", f"InterruptedError: signal {int(signal.SIGTERM)} arrived before {PY} started", "")
    ]
    # Released: lock_at_most_for is ten minutes, and the next run takes the lock now.
    again = tslock_run(database, "term-at-grant", "--at-most-for", "10m", *program("pass"))
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("how", ["kill -INT", "Ctrl-C"])
def test_sigint_reaches_the_program_once_when_tslock_runs_in_a_terminals_foreground(
    database: Path, files: Path, how: str
) -> None:
    ready, seen = files / "ready", files / "seen"
    name = f"terminal-{how.split()[0].lower()}"
    code = (
        "import pathlib, signal, time\n"
        f"seen = pathlib.Path({str(seen)!r})\n"
        "signal.signal(signal.SIGINT, lambda n, f: seen.open('a').write('INT '))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "deadline = time.monotonic() + 120\n"
        "while not seen.exists() and time.monotonic() < deadline: time.sleep(0.02)\n"
        "time.sleep(0.5)\n"  # a second SIGINT, if one came, is noted meanwhile
    )
    controller, terminal = os.openpty()
    # The runner leads a session whose controlling terminal is the pty, its group in the
    # terminal's foreground (as when started from an interactive shell).
    take_terminal = (
        "import os, sys; os.setsid(); os.open(sys.argv[1], os.O_RDWR); os.execvp(sys.argv[2], sys.argv[2:])"
    )
    process = subprocess.Popen(
        [PY, "-c", take_terminal, os.ttyname(terminal), PY, "manage.py", "tslock", "run", name,
         "--at-most-for", "10m", *program(code)],
        cwd=ROOT, env=environment(database), text=True, stdin=terminal,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(ready, process)
        if how == "Ctrl-C":
            os.write(controller, b"\x03")  # the terminal sends SIGINT to its foreground group
        else:
            process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        os.close(controller)
        os.close(terminal)
    assert process.returncode == 0, err
    assert seen.read_text() == "INT ", "the program got SIGINT once"


# -- The program's environment is the caller's (issue 31, item 3) ----------------------


@pytest.mark.parametrize("zone", [None, "Asia/Tokyo"])
def test_the_programs_environment_is_exactly_the_one_tslock_was_given(
    database: Path, zone: str | None
) -> None:
    # The demo project's TIME_ZONE is Europe/Berlin; Django puts it in TZ of its own process.
    env = environment(database)
    env.pop("TZ", None)
    if zone is not None:
        env["TZ"] = zone
    done = tslock_run(database, "environment", "--at-most-for", "1m", "--", "env", "-0", env=env)
    assert done.returncode == 0, done.stderr
    given = dict(entry.split("=", 1) for entry in done.stdout.split("\0") if entry)
    assert given.get("TZ") == zone
    assert given == env
