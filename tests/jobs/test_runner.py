"""The child runner on its own, and ``tslock run`` through ``call_command``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tslock_django import providers, runner
from tslock_django.runner import EXIT_CANNOT_START, Child, Ended, exit_status

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}


@pytest.mark.parametrize(("returncode", "status"), [(0, 0), (3, 3), (-15, 143), (-9, 137), (-2, 130)])
def test_exit_status_is_128_plus_the_signal_that_killed(returncode: int, status: int) -> None:
    assert exit_status(returncode) == status


def test_a_signal_before_the_start_keeps_the_program_from_starting(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    before = signal.getsignal(signal.SIGTERM)
    with Child([sys.executable, "-c", f"open({str(ran)!r}, 'w')"]) as child:
        os.kill(os.getpid(), signal.SIGTERM)  # handled: this process goes on
        ended = child.run()
    assert ended == Ended(None, signal=signal.SIGTERM)
    assert ended.status == 128 + signal.SIGTERM
    assert not ran.exists()
    assert signal.getsignal(signal.SIGTERM) is before, "the previous handler is back"


def test_a_signal_while_the_program_is_being_started_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished = tmp_path / "finished"
    real_popen = subprocess.Popen

    def popen_signalled_meanwhile(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        # The SIGTERM lands while Popen is starting the program (its handler runs here,
        # before Popen has returned the process).
        os.kill(os.getpid(), signal.SIGTERM)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", popen_signalled_meanwhile)
    code = f"import pathlib, time; time.sleep(5); pathlib.Path({str(finished)!r}).touch()"
    with Child([sys.executable, "-c", code]) as child:
        ended = child.run()
    assert ended.returncode == -signal.SIGTERM, "the program was killed by the SIGTERM"
    assert ended.status == 128 + signal.SIGTERM
    assert not finished.exists()


def test_a_signal_ignored_by_the_runners_caller_stays_ignored_for_the_program() -> None:
    # As under nohup: SIGHUP ignored. Catching it to pass it on would hand the program
    # the default disposition instead (exec resets caught signals, keeps ignored ones).
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        code = "import signal, sys; sys.exit(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and 7)"
        with Child([sys.executable, "-c", code]) as child:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            ended = child.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert ended.returncode == 7, "the program found SIGHUP ignored"


def test_a_program_that_cannot_start_is_an_ending_not_an_exception(tmp_path: Path) -> None:
    with Child([str(tmp_path / "absent")]) as child:
        ended = child.run()
    assert isinstance(ended.error, FileNotFoundError)
    assert ended.status == EXIT_CANNOT_START


def test_no_program_is_refused() -> None:
    with pytest.raises(ValueError, match="no program"):
        Child([])


@override_settings(TSLOCK_PROVIDERS=MEMORY)
def test_under_call_command_a_status_is_a_command_error_carrying_it() -> None:
    args = ("tslock", "run", "in-process", "--at-most-for", "1m", "--")
    assert call_command(*args, sys.executable, "-c", "pass") is None
    with pytest.raises(CommandError) as raised:
        call_command(*args, sys.executable, "-c", "import sys; sys.exit(4)")
    assert raised.value.returncode == 4
    [record] = providers["default"].list_locks()
    assert record.released, "the lock was given back"


@override_settings(TSLOCK_PROVIDERS=MEMORY)
def test_under_call_command_a_usage_mistake_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="no -- before the program"):
        call_command("tslock", "run", "in-process", "--at-most-for", "1m", "true")
