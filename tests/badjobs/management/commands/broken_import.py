"""A command that fails to import for a reason of its own, which the check names by
the exception's class only (its message is not quoted)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

raise LookupError("a secret-looking value: hunter2")


class Command(BaseCommand):
    pass
