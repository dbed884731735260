"""A cron schedule read in a time zone that does not exist."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command(lock_at_most_for="5m", schedule="30 2 * * *", tz="Europe/Berlín")
class Command(BaseCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        raise AssertionError("never imported, so never run")
