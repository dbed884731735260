"""The first process of a program run by ``tslock run``: it ties the program to the
runner's life, then becomes the program (``exec``).

:mod:`tslock_django.runner` starts it as ``python -I -S launcher.py RUNNER_PID WATCH_FD
STATUS_FD PROGRAM [ARGS...]`` in a session of its own; it imports nothing but the standard
library. It puts back the signal dispositions Python changed, leaves a watchdog in the
program's group that kills the group when the runner is gone, asks on Linux for SIGKILL at
its parent's death, and ``exec``s the program in the environment it was started with (an
``errno`` on ``STATUS_FD`` and exit 127 when that fails). The steps and why each is there:
``docs/explanation/run.md``.
"""

from __future__ import annotations

import os
import signal
import sys

#: The signals the watchdog ignores: those the runner passes on to the group, and those
#: a terminal sends to a whole group.
WATCHDOG_IGNORES = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)

#: ``prctl`` option number for the parent-death signal (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1


def starting_environment() -> dict[bytes, bytes] | dict[str, str]:
    """The environment this process was started with, as ``{bytes: bytes}`` on Linux
    (read from ``/proc/self/environ``: neither Python's locale coercion nor Django's
    ``TZ`` is in it), else ``os.environ`` as it is now."""
    try:
        with open("/proc/self/environ", "rb") as file:
            block = file.read()
    except OSError:  # not Linux (or no /proc): the best there is
        return dict(os.environ)
    environment: dict[bytes, bytes] = {}
    for entry in block.split(b"\0"):
        key, equals, value = entry.partition(b"=")
        if key and equals:
            environment[key] = value
    return environment


def watch(watch_fd: int, status_fd: int) -> None:
    """The watchdog's life: wait until the runner is gone, then kill the group."""
    for number in WATCHDOG_IGNORES:
        signal.signal(number, signal.SIG_IGN)
    # Hold none of the program's streams (a reader of its output must see it end), nor
    # the status pipe (it must close when the program starts). The runner's Popen passed
    # this process no other descriptor.
    os.close(status_fd)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    while True:
        try:
            if not os.read(watch_fd, 1):
                break
        except OSError:
            break
    os.killpg(0, signal.SIGKILL)  # our group: the program, what it started, and us


def leave_watchdog(watch_fd: int, status_fd: int) -> None:
    """Fork the watchdog, orphaned: an intermediate process forks it and exits."""
    middle = os.fork()
    if middle == 0:
        try:
            if os.fork() == 0:
                watch(watch_fd, status_fd)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    os.close(watch_fd)


def die_with_parent(runner_pid: int) -> None:
    """Linux: SIGKILL when the parent dies; exit now if it is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != runner_pid:
        os._exit(128 + signal.SIGKILL)


def restore_dispositions() -> None:
    """Undo what Python's start-up did to signals (``exec`` keeps an ignored signal
    ignored): SIGINT back to the default unless it was ignored, SIGPIPE and SIGXFSZ back
    to the default as :class:`subprocess.Popen` does with ``restore_signals``."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def main(argv: list[str]) -> None:
    """Launch ``argv[3:]`` as described in the module's docstring."""
    restore_dispositions()
    runner_pid, watch_fd, status_fd = (int(word) for word in argv[:3])
    program = argv[3:]
    os.set_inheritable(status_fd, False)  # closed by the exec: "started"
    leave_watchdog(watch_fd, status_fd)
    die_with_parent(runner_pid)
    try:
        os.execvpe(program[0], program, starting_environment())
    except OSError as err:
        os.write(status_fd, str(err.errno).encode())
    os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
