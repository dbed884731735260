"""A duration written in words: the decorator refuses it when this module is imported."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command(lock_at_most_for="5 minutes")
class Command(BaseCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        raise AssertionError("never imported, so never run")
