"""``tslock check``: one harmless query per provider; exit status 1 if any fails.

A store that answers, even with an unreadable value under the check's prefix, passes
(it is reachable and speaks the protocol); the unreadable value is named in a warning.
No lock is taken or changed, which makes it a readiness probe for deployments.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..conf import providers
from ..core.decode import visible
from ..core.query import LockQuery
from ..core.records import UnreadableRecord
from ..exceptions import InvalidLockProvider, LockProviderError
from . import aliases
from .text import printable

HELP = "List each provider once; exit status 1 if any fails."

#: The prefix ``check`` lists with: any store can answer it, and it matches no real lock
#: in practice, so the check stays one cheap request.
CHECK_PREFIX = "__tslock_check__/"


def add_arguments(parser: ArgumentParser) -> None:
    """``check`` takes no options of its own."""


def handle(command: BaseCommand, **_: Any) -> None:
    """One line per provider on stdout: ``ok (guarantee)`` or ``FAILED: reason``.

    Raises:
        CommandError: any provider failed (exit status 1, after every one was tried).
    """
    configured = aliases.selected(None)
    failed = []
    for alias in configured:
        try:
            store = providers[alias]
            page = store.query(LockQuery(prefix=CHECK_PREFIX, limit=1))
        except Exception as err:  # noqa: BLE001  (report every provider, then fail)
            failed.append(alias)
            reason = (
                visible(str(err))
                if isinstance(err, (InvalidLockProvider, LockProviderError))
                else type(err).__name__
            )
            command.stdout.write(f"{alias}: " + command.style.ERROR(f"FAILED: {reason}"))
        else:
            command.stdout.write(f"{alias}: " + command.style.SUCCESS("ok") + f" ({store.guarantee})")
            for record in page.records:
                if isinstance(record, UnreadableRecord):
                    command.stdout.write(
                        f"{alias}: "
                        + command.style.WARNING(
                            f"warning: {printable(record.name) or '(no readable name)'}: {record.locked_by}"
                        )
                    )
    if failed:
        raise CommandError(
            f"{len(failed)} of {len(configured)} lock provider(s) failed: {', '.join(failed)}",
            returncode=1,
        )
