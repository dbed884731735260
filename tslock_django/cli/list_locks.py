"""``tslock list [--provider A] [--prefix P] [--all | --state S] [--limit N] [--json]``.

The current locks of every configured provider (or one), read and printed one page at
a time, so memory stays flat whatever the stores hold; JSON for scripts, never with
tokens. A value a store holds that is not a readable record is a row of state
``unknown`` (whatever ``--state`` asks for): the table shows ``unreadable: <reason>`` as
its holder and ``-`` for its times; in JSON its ``locked_by``, times and
``remaining_seconds`` are ``null`` and ``unreadable`` holds the reason (``null`` on every
readable row). A provider that fails is named on stderr, the others are still listed,
the table says it is incomplete, and the exit status is 1.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from collections.abc import Iterator
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from ..conf import providers
from ..core.decode import visible
from ..core.human import format_remaining
from ..core.query import ALL_STATES, CURRENT_STATES, MAX_LIMIT, LockQuery
from ..core.records import ListedRecord, UnreadableRecord
from ..exceptions import InvalidCursor, InvalidLockProvider, LockProviderError, UnsupportedQuery
from . import aliases
from .arguments import positive
from .text import printable

HELP = "Show the current locks of every provider, page by page."

STATE_LABELS = {
    "held": "held",
    "held_for_at_least": "held for at-least",
    "expired": "expired",
    "unknown": "unknown",
}

#: ``--state`` value -> the query states.
STATE_CHOICES: dict[str, frozenset[str]] = {
    "current": CURRENT_STATES,
    "held": frozenset({"held"}),
    "at_least": frozenset({"at_least"}),
    "expired": frozenset({"expired"}),
    "all": ALL_STATES,
}

#: Records asked for per request while listing.
PAGE_SIZE = 500

HEADER = [
    "PROVIDER",
    "NAME",
    "STATE",
    "HELD BY",
    "LOCKED AT",
    "LOCK UNTIL",
    "REMAINING",
    "FENCING",
    "FINGERPRINT",
]


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--provider", help="Only this provider alias.")
    parser.add_argument("--prefix", default="", help="Only names starting with this.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--all", dest="all_states", action="store_true", help="Expired locks too (same as --state all)."
    )
    which.add_argument(
        "--state",
        choices=list(STATE_CHOICES),
        default="current",
        help="Which locks: current (held or in their at-least time, the default), held, at_least, "
        "expired or all.",
    )
    parser.add_argument("--limit", type=positive, help="Print at most this many locks in all.")
    parser.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help="Print one JSON array (no tokens) for scripts.",
    )


def handle(
    command: BaseCommand,
    *,
    provider: str | None,
    prefix: str,
    all_states: bool,
    state: str,
    limit: int | None,
    as_json: bool,
    **_: Any,
) -> None:
    """Print the listing on ``command``'s stdout, each failure on its stderr.

    Raises:
        CommandError: an unknown ``provider``; any provider that could not be listed
            (exit status 1, after the others were printed).
    """
    states = STATE_CHOICES["all" if all_states else state]
    printer: _JsonPrinter | _TablePrinter = _JsonPrinter(command) if as_json else _TablePrinter(command)
    failed: list[str] = []
    left = limit
    for alias in aliases.selected(provider):
        if left == 0:
            break
        try:
            for guarantee, record, now in _records(command, alias, prefix, states, left):
                printer.row(_row(alias, guarantee, record, now))
                if left is not None:
                    left -= 1
        except (InvalidLockProvider, LockProviderError, UnsupportedQuery, InvalidCursor) as err:
            failed.append(alias)
            # Written not to hold secrets; control characters a store's words may still
            # hold are escaped (not backslashes: messages escape with them already).
            command.stderr.write(visible(f"{alias}: {err}"))
        except Exception as err:  # noqa: BLE001  (report every provider, then fail)
            failed.append(alias)
            command.stderr.write(f"{alias}: could not be listed: unexpected {type(err).__name__}")
    printer.close(failed)
    if failed:
        raise CommandError(f"{len(failed)} provider(s) could not be listed", returncode=1)


def _records(
    command: BaseCommand, alias: str, prefix: str, states: frozenset[str], limit: int | None
) -> Iterator[tuple[str, ListedRecord, datetime]]:
    """The records of one provider, by name, one page in memory at a time, each
    with the moment its page was read (what "remaining" is counted from)."""
    # The handler, not aliases.provider_named(): a provider that cannot be built is one
    # failure among the others, not the end of the listing.
    store = providers[alias]
    guarantee = str(store.guarantee)
    size = min(PAGE_SIZE, MAX_LIMIT) if limit is None else min(PAGE_SIZE, limit, MAX_LIMIT)
    count = 0
    said: tuple[str, ...] = ()
    for page in store.pages(LockQuery(prefix=prefix, states=states, limit=size)):
        now = timezone.now()
        # What a store could not do is said when it changes, not on every page.
        for note in page.notes:
            if note not in said:
                command.stderr.write(visible(f"{alias}: {note}"))
        said = page.notes
        for record in page.records:
            yield guarantee, record, now
            count += 1
            if limit is not None and count >= limit:
                return


def _state(record: ListedRecord, now: datetime) -> str:
    try:
        return record.state(now)  # "unknown" for an UnreadableRecord
    except TypeError:  # naive times from a custom provider's bug
        return "unknown"


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def _local(value: Any, zone: tzinfo) -> str:
    # The one rule for times shown to people (core/times.py), with the zone looked up
    # once per page rather than per cell.
    if isinstance(value, datetime) and timezone.is_aware(value):
        return value.astimezone(zone).isoformat(timespec="seconds")
    return "-"


def _row(alias: str, guarantee: str, record: ListedRecord, now: datetime) -> dict[str, Any]:
    remaining = (
        (record.lock_until - now).total_seconds()
        if isinstance(record.lock_until, datetime) and timezone.is_aware(record.lock_until)
        else None
    )
    unreadable = isinstance(record, UnreadableRecord)
    return {
        "provider": alias,
        "guarantee": guarantee,
        "name": record.name,
        "state": _state(record, now),
        # The holder of an unreadable value is not known; the table says why instead.
        "locked_by": None if unreadable else record.locked_by,
        "locked_at": _iso(record.locked_at),
        "lock_until": _iso(record.lock_until),
        "remaining_seconds": remaining,
        "fencing_token": record.fencing_token,
        "token_fingerprint": record.token_fingerprint or None,
        "released": record.released,
        "unreadable": record.unreadable or None,
        "_record": record,
    }


class _JsonPrinter:
    """One JSON array written a row at a time: valid JSON whatever the row count, and
    never more than one row in memory."""

    def __init__(self, command: BaseCommand) -> None:
        self.out = command.stdout
        self.count = 0

    def row(self, row: dict[str, Any]) -> None:
        public = {k: v for k, v in row.items() if not k.startswith("_")}
        self.out.write(
            ("[\n  " if self.count == 0 else ",\n  ") + json.dumps(public, ensure_ascii=False), ending=""
        )
        self.count += 1

    def close(self, failed: list[str]) -> None:
        # The failures are on stderr and in the exit status: stdout stays one JSON document.
        self.out.write("[]" if self.count == 0 else "\n]")


class _TablePrinter:
    """Rows as aligned columns, printed as they come. Column widths only grow (from the
    header's), so the rows printed so far stay aligned with the header without keeping
    them; a wider value later widens its column from there on."""

    def __init__(self, command: BaseCommand) -> None:
        self.command = command
        self.widths = [len(title) for title in HEADER]
        # Looked up once: Django's per-call lookup was most of the time of a long listing.
        self.zone = timezone.get_current_timezone()
        self.count = 0
        self.pending: list[list[str]] = []

    def row(self, row: dict[str, Any]) -> None:
        record: ListedRecord = row["_record"]
        guarantee = " (advisory)" if row["guarantee"] == "advisory" else ""
        remaining = row["remaining_seconds"]
        cells = [
            f"{row['provider']}{guarantee}",
            printable(str(row["name"])) or "(no readable name)",
            STATE_LABELS.get(row["state"], row["state"]),
            printable(record.locked_by),
            _local(record.locked_at, self.zone),
            _local(record.lock_until, self.zone),
            format_remaining(None if remaining is None else timedelta(seconds=remaining)),
            "-" if row["fencing_token"] is None else str(row["fencing_token"]),
            printable(str(row["token_fingerprint"] or "-")),
        ]
        # Lines are written in batches of a page, aligned within the batch.
        self.pending.append(cells)
        if len(self.pending) >= PAGE_SIZE:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        widths = self.widths
        for cells in self.pending:
            widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
        self.widths = widths
        if self.count == 0:
            self.command.stdout.write(self.command.style.MIGRATE_HEADING(self._line(HEADER)))
        # One write per batch: a write per line was a good part of a long listing's time.
        self.command.stdout.write("\n".join(self._line(cells) for cells in self.pending))
        self.count += len(self.pending)
        self.pending = []

    def _line(self, cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True)).rstrip()

    def close(self, failed: list[str]) -> None:
        """End the table; ``failed``: the aliases that could not be listed, whose locks
        are missing from it (a reader of stdout alone must not take it as complete)."""
        self.flush()
        errors = "errors are" if len(failed) > 1 else "error is"
        missing = (
            f"could not list {', '.join(printable(alias) for alias in failed)} (the {errors} on stderr)."
        )
        if self.count == 0:
            self.command.stdout.write(
                f"No locks in the providers that answered; the listing is incomplete: {missing}"
                if failed
                else "No locks."
            )
        elif failed:
            self.command.stdout.write(f"The listing is incomplete: {missing}")
