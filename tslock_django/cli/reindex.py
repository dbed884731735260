"""``tslock reindex [--provider A] [--batch-size N]``: rebuild the Durable Object Worker's
index from its lock objects (step 2 of changing ``TSLOCK_INDEX_SHARDS``). Only that
Worker keeps an index apart from the locks themselves; other stores are passed over.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..core.provider import LockProvider
from ..exceptions import LockProviderError
from . import aliases
from .text import printable

HELP = "Rebuild the Durable Object Worker's index from its lock objects (after changing TSLOCK_INDEX_SHARDS)."


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--provider", help="Only this provider alias (a Durable Object provider).")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=25,
        help="Lock objects per request to the Worker, 1 to 500 (default 25).",
    )


def handle(command: BaseCommand, *, provider: str | None, batch_size: int, **_: Any) -> None:
    """Progress lines on stdout, one failure per provider on stderr.

    Raises:
        CommandError: ``provider`` keeps no index, a bad ``batch_size``, or any
            provider failed (exit status 1).
    """
    found: list[tuple[str, LockProvider]] = []
    for alias in aliases.selected(provider):
        store = aliases.provider_named(alias)
        if callable(getattr(store, "reindex", None)):
            found.append((alias, store))
        elif provider is not None:
            raise CommandError(
                f"{alias}: nothing to rebuild: only a Durable Object provider keeps a separate index"
            )
    if not found:
        command.stdout.write("nothing to rebuild: no Durable Object provider is configured")
        return
    failures = 0
    for alias, store in found:

        def report(resent: int, last: str | None, alias: str = alias) -> None:
            where = f" (through {printable(last)})" if last is not None else ""
            command.stdout.write(f"{alias}: {resent} lock object(s) re-sent{where}")

        try:
            total = store.reindex(batch_size=batch_size, progress=report)  # type: ignore[attr-defined]
        except ValueError as err:
            raise CommandError(str(err)) from err
        except LockProviderError as err:
            failures += 1
            command.stderr.write(f"{alias}: rebuild failed: {err}")
            continue
        command.stdout.write(f"{alias}: index rebuilt from {total} lock object(s)")
    if failures:
        raise CommandError(f"{failures} provider(s) could not rebuild their index", returncode=1)
