"""``tslock check``: one harmless query per provider, and the project's job modules
imported; exit status 1 if any provider fails or any job has a bad decorator argument.

A store that answers, even with an unreadable value under the check's prefix, passes
(it is reachable and speaks the protocol); the unreadable value is named in a warning.
No lock is taken or changed, which makes it a readiness probe for deployments.

The jobs are checked as ``manage.py check`` checks them (tslock.E010, tslock.W001: see
:func:`tslock_django.checks.check_job_arguments`): a ``@locked_command`` or
``@locked_task`` whose arguments the decorator refuses is a job that fails whenever it
runs. Each is one ``jobs: FAILED: ...`` line; a module that does not import for another
reason is a ``jobs: warning: ...`` line. Nothing is printed for jobs that are fine.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..conf import providers
from ..core.decode import visible
from ..core.query import LockQuery
from ..core.records import UnreadableRecord
from ..exceptions import InvalidLockProvider, LockProviderError
from . import aliases
from .text import printable

HELP = (
    "List each provider once and import every job module; exit status 1 if a provider fails "
    "or a job has a bad decorator argument."
)

#: The prefix ``check`` lists with: any store can answer it, and it matches no real lock
#: in practice, so the check stays one cheap request.
CHECK_PREFIX = "__tslock_check__/"


def add_arguments(parser: ArgumentParser) -> None:
    """``check`` takes no options of its own."""


def handle(command: BaseCommand, **_: Any) -> None:
    """One line per provider on stdout: ``ok (guarantee)`` or ``FAILED: reason``.

    Raises:
        CommandError: any provider failed (exit status 1, after every one was tried).
    """
    configured = aliases.selected(None)
    failed = []
    for alias in configured:
        try:
            store = providers[alias]
            page = store.query(LockQuery(prefix=CHECK_PREFIX, limit=1))
        except Exception as err:  # noqa: BLE001  (report every provider, then fail)
            failed.append(alias)
            reason = (
                visible(str(err))
                if isinstance(err, (InvalidLockProvider, LockProviderError))
                else type(err).__name__
            )
            command.stdout.write(f"{alias}: " + command.style.ERROR(f"FAILED: {reason}"))
        else:
            command.stdout.write(f"{alias}: " + command.style.SUCCESS("ok") + f" ({store.guarantee})")
            for record in page.records:
                if isinstance(record, UnreadableRecord):
                    command.stdout.write(
                        f"{alias}: "
                        + command.style.WARNING(
                            f"warning: {printable(record.name) or '(no readable name)'}: {record.locked_by}"
                        )
                    )
    bad_jobs = _check_jobs(command)
    problems = []
    if failed:
        problems.append(f"{len(failed)} of {len(configured)} lock provider(s) failed: {', '.join(failed)}")
    if bad_jobs:
        problems.append(f"{bad_jobs} job(s) have a bad decorator argument (tslock.E010)")
    if problems:
        raise CommandError("; ".join(problems), returncode=1)


def _check_jobs(command: BaseCommand) -> int:
    """Print the job modules' problems, as ``manage.py check`` finds them; returns how
    many jobs have a bad decorator argument."""
    from ..checks import job_argument_messages

    bad = 0
    for message in job_argument_messages():
        if message.is_serious():
            bad += 1
            command.stdout.write("jobs: " + command.style.ERROR(f"FAILED: {visible(message.msg)}"))
        else:
            command.stdout.write("jobs: " + command.style.WARNING(f"warning: {visible(message.msg)}"))
    return bad
