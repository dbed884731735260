"""Test command: fails (exit 75) instead of skipping when the lock is held."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command(lock_at_most_for="1m", on_locked="fail", name=lambda options: "strict")
class Command(BaseCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("ran strict")
