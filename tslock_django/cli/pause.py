"""``tslock pause NAME`` and ``tslock resume NAME``: stop a job's runs, and let them go
again (:mod:`tslock_django.journal.pausing`).

A paused job's journaled runs skip without taking the lock, journaled ``skipped`` with
the detail ``paused``, and it raises no alert. Pausing a name the journal has never
seen makes its row, so a job can be paused before its first run. Each prints one line
saying what happened (``--json``: one object). Exit status 0; 2 when the journal is off
or cannot be written, with one line on stderr saying why (as ``tslock overdue``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..core.decode import visible
from ..core.scrubbing import cut, hide_secrets
from ..journal import pausing
from ..journal.recorder import journal_database

#: The exit status when the journal is off or cannot be written (as ``tslock overdue``).
UNREADABLE = 2


def _name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the name is empty; give the job's lock name, e.g. nightly-report")
    return text


HELP = "Pause a job: its runs skip (journaled 'paused') and it raises no alert, until tslock resume."


def add_arguments(parser: argparse.ArgumentParser, verb: str = "pause") -> None:
    parser.add_argument("name", type=_name, metavar="NAME", help=f"The lock name of the job to {verb}.")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the line")


def handle(command: BaseCommand, **options: Any) -> None:
    """Pause ``NAME`` (see :func:`change`)."""
    change(command, "pause", pausing.pause, options)


def change(
    command: BaseCommand,
    verb: str,
    act: Callable[[str, str], pausing.PauseChange],
    options: dict[str, Any],
) -> None:
    """Pause or resume (``act``) ``NAME`` and say what happened.

    Raises:
        CommandError: exit status 2 when the journal is off, its setting is malformed or
            its database failed.
    """
    from django.db import DatabaseError

    name: str = options["name"]
    try:
        using = journal_database()
    except ValueError as err:  # TSLOCK_JOURNAL malformed
        raise CommandError(str(err), returncode=UNREADABLE) from err
    if using is None:
        raise CommandError(
            f"the journal is off (TSLOCK_JOURNAL = None): a pause is kept in the journal, so there is "
            f"none to {verb}; turn the journal on to pause jobs",
            returncode=UNREADABLE,
        )
    try:
        done = act(using, name)
    except DatabaseError as err:
        # Every DATABASES password is among the secrets hidden (and so is a URL's).
        cause = " ".join(hide_secrets(f"{type(err).__name__}: {err}").split())
        raise CommandError(
            f"could not {verb} {visible(name)}: the journal on database {using!r} failed: {cut(cause, 300)}",
            returncode=UNREADABLE,
        ) from err
    if options["json"]:
        command.stdout.write(json.dumps(done.as_json(), ensure_ascii=True))
    else:
        command.stdout.write(visible(done.describe()))
