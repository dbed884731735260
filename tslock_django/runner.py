"""Running a program as a child of this process, the way an init such as ``tini`` does:
no shell, the same stdin, stdout and stderr, termination signals passed on, and an exit
status that says how the child ended.

``tslock run`` (:mod:`tslock_django.cli.run`) holds the lock around :meth:`Child.run`;
this module knows nothing of locks or the journal.

Exit statuses, as shells report them:

- the program's own status when it exits;
- ``128 + N`` when signal ``N`` killed it;
- 127 when it cannot be started (not found, not executable, not a program).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

#: The signals passed on to the program: those that ask a process to stop.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: A program that cannot be started (the shells' "command not found").
EXIT_CANNOT_START = 127


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

    Entering installs handlers for :data:`FORWARDED` (in the main thread); from then on
    such a signal no longer stops this process: it is passed on to the program, or, if
    the program has not started yet, remembered so that it is never started. Leaving
    puts the previous handlers back. Keep the handlers installed until the work after
    the program (releasing its lock) is done, so a late signal cannot interrupt it.

    Ctrl-C at a terminal reaches every process of the foreground group, the program
    included (it shares ours); a ``SIGINT`` is therefore not sent a second time while
    our group is a terminal's foreground group: programs that read a second Ctrl-C as
    "force quit now" would otherwise never get to clean up.
    """

    def __init__(self, argv: Sequence[str]) -> None:
        if not argv:
            raise ValueError("no program to run")
        self.argv = list(argv)
        self.process: subprocess.Popen[bytes] | None = None
        #: The signals received before the program started.
        self.pending: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Child:
        for number in FORWARDED:
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
        ``error``."""
        if self.pending:
            return Ended(None, signal=self.pending[0])
        # What this process wrote so far comes before anything the program writes.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed: nothing to keep in order
                stream.flush()
        try:
            self.process = subprocess.Popen(self.argv)
        except OSError as err:  # not found, not executable, not a program, ...
            return Ended(None, error=err)
        # Popen.wait retries when a handler ran (PEP 475), so a forwarded signal does
        # not end the wait: the program decides what the signal means.
        return Ended(self.process.wait())

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        process = self.process
        if process is None:
            self.pending.append(number)
            return
        if number == signal.SIGINT and _terminal_reached_our_group():
            return
        # send_signal does nothing once the program has been waited for.
        process.send_signal(number)


def _terminal_reached_our_group() -> bool:
    """Whether our process group is the foreground group of the terminal on stdin,
    stdout or stderr: then a keyboard signal went to the whole group, the program too."""
    group = os.getpgrp()
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == group
        except OSError:  # not a terminal
            continue
    return False
