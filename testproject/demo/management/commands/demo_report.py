"""A stand-in for a nightly job: it "works" for a few seconds under its lock."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tslock_django import locked_command


# Scheduled nightly at 03:00 (settings.TIME_ZONE): `tslock overdue` says when it is late.
@locked_command(lock_at_most_for="2m", lock_at_least_for="10s", schedule="0 3 * * *", grace="1h")
class Command(BaseCommand):
    help = "Pretend to build a report for a few seconds while holding the 'demo_report' lock."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seconds", type=float, default=3.0, help="how long the work takes")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["seconds"] < 0:
            # Refused in handle, not by the parser, so that the run is journaled as failed:
            # the overdue how-to uses it as a job that fails. A CommandError is one line
            # on stderr, where any other exception would print a traceback.
            raise CommandError(f"--seconds must be 0 or more, got {options['seconds']:g}")
        held = self.lock  # type: ignore[attr-defined]
        self.stdout.write(
            f"ran: building the report as {held.record.locked_by} (fencing token {held.fencing_token})"
        )
        time.sleep(options["seconds"])
        self.stdout.write(self.style.SUCCESS("done: report built"))
