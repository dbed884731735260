"""Test command: one lock per --shard, records what it saw."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tslock_django import assert_locked, locked_command

CALLS: list[dict[str, Any]] = []


@locked_command(lock_at_most_for="1m", name="job-{shard}")
class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--shard", default="a")
        parser.add_argument("--explode", action="store_true")
        parser.add_argument("--nested", action="store_true")

    def handle(self, *args: Any, **options: Any) -> str:
        held = assert_locked(f"job-{options['shard']}")
        CALLS.append({"shard": options["shard"], "fencing_token": self.lock.fencing_token, "held": held})  # type: ignore[attr-defined]
        if options["explode"]:
            raise RuntimeError("the job failed")
        if options["nested"]:
            from django.core.management import call_command

            # Re-entrant: the same lock name again inside the job runs without a second acquire.
            call_command("locked_job", shard=options["shard"])
        self.stdout.write(f"ran shard {options['shard']}")
        return ""
