"""Running a program as a child of this process, the way an init such as ``tini`` does:
no shell, the same stdin, stdout and stderr, termination signals passed on to its whole
process group, and an exit status that says how the child ended (its own, ``128 + N``
when signal ``N`` killed it, 127 when it cannot be started).

The program never outlives the runner's lock: what it leaves running is killed when it
ends, and its group is killed when the runner dies (see :mod:`tslock_django.launcher`).
``tslock run`` holds the lock around :meth:`Child.run`; this module knows nothing of locks
or the journal. Why it is built so: ``docs/explanation/run.md``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from .launcher import starting_environment

#: The signals passed on to the program: those that ask a process to stop.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: A program that cannot be started (the shells' "command not found").
EXIT_CANNOT_START = 127

#: Seconds what the program started may take to finish handling a signal passed on to
#: the group, once the program itself has ended, before the group is killed.
LEFTOVER_GRACE = 2.0

#: The program's first process, run by path (see :mod:`tslock_django.launcher`).
LAUNCHER = str(Path(__file__).with_name("launcher.py"))


def exit_status(returncode: int) -> int:
    """A child's ``returncode`` as an exit status: negative ``-N`` (killed by signal
    ``N``) becomes ``128 + N``, as shells report it."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class Ended:
    """How the program ended.

    ``returncode`` is :class:`subprocess.Popen`'s (negative: killed by that signal);
    ``None`` when it never ran: ``error`` says why it could not start, or ``signal``
    says which signal arrived before it started.
    """

    returncode: int | None
    error: OSError | None = None
    signal: int | None = None

    @property
    def status(self) -> int:
        """The exit status for this process to exit with."""
        if self.returncode is not None:
            return exit_status(self.returncode)
        if self.signal is not None:
            return 128 + self.signal
        return EXIT_CANNOT_START


class Child:
    """Runs one program with signal forwarding; a context manager.

    Entering installs handlers for :data:`FORWARDED` (in the main thread; a signal the
    process ignores is left ignored, and the program inherits that). Enter *before*
    taking the lock: from then on such a signal no longer stops this process; it is
    passed on to the program's process group, or, if the program has not started yet,
    remembered so that it is never started (a signal that arrives while the program is
    being started is passed on as soon as it exists). Leaving puts the previous handlers
    back. Keep the handlers installed until the work after the program (releasing its
    lock) is done, so a late signal cannot interrupt it.

    Call :meth:`run` from the main thread: on Linux the program's parent-death signal
    fires when the *thread* that started it ends.
    """

    def __init__(self, argv: Sequence[str]) -> None:
        if not argv:
            raise ValueError("no program to run")
        self.argv = list(argv)
        self.process: subprocess.Popen[bytes] | None = None
        #: The signals received before the program started.
        self.pending: list[int] = []
        self._previous: dict[int, Any] = {}
        self._group_ended = False
        self._forwarded = False

    def __enter__(self) -> Child:
        for number in FORWARDED:
            if signal.getsignal(number) is signal.SIG_IGN:
                continue  # ignored by whoever started us: the program inherits that
            self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def run(self) -> Ended:
        """Start the program, wait for it to end and say how it ended. Never raises for
        the program's sake: a program that cannot start is an :class:`Ended` with
        ``error``. Whatever is left of the program's group when it ends (or when this
        method is left by an exception) is killed."""
        if self.pending:
            return Ended(None, signal=self.pending[0])
        # What this process wrote so far comes before anything the program writes.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed: nothing to keep in order
                stream.flush()
        # The watchdog reads end-of-file on this pipe when we are gone; the launcher
        # reports on the other why the program could not start.
        watch_read, watch_write = os.pipe()
        status_read, status_write = os.pipe()
        launch = [sys.executable, "-I", "-S", LAUNCHER, str(os.getpid()), str(watch_read), str(status_write)]
        try:
            try:
                self.process = subprocess.Popen(
                    [*launch, *self.argv],
                    pass_fds=(watch_read, status_write),
                    start_new_session=True,
                    env=starting_environment(),
                )
            except OSError as err:  # no interpreter to launch with
                return Ended(None, error=err)
            finally:
                os.close(watch_read)
                os.close(status_write)
            # A signal that came while Popen was starting the launcher was only noted.
            for number in self.pending:
                self._forward(number)
            report = _read_to_end(status_read)
            # Popen.wait retries when a handler ran (PEP 475), so a forwarded signal does
            # not end the wait: the program decides what the signal means.
            returncode = self.process.wait()
        finally:
            os.close(status_read)
            self._let_the_group_finish()
            self._end_group()
            os.close(watch_write)
        if report:
            number = int(report)
            return Ended(None, error=OSError(number, os.strerror(number), self.argv[0]))
        return Ended(returncode)

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        if self.process is None:
            self.pending.append(number)
            return
        self._forward(number)

    def _forward(self, number: int) -> None:
        """Send ``number`` to the program's group. Its id cannot name anyone else: it is
        our unreaped child's pid, or, once that is reaped, the watchdog's group, until
        :meth:`_end_group`."""
        if self.process is None or self._group_ended:
            return
        self._forwarded = True
        with contextlib.suppress(ProcessLookupError, PermissionError):  # nobody left in it
            os.killpg(self.process.pid, number)

    def _let_the_group_finish(self) -> None:
        """After a signal was passed on, what the program started got it too: give it up
        to :data:`LEFTOVER_GRACE` to finish handling it once the program has ended (on
        Linux, until only the watchdog is left in the group) before the group is killed."""
        if not self._forwarded or self.process is None:
            return
        ends = time.monotonic() + LEFTOVER_GRACE
        while time.monotonic() < ends and group_size(self.process.pid) > 1:
            time.sleep(0.02)

    def _end_group(self) -> None:
        """Kill what is left of the program's group (the watchdog included), then reap
        the program's first process if it is still there."""
        process = self.process
        if process is None:
            return
        self._group_ended = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.returncode is None:
            process.wait()


def group_size(group: int) -> int:
    """How many processes are in process group ``group`` (Linux: read from ``/proc``);
    elsewhere, where it cannot be read cheaply, a number that says "some"."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 2
    members = 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 2 and fields[2] == str(group).encode():
            members += 1
    return members


def _read_to_end(fd: int) -> bytes:
    """Everything the launcher writes on its status pipe (nothing when the program
    started: the pipe closes with the ``exec``)."""
    chunks = []
    while chunk := os.read(fd, 64):
        chunks.append(chunk)
    return b"".join(chunks)
