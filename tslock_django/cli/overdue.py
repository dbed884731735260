"""``tslock overdue [--json]``: the scheduled names that are late, failing or new, with
the reason; exit status 1 when any is late or failing (for cron monitors and readiness
probes), 0 otherwise. Reasons quote the journal's details, and are shown scrubbed
(:func:`~tslock_django.core.scrubbing.hide_secrets`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..core.decode import visible
from ..core.scrubbing import hide_secrets
from ..journal.recorder import journal_database
from ..journal.status import ALERTING, statuses

HELP = "List scheduled jobs that are late or failing (exit 1 when any is)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON array of flat objects")


def handle(command: BaseCommand, **options: Any) -> None:
    """Print the overdue names.

    Raises:
        CommandError: any is late or failing (exit status 1, after the list is printed);
            the journal is off or its settings or database failed.
    """
    from django.db import DatabaseError

    try:
        using = journal_database()
        if using is None:
            raise CommandError(
                "the journal is off (TSLOCK_JOURNAL = None): tslock cannot tell whether jobs ran"
            )
        found = [s for s in statuses(using) if s.status != "up"]
    except ValueError as err:  # TSLOCK_JOURNAL or TSLOCK_SCHEDULES malformed
        raise CommandError(str(err)) from err
    except DatabaseError as err:
        failure = hide_secrets(f"{type(err).__name__}: {err}")
        raise CommandError(f"the journal's database failed: {failure}") from err
    alerting = any(s.status in ALERTING for s in found)
    if options["json"]:
        shown = [{**s.as_json(), "reason": hide_secrets(s.reason)} for s in found]
        command.stdout.write(json.dumps(shown, ensure_ascii=True))
    elif not found:
        command.stdout.write("Every scheduled job is on time.")
    else:
        for s in found:
            command.stdout.write(f"{s.status:<8} {visible(s.name)}: {visible(hide_secrets(s.reason))}")
    if alerting:
        raise CommandError("scheduled jobs are late or failing (listed above)", returncode=1)
