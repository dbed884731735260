"""Test command: a scheduled, journaled job that can succeed, fail, exit or sleep."""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tslock_django import locked_command


@locked_command(lock_at_most_for="1m", schedule="1h", grace="5m", name="journaled-{shard}")
class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--shard", default="a")
        parser.add_argument("--fail", default="", help="raise a CommandError with this text")
        parser.add_argument("--exit", type=int, default=None, help="sys.exit with this status")
        parser.add_argument("--sleep", type=float, default=0.0)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["sleep"]:
            self.stdout.write("sleeping", ending="\n")
            self.stdout.flush()
            time.sleep(options["sleep"])
        if options["fail"]:
            raise CommandError(options["fail"])
        if options["exit"] is not None:
            sys.exit(options["exit"])
        self.stdout.write("done")
