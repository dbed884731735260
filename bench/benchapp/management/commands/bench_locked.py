"""The same empty command under ``@locked_command``: start-up plus one acquire and release."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command(lock_at_most_for="1m")
class Command(BaseCommand):
    help = "Do nothing while holding the 'bench_locked' lock."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("locked")
