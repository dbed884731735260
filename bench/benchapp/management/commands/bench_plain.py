"""An undecorated command that does nothing: the start-up baseline."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Do nothing (start-up baseline for the benchmark)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("plain")
