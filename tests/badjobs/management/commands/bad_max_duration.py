"""A run's time bound that is not a duration."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command(lock_at_most_for="5m", schedule="1h", max_duration="a while")
class Command(BaseCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        raise AssertionError("never imported, so never run")
