"""Test command: holds a short lock with keep-alive for longer than lock_at_most_for."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tslock_django import locked_command

SEEN: list[Any] = []


@locked_command(lock_at_most_for="0.4s", keep_alive=True)
class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seconds", type=float, default=1.2)

    def handle(self, *args: Any, **options: Any) -> None:
        time.sleep(options["seconds"])
        SEEN.append(self.lock)  # type: ignore[attr-defined]
