"""``locked_command``: run a management command only while holding its lock.

Exit statuses: 0 when the command ran or was skipped because the lock is held;
1 when the store failed (the command did not run: fail closed) or the command failed;
75 (EX_TEMPFAIL, "try again later") when the lock is held and ``on_locked="fail"``.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from .core.configuration import LockConfiguration
from .core.durations import DurationLike, parse_duration
from .core.human import format_duration
from .core.times import format_time
from .exceptions import InvalidLockProvider, JobPaused, LockHeld, LockProviderError
from .guard import GuardedRun
from .journal.schedules import Schedule, parse_schedule

C = TypeVar("C", bound=type[BaseCommand])

#: EX_TEMPFAIL from sysexits.h: the job can be retried later.
EXIT_LOCKED = 75

NameSpec = str | Callable[[Mapping[str, Any]], str] | None

#: Every command class decorated so far in this process. The system checks read it
#: instead of importing every command module: Django imports the running command
#: before it runs the checks, so that command is always here.
DECORATED: weakref.WeakSet[type[BaseCommand]] = weakref.WeakSet()


def locked_command(
    lock_at_most_for: DurationLike,
    lock_at_least_for: DurationLike = 0,
    *,
    name: NameSpec = None,
    using: str = "default",
    on_locked: Literal["skip", "fail"] = "skip",
    keep_alive: bool = False,
    max_wait: DurationLike = "1h",
    schedule: object = None,
    grace: DurationLike | None = None,
    tz: str | None = None,
    failures_before_alert: int | None = None,
    max_duration: DurationLike | None = None,
) -> Callable[[C], C]:
    """Class decorator for a ``BaseCommand``: ``handle`` runs only under the lock.

    Args:
        lock_at_most_for: the safety net for a holder that dies (duration grammar).
        lock_at_least_for: minimum hold time, also after the command finishes early.
        name: the lock name: the command's name by default; a format string over the
            parsed options (``"import-{source}"``) or a callable taking the options.
        using: the provider alias.
        on_locked: ``"skip"`` (one line on stderr, exit 0) or ``"fail"``
            (``CommandError``, exit 75).
        keep_alive: extend the lock every ``lock_at_most_for / 2`` while ``handle`` runs.
        max_wait: the largest ``--lock-wait`` accepted, so a manual run cannot wait forever.
        schedule: how often the command should run, for the journal's late and failing
            statuses (``tslock overdue``, the Runs page): a period (``"1h"``) or a
            five-field cron expression (``"0 3 * * *"``, in ``tz``).
        grace: how late a run may be before the command is late (default: a tenth of
            the period, at least a minute).
        tz: the IANA time zone a cron ``schedule`` is read in (``"Europe/Berlin"``;
            default ``settings.TIME_ZONE``), daylight saving included.
        failures_before_alert: how many failed runs in a row make the command
            ``failing`` (a whole number from 1; default 1). Needs ``schedule``.
        max_duration: how long a run may go on before the command is ``running_long``
            (a duration; default: no bound). Needs ``schedule``.

    Every run is journaled (``TSLOCK_JOURNAL``): started, then succeeded or failed;
    skipped when held elsewhere or paused (``tslock pause``); error when the store failed.

    The command gains ``--lock-provider``, ``--lock-at-most-for``, ``--lock-at-least-for``
    and ``--lock-wait``. While ``handle`` runs, ``self.lock`` is the :class:`HeldLock`
    (for its ``fencing_token``).

    Raises:
        ValueError: (``InvalidJobArgument``) bad durations, ``on_locked``,
            ``max_wait``, ``schedule``, ``grace``, ``tz``, ``failures_before_alert`` or
            ``max_duration`` (or one of the last four without ``schedule``), when the
            decorator runs: at import.
            ``manage.py check`` reports it ahead of time (tslock.E010).
    """
    # Validate everything now, so a typo fails at import, not at 3 a.m.
    with invalid_job_argument():
        if on_locked not in ("skip", "fail"):
            raise ValueError(f"on_locked must be 'skip' or 'fail', got {on_locked!r}")
        LockConfiguration("probe", lock_at_most_for, lock_at_least_for)
        wait_cap = parse_duration(max_wait, field="max_wait")
        job_schedule = declared_schedule(
            schedule, grace, tz, failures_before_alert=failures_before_alert, max_duration=max_duration
        )

    def decorate(cls: C) -> C:
        if not (isinstance(cls, type) and issubclass(cls, BaseCommand)):
            raise TypeError(f"@locked_command decorates a BaseCommand subclass, not {cls!r}")
        command_name = cls.__module__.rsplit(".", 1)[-1]
        original_add_arguments = cls.add_arguments
        original_handle = cls.handle

        def add_arguments(self: BaseCommand, parser: CommandParser) -> None:
            original_add_arguments(self, parser)
            group = parser.add_argument_group("locking (tslock)")
            group.add_argument("--lock-provider", default=using, help=f"provider alias (default {using!r})")
            group.add_argument("--lock-at-most-for", default=None, help="override lock_at_most_for, e.g. 30m")
            group.add_argument(
                "--lock-at-least-for", default=None, help="override lock_at_least_for, e.g. 1m"
            )
            group.add_argument(
                "--lock-wait",
                default="0",
                help=f"keep trying this long while the lock is held (at most {format_duration(wait_cap)}); "
                "default: once",
            )

        def handle(self: BaseCommand, *args: Any, **options: Any) -> Any:
            config, alias, wait = _resolve(self, options)
            stream = journal_stream(options)
            run = GuardedRun(
                config, alias, keep_alive=keep_alive, wait=wait, schedule=job_schedule, stream=stream
            )
            try:
                held = run.enter()
            except LockHeld as refused:
                line = did_not_run(refused, command_name)
                if on_locked == "fail":
                    raise CommandError(line, returncode=EXIT_LOCKED) from None
                self.stderr.write(f"skipped: {line}")
                return None
            except (LockProviderError, InvalidLockProvider) as err:
                raise CommandError(f"{err}; {command_name} did not run (failing closed)") from err
            except ValueError as err:
                raise CommandError(str(err)) from err
            # Re-entrant use (call_command of itself) shares the outer holding.
            outer = getattr(self, "lock", None)
            self.lock = held  # type: ignore[attr-defined]
            try:
                result = original_handle(self, *args, **options)
            except BaseException as exc:
                self.lock = outer  # type: ignore[attr-defined]
                run.exit(exc)
                raise
            self.lock = outer  # type: ignore[attr-defined]
            run.exit()
            return result

        def _resolve(self: BaseCommand, options: dict[str, Any]) -> tuple[LockConfiguration, str, Any]:
            try:
                lock_name = _lock_name(name, command_name, options)
                at_most = options.get("lock_at_most_for") or lock_at_most_for
                at_least = options.get("lock_at_least_for") or lock_at_least_for
                config = LockConfiguration(lock_name, at_most, at_least)
                wait = parse_duration(options.get("lock_wait") or 0, field="--lock-wait")
            except ValueError as err:
                raise CommandError(str(err)) from err
            if wait > wait_cap:
                # In the form the user wrote ("2h"), not timedelta's "2:00:00".
                given = options.get("lock_wait")
                shown = format_duration(given) if isinstance(given, timedelta) else str(given)
                limit = format_duration(wait_cap)
                raise CommandError(f"--lock-wait {shown} is more than this command allows (at most {limit})")
            return config, options.get("lock_provider") or using, wait

        cls.add_arguments = add_arguments  # type: ignore[method-assign]
        cls.handle = handle  # type: ignore[method-assign]
        cls.tslock_lock_at_most_for = parse_duration(lock_at_most_for, field="lock_at_most_for")  # type: ignore[attr-defined]
        cls.tslock_using = using  # type: ignore[attr-defined]
        cls.tslock_keep_alive = keep_alive  # type: ignore[attr-defined]
        cls.tslock_schedule = job_schedule  # type: ignore[attr-defined]
        DECORATED.add(cls)
        return cls

    return decorate


def declared_schedule(
    schedule: object,
    grace: DurationLike | None,
    tz: object,
    *,
    failures_before_alert: object = None,
    max_duration: object = None,
) -> Schedule | None:
    """The ``schedule``, ``grace``, ``tz`` and alert thresholds of a job decorator, read
    (``ValueError`` when one is bad or given without a schedule)."""
    given = {
        "grace": grace,
        "tz": tz,
        "failures_before_alert": failures_before_alert,
        "max_duration": max_duration,
    }
    for argument, value in given.items():
        if schedule is None and value is not None:
            raise ValueError(
                f"{argument} is given without a schedule; give schedule= too (e.g. schedule='1h'): "
                "a job's status, and so its alerts, follow its schedule"
            )
    if schedule is None:
        return None
    return parse_schedule(
        schedule, grace, tz=tz, failures_before_alert=failures_before_alert, max_duration=max_duration
    )


class InvalidJobArgument(ValueError):
    """An argument of ``@locked_command`` or ``@locked_task`` that cannot be used, raised
    when the decorator runs (when the job's module is imported). The message is one line
    that names the argument and says what it accepts.

    A class of its own so that ``manage.py check``, which imports the project's commands
    and tasks modules, tells a bad argument (tslock.E010) from a module that fails to
    import for another reason.
    """


@contextmanager
def invalid_job_argument() -> Iterator[None]:
    """Raise a ``ValueError`` from the validation inside as :class:`InvalidJobArgument`,
    with the same message and without the validators' frames, so that the traceback a
    job's import prints ends at the decorator's line."""
    try:
        yield
    except InvalidJobArgument:
        raise
    except ValueError as err:
        raise InvalidJobArgument(str(err)) from None


def did_not_run(refused: LockHeld, job: str) -> str:
    """The line every door prints (after ``skipped: ``) when ``job`` found its lock held:
    who holds it and until when, the time per the one rule (core/times.py); or, for a
    paused job, that it is paused and how to resume it."""
    holder = refused.holder
    if isinstance(refused, JobPaused):
        return f"{refused}; {job} did not run"
    if holder is None:
        held = str(refused)
    else:
        who = holder.locked_by or "an unnamed holder"
        held = f"lock {refused.name!r} is held by {who} until {format_time(holder.lock_until)}"
    return f"{held}; {job} did not run"


def _lock_name(spec: NameSpec, command_name: str, options: Mapping[str, Any]) -> str:
    if spec is None:
        return command_name
    if callable(spec):
        result = spec(options)
    else:
        try:
            result = spec.format(**options)
        except (KeyError, IndexError) as err:
            raise ValueError(
                f"lock name template {spec!r} refers to {err} which is not an option of this command; "
                f"options are {', '.join(sorted(options))}"
            ) from None
    if not isinstance(result, str):
        raise ValueError(f"the lock name callable must return a string, got {result!r}")
    return result


def journal_stream(options: dict[str, Any]) -> Any:
    """Where a command's journal warning goes: the stream its ``stderr`` writes to (the
    one given to ``call_command``, else the process's). Not the command's own wrapper:
    on Django 4.2 it cannot say which file it writes to, and the journal needs to know
    whether a logging handler prints that line on the same file already."""
    return options.get("stderr") or sys.stderr
