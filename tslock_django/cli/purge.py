"""``tslock purge [--expired-for 30d] [--runs-older-than 90d] [--provider A] [--dry-run]
[--batch-size N]``.

``--expired-for``: delete the lock records that expired longer ago than that, in batches,
and say per provider how many (or with ``--dry-run`` how many would go). Stores that
forget expired records by themselves say so and are passed over. ``--runs-older-than``:
the journal's retention (:mod:`.purge_runs`). At least one of the two is needed.
"""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..conf import providers
from ..core.durations import GRAMMAR_HINT
from ..core.human import format_duration
from ..exceptions import InvalidLockProvider, LockProviderError
from . import aliases
from .arguments import MAX_BATCH, batch_size, duration
from .purge_runs import purge_runs

HELP = "Delete lock records that expired long ago, and old runs from the journal."


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--expired-for",
        type=duration,
        metavar="DURATION",
        help=f"Delete lock records expired for longer than this ({GRAMMAR_HINT}); e.g. 30d.",
    )
    parser.add_argument(
        "--runs-older-than",
        type=duration,
        metavar="DURATION",
        help="Delete the journal's runs older than this, keeping each name's latest run and success.",
    )
    parser.add_argument("--provider", help="Only this provider alias.")
    parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; change nothing.")
    parser.add_argument(
        "--batch-size",
        type=batch_size,
        default=500,
        help=f"Records deleted per transaction or request, 1 to {MAX_BATCH:,} (default 500).",
    )


def handle(
    command: BaseCommand,
    *,
    expired_for: timedelta | None,
    runs_older_than: timedelta | None,
    provider: str | None,
    dry_run: bool,
    batch_size: int,
    **_: Any,
) -> None:
    """One line per provider (and one for the journal) on stdout; a refusal or failure
    on stderr.

    Raises:
        CommandError: neither age given (exit status 2); an unknown ``provider``; any
            provider refused or failed (exit status 1, after every one was tried).
    """
    if expired_for is None and runs_older_than is None:
        raise CommandError(
            "purge needs --expired-for (lock records), --runs-older-than (runs) or both", returncode=2
        )
    if runs_older_than is not None:
        purge_runs(command, runs_older_than, dry_run=dry_run, batch_size=batch_size)
    if expired_for is None:
        return
    given = format_duration(expired_for)
    failures = 0
    for alias in aliases.selected(provider):
        try:
            store = providers[alias]
            if store.self_cleaning:
                command.stdout.write(f"{alias}: nothing to purge: {store.self_cleaning}")
                continue
            count = store.purge(expired_for, dry_run=dry_run, batch_size=batch_size)
        except NotImplementedError as err:
            command.stdout.write(f"{alias}: nothing to purge: {err}")
            continue
        except ValueError as err:  # an option this store does not accept
            failures += 1
            command.stderr.write(f"{alias}: purge refused: {err}")
            continue
        except (InvalidLockProvider, LockProviderError) as err:
            failures += 1
            command.stderr.write(f"{alias}: purge failed: {err}")
            continue
        records = f"{count} record{'' if count == 1 else 's'}"
        if dry_run:
            command.stdout.write(f"{alias}: would delete {records} expired for more than {given} (dry run)")
        else:
            command.stdout.write(f"{alias}: deleted {records} expired for more than {given}")
    if failures:
        raise CommandError(f"{failures} provider(s) could not be purged", returncode=1)
