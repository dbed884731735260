"""``manage.py tslock run NAME --at-most-for D [...] -- PROGRAM [ARGS...]``: run any
program under a lock, journaled, for cron lines and Kubernetes CronJobs.

The program runs as a child (:mod:`tslock_django.runner`) while the lock is held; its exit
status is the program's own, or says why it did not run (``docs/reference/exit-statuses.md``).
The status is given by ``sys.exit`` from a shell, after the lock is released and the
journal written, so a program that exits 3 looks like itself exiting 3 (``CommandError``
would print first); under ``call_command`` it is a ``CommandError`` carrying it as
``returncode``. Why, and how signals reach the program: ``docs/explanation/run.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..core.configuration import LockConfiguration
from ..core.durations import GRAMMAR_HINT, parse_duration
from ..decorators import EXIT_LOCKED, did_not_run, journal_stream
from ..exceptions import InvalidLockProvider, LockHeld, LockProviderError
from ..guard import GuardedRun
from ..journal.schedules import parse_schedule
from ..runner import Child

HELP = "Run a program under a lock: tslock run NAME --at-most-for 10m -- PROGRAM [ARGS...]"

DESCRIPTION = (
    "Takes the lock NAME, runs PROGRAM (no shell) with this process's stdin, stdout and stderr "
    "and the environment tslock was started with, and releases the lock once PROGRAM has ended. "
    "PROGRAM runs in a session and process group of its own: SIGTERM, SIGINT and SIGHUP sent to "
    "tslock (Ctrl-C included) go to that whole group, so to what PROGRAM started too, and what it "
    "leaves running there is killed before the lock is released. If tslock is killed, even with "
    "SIGKILL, the group is killed as well (a watchdog process in the group; on Linux also a "
    "parent-death signal), so PROGRAM never runs without its lock. A signal that arrives before "
    "PROGRAM starts keeps it from starting. Exit status: PROGRAM's, 128+N when signal N ended it, "
    "0 when skipped, held elsewhere or paused by tslock pause (75 with --on-locked fail), 1 when "
    "the store failed, 127 when PROGRAM cannot be started, 2 for a usage mistake."
)

USAGE_HINT = "put the program after --, e.g. tslock run nightly-report --at-most-for 30m -- ./report.sh --all"


def _name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the lock name is empty; give a name such as nightly-report")
    return text


def _duration(field: str) -> Any:
    def parse(text: str) -> timedelta:
        try:
            return parse_duration(text, field=field)
        except ValueError as err:
            # argparse names the option already.
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{field}: ")) from None

    parse.__name__ = "duration"  # argparse names the type in its "invalid ... value" line
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tslock run``, and the split at ``--`` (everything after it is
    the program and its arguments, never read as options of tslock)."""
    parser.usage = (
        "%(prog)s NAME --at-most-for D [--at-least-for D] [--keep-alive] [--provider A] [--wait D] "
        "[--on-locked {skip,fail}] [--schedule S [--grace G] [--tz Z] [--failures-before-alert N] "
        "[--max-duration D]] -- PROGRAM [ARGS...]"
    )
    parser.description = DESCRIPTION
    parser.add_argument("name", type=_name, metavar="NAME", help="The lock name.")
    parser.add_argument(
        "--at-most-for",
        required=True,
        type=_duration("--at-most-for"),
        metavar="D",
        help=f"Hold the lock at most this long if this process dies ({GRAMMAR_HINT}).",
    )
    parser.add_argument(
        "--at-least-for",
        type=_duration("--at-least-for"),
        default=timedelta(0),
        metavar="D",
        help="Keep the lock at least this long, also when the program ends sooner (default 0).",
    )
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="Extend the lock every at-most-for / 2 while the program runs.",
    )
    parser.add_argument("--provider", default="default", metavar="A", help="The provider alias (default).")
    parser.add_argument(
        "--wait",
        type=_duration("--wait"),
        default=timedelta(0),
        metavar="D",
        help="Keep trying this long while the lock is held (default: try once).",
    )
    parser.add_argument(
        "--on-locked",
        choices=["skip", "fail"],
        default="skip",
        help=f"Held elsewhere: skip (exit 0, the default) or fail (exit {EXIT_LOCKED}).",
    )
    parser.add_argument(
        "--schedule",
        metavar="S",
        help="How often the job should run, for 'tslock overdue': a period (1h) or a cron expression.",
    )
    parser.add_argument("--grace", metavar="G", help="How late a run may be (needs --schedule).")
    parser.add_argument(
        "--tz",
        metavar="Z",
        help="The IANA time zone a cron --schedule is read in, e.g. Europe/Berlin (default: TIME_ZONE).",
    )
    parser.add_argument(
        "--failures-before-alert",
        type=_failures,
        metavar="N",
        help="How many failed runs in a row make the job failing (default 1; needs --schedule).",
    )
    parser.add_argument(
        "--max-duration",
        type=_bound,
        metavar="D",
        help="How long a run may go on before the job is running_long (needs --schedule).",
    )
    _split_at_double_dash(parser)


def _bound(text: str) -> timedelta:
    """``--max-duration``: a duration of more than zero."""
    bound: timedelta = _duration("--max-duration")(text)
    if bound <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} is no time at all; give a positive duration, e.g. 30m")
    return bound


