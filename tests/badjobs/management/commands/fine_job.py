"""A locked command with good arguments: nothing to report."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command(lock_at_most_for="5m", schedule="1h", grace="10m")
class Command(BaseCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("fine")