def _failures(text: str) -> int:
    """``--failures-before-alert``: a whole number from 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number from 1; give how many failed runs in a row make the job "
            "failing, e.g. 3 (1: alert on the first failure)"
        )
    return count


def _split_at_double_dash(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` take everything after the first ``--`` as the program.

    argparse cannot do it alone: a positional list after ``NAME`` and the options would
    either swallow the options (``REMAINDER``) or lose track of ``--`` (``*``), and a
    forgotten ``--`` would run the first option's value as a program. The split is made
    before argparse sees the words; the checks that span options (``--grace`` needs
    ``--schedule``, at-least within at-most) are usage errors here too, so every mistake
    exits 2 with argparse's message before anything is locked.
    """
    parse_known = parser.parse_known_args

    def parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        words = list(sys.argv[1:] if args is None else args)
        cut = words.index("--") if "--" in words else len(words)
        parsed, extras = parse_known(words[:cut], namespace)
        if cut == len(words):
            found = f" (found {' '.join(extras)!r} without it)" if extras else ""
            parser.error(f"no -- before the program{found}; {USAGE_HINT}")
        program = words[cut + 1 :]
        if not program or not program[0]:
            parser.error(f"no program after --; {USAGE_HINT}")
        parsed.program = program
        _check_together(parser, parsed)
        return parsed, extras

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]


def _check_together(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    if options.grace is not None and options.schedule is None:
        parser.error("--grace needs --schedule (e.g. --schedule 1h --grace 10m)")
    if options.tz is not None and options.schedule is None:
        parser.error("--tz needs --schedule (e.g. --schedule '30 2 * * *' --tz Europe/Berlin)")
    if options.failures_before_alert is not None and options.schedule is None:
        parser.error(
            "--failures-before-alert needs --schedule (e.g. --schedule 1h --failures-before-alert 3)"
        )
    if options.max_duration is not None and options.schedule is None:
        parser.error("--max-duration needs --schedule (e.g. --schedule 1h --max-duration 20m)")
    try:
        LockConfiguration(options.name, options.at_most_for, options.at_least_for)
        options.job_schedule = (
            parse_schedule(
                options.schedule,
                options.grace,
                tz=options.tz,
                failures_before_alert=options.failures_before_alert,
                max_duration=options.max_duration,
                field="--schedule",
            )
            if options.schedule is not None
            else None
        )
    except ValueError as err:
        parser.error(str(err))


def handle(command: BaseCommand, **options: Any) -> None:
    """Run the program under its lock and end with its exit status (see :func:`exit_with`)."""
    exit_with(command, run_program(command, options))


def run_program(command: BaseCommand, options: dict[str, Any]) -> int | None:
    """Run the program under its lock; returns the exit status (``None`` for 0).

    Raises:
        CommandError: the store failed (status 1), the lock is held with
            ``--on-locked fail`` (status 75), or the lock cannot be used as asked
            (e.g. a name too long for the store: status 2).
    """
    program: list[str] = options["program"]
    config = LockConfiguration(options["name"], options["at_most_for"], options["at_least_for"])
    run = GuardedRun(
        config,
        options["provider"],
        keep_alive=options["keep_alive"],
        wait=options["wait"],
        schedule=options.get("job_schedule"),
        stream=journal_stream(options),
    )
    shown = program[0]
    # SIGTERM, SIGINT and SIGHUP are handled from before the lock is taken until it is
    # back: one that arrives while the lock is being taken (the grant included) is noted
    # and keeps the program from starting, and the run still ends in the journal and
    # releases the lock; later ones go to the program's process group.
    with Child(program) as child:
        try:
            run.enter()
        except LockHeld as refused:
            line = did_not_run(refused, shown)
            if options["on_locked"] == "fail":
                raise CommandError(line, returncode=EXIT_LOCKED) from None
            command.stderr.write(f"skipped: {line}")
            return 128 + child.pending[0] if child.pending else None
        except (LockProviderError, InvalidLockProvider) as err:
            raise CommandError(f"{err}; {shown} did not run (failing closed)") from err
        except ValueError as err:
            raise CommandError(str(err), returncode=2) from err
        try:
            ended = child.run()
        except BaseException as exc:  # whatever it was, the lock goes back
            run.exit(exc)
            raise
        if ended.error is not None:
            run.exit(ended.error)
            command.stderr.write(f"tslock run: cannot start {shown!r}: {ended.error.strerror or ended.error}")
        elif ended.returncode is None:
            run.exit(InterruptedError(f"signal {ended.signal} arrived before {shown} started"))
        else:
            run.exit(exit_status=ended.returncode)
    return ended.status or None


def exit_with(command: BaseCommand, status: int | None) -> None:
    """End the subcommand with ``status``; the last step, after the lock is released.

    From a shell: ``SystemExit(status)`` (no extra line on stderr). Under
    ``call_command``: a ``CommandError`` with ``returncode=status``.
    """
    if not status:
        return
    if getattr(command, "_called_from_command_line", False):
        sys.exit(status)
    raise CommandError(f"the program ended with exit status {status}", returncode=status)
