"""``manage.py tslock``: look at and repair locks from a shell, thin over the library.

Subcommands:
    ``list [--provider A] [--prefix P] [--all | --state S] [--limit N] [--json]``: the
        current locks of every configured provider (or one), read and printed one page
        at a time, so memory stays flat whatever the stores hold; JSON for scripts,
        never with tokens. A value a store holds that is not a readable record is a row
        of state ``unknown`` (whatever ``--state`` asks for): the table shows
        ``unreadable: <reason>`` as its holder and ``-`` for its times; in JSON its
        ``locked_by``, times and ``remaining_seconds`` are ``null`` and ``unreadable``
        holds the reason (``null`` on every readable row).
    ``release NAME --provider A [--fencing-token N | --token T] [--yes]``: force-release a
        lock, conditional on the holding when a condition is given; an unconditional
        release asks first (or needs ``--yes``).
    ``check``: one harmless query per provider; exit status 1 if any fails. A store
        that answers, even with an unreadable value under the check's prefix, passes
        (it is reachable and speaks the protocol); the unreadable value is named in a
        warning.
    ``purge --expired-for 30d [--provider A] [--dry-run] [--batch-size N]``: delete the
        records that expired longer ago than that (stores that forget expired records
        by themselves say so).
    ``worker --output DIR [--overwrite]``: write the companion Cloudflare Worker bundle.
    ``runtime [--install | --remove]``: the local Workers runtime (see ``_runtime``).
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Iterator
from datetime import datetime, timedelta, tzinfo
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ...conf import providers
from ...core.decode import visible
from ...core.durations import GRAMMAR_HINT, parse_duration
from ...core.human import format_duration, format_remaining
from ...core.provider import LockProvider
from ...core.query import ALL_STATES, CURRENT_STATES, MAX_LIMIT, LockQuery
from ...core.records import ListedRecord, UnreadableRecord
from ...exceptions import InvalidCursor, InvalidLockProvider, LockProviderError, UnsupportedQuery
from . import _runtime

#: The prefix ``check`` lists with: any store can answer it, and it matches no real lock
#: in practice, so the check stays one cheap request.
CHECK_PREFIX = "__tslock_check__/"

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

# Characters that would act on a terminal instead of being shown (ESC, BEL, CR, LF,
# ...), or change how the rest of the line is read (bidi overrides, line separators).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def printable(text: str) -> str:
    """``text`` with control and formatting characters written as escapes (``\\x1b``,
    ``\\u202e``) and backslashes doubled, so what a store holds cannot move the cursor,
    forge a row or hide itself, and the escape is never ambiguous."""
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif unicodedata.category(char) in _UNSAFE_CATEGORIES:
            code = ord(char)
            out.append(
                f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
            )
        else:
            out.append(char)
    return "".join(out)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


#: The largest fencing token any store keeps: a signed 64-bit integer (the database's
#: BIGINT, Redis's integers, the Worker's safe range is smaller and refuses the rest).
MAX_FENCING_TOKEN = 2**63 - 1


def _fencing_token(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_FENCING_TOKEN:
        # A usage error here, not an OverflowError from the database driver later.
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 0 to {MAX_FENCING_TOKEN} (the FENCING column of "
            f"'tslock list'), got {text!r}"
        )
    return value


#: The largest --batch-size: one purge transaction must stay short.
MAX_BATCH = 10_000


def _batch_size(text: str) -> int:
    value = _positive(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_BATCH:,} (one short transaction), got {text!r}"
        )
    return value


def _age(text: str) -> timedelta:
    try:
        # No field name: argparse puts "argument --expired-for: " before the message.
        return parse_duration(text, field="")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).lstrip(": ")) from None


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


def _accept_django_options(parser: argparse.ArgumentParser) -> None:
    """Let Django's own options (``--settings``, ``-v`` ...) follow the subcommand too, as
    they may after any other command: Django reads ``--settings`` and ``--pythonpath``
    wherever they are, but argparse refuses what a subcommand does not declare. Given
    here, they take effect as if given before the subcommand; not given, they leave the
    values from before it alone (SUPPRESS)."""
    hidden = argparse.SUPPRESS
    parser.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], default=hidden, help=hidden)
    parser.add_argument("--settings", default=hidden, help=hidden)
    parser.add_argument("--pythonpath", default=hidden, help=hidden)
    for flag in ("--traceback", "--no-color", "--force-color", "--skip-checks"):
        parser.add_argument(flag, action="store_true", default=hidden, help=hidden)


class Command(BaseCommand):
    help = "List, check and force-release tslock locks in every configured provider."

    # call_command(..., stdin=io.StringIO("yes\n")) answers the confirmation in tests.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="subcommand", metavar="{list,release,check,purge,reindex,worker,runtime}", required=True
        )
        # CommandParser.add_subparsers passes called_from_command_line on, so a usage error
        # in a subcommand is a CommandError under call_command and a usage line in a shell.
        listing = sub.add_parser("list", help="Show the current locks of every provider, page by page.")
        listing.add_argument("--provider", help="Only this provider alias.")
        listing.add_argument("--prefix", default="", help="Only names starting with this.")
        which = listing.add_mutually_exclusive_group()
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
        listing.add_argument("--limit", type=_positive, help="Print at most this many locks in all.")
        listing.add_argument(
            "--json",
            dest="as_json",
            action="store_true",
            help="Print one JSON array (no tokens) for scripts.",
        )

        release = sub.add_parser("release", help="Force-release a lock.")
        release.add_argument("name", help="The lock name.")
        release.add_argument("--provider", required=True, help="The provider alias holding the lock.")
        condition = release.add_mutually_exclusive_group()
        condition.add_argument(
            "--fencing-token",
            type=_fencing_token,
            help="Release only if the lock is still held with this fencing token.",
        )
        condition.add_argument(
            "--token",
            help="Release only if the lock is still held with this token (stores without fencing tokens).",
        )
        release.add_argument(
            "--yes",
            action="store_true",
            help="Do not ask before an unconditional release.",
        )

        sub.add_parser(
            "check",
            help="List each provider once; exit status 1 if any fails.",
        )

        purge = sub.add_parser("purge", help="Delete records that expired long ago.")
        purge.add_argument(
            "--expired-for",
            required=True,
            type=_age,
            metavar="DURATION",
            help=f"Delete records expired for longer than this ({GRAMMAR_HINT}); e.g. 30d.",
        )
        purge.add_argument("--provider", help="Only this provider alias.")
        purge.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; change nothing."
        )
        purge.add_argument(
            "--batch-size",
            type=_batch_size,
            default=500,
            help=f"Records deleted per transaction or request, 1 to {MAX_BATCH:,} (default 500).",
        )

        reindex = sub.add_parser(
            "reindex",
            help="Rebuild the Durable Object Worker's index from its lock objects "
            "(after changing TSLOCK_INDEX_SHARDS).",
        )
        reindex.add_argument("--provider", help="Only this provider alias (a Durable Object provider).")
        reindex.add_argument(
            "--batch-size",
            type=int,
            default=25,
            help="Lock objects per request to the Worker, 1 to 500 (default 25).",
        )

        worker = sub.add_parser(
            "worker",
            help="Write the Cloudflare Worker bundle for the Durable Object provider.",
        )
        worker.add_argument("--output", required=True, help="The directory to write to.")
        worker.add_argument("--overwrite", action="store_true", help="Replace files that already exist.")
        worker.add_argument(
            "--name", dest="worker_name", default="tslock", help="The Worker's name in wrangler.jsonc."
        )

        _runtime.add_arguments(sub.add_parser("runtime", help=_runtime.HELP))
        for subparser in sub.choices.values():
            _accept_django_options(subparser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdin: TextIO = options.get("stdin") or sys.stdin
        action = options["subcommand"]
        getattr(self, f"handle_{action}")(**options)

    # -- helpers -------------------------------------------------------------------------

    def _provider(self, alias: str) -> LockProvider:
        try:
            return providers[alias]
        except InvalidLockProvider as err:
            raise CommandError(str(err)) from err

    def _aliases(self, only: str | None) -> list[str]:
        try:
            aliases = providers.aliases()
        except InvalidLockProvider as err:
            raise CommandError(str(err)) from err
        if only is None:
            return aliases
        if only not in aliases:
            known = ", ".join(aliases) or "(none)"
            raise CommandError(f"no lock provider {only!r} in TSLOCK_PROVIDERS; configured aliases: {known}")
        return [only]

    # -- list ---------------------------------------------------------------------------

    def handle_list(
        self,
        *,
        provider: str | None,
        prefix: str,
        all_states: bool,
        state: str,
        limit: int | None,
        as_json: bool,
        **_: Any,
    ) -> None:
        states = STATE_CHOICES["all" if all_states else state]
        printer = _JsonPrinter(self) if as_json else _TablePrinter(self)
        failed: list[str] = []
        left = limit
        for alias in self._aliases(provider):
            if left == 0:
                break
            try:
                for guarantee, record, now in self._records(alias, prefix, states, left):
                    printer.row(_row(alias, guarantee, record, now))
                    if left is not None:
                        left -= 1
            except (InvalidLockProvider, LockProviderError, UnsupportedQuery, InvalidCursor) as err:
                failed.append(alias)
                # Written not to hold secrets; control characters a store's words may still
                # hold are escaped (not backslashes: messages escape with them already).
                self.stderr.write(visible(f"{alias}: {err}"))
            except Exception as err:  # noqa: BLE001  (report every provider, then fail)
                failed.append(alias)
                self.stderr.write(f"{alias}: could not be listed: unexpected {type(err).__name__}")
        printer.close(failed)
        if failed:
            raise CommandError(f"{len(failed)} provider(s) could not be listed", returncode=1)

    def _records(
        self, alias: str, prefix: str, states: frozenset[str], limit: int | None
    ) -> Iterator[tuple[str, ListedRecord, datetime]]:
        """The records of one provider, by name, one page in memory at a time, each
        with the moment its page was read (what "remaining" is counted from)."""
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
                    self.stderr.write(visible(f"{alias}: {note}"))
            said = page.notes
            for record in page.records:
                yield guarantee, record, now
                count += 1
                if limit is not None and count >= limit:
                    return

    # -- release ------------------------------------------------------------------------

    def handle_release(
        self,
        *,
        name: str,
        provider: str,
        fencing_token: int | None,
        token: str | None,
        yes: bool,
        **_: Any,
    ) -> None:
        self._aliases(provider)
        store = self._provider(provider)
        expected: int | str | None = fencing_token if fencing_token is not None else token
        if expected is None and not yes:
            self._confirm_unconditional(name, provider)
        try:
            released = store.force_unlock(name, expected=expected)
        except ValueError as err:
            raise CommandError(str(err)) from err
        except LockProviderError as err:
            raise CommandError(f"lock {name!r} was not released: {err}") from err
        if released:
            self.stdout.write(self.style.SUCCESS(f"Released lock {name!r} on provider {provider!r}."))
            return
        why = (
            "it is not held"
            if expected is None
            else "it is not held with that " + ("fencing token" if fencing_token is not None else "token")
        )
        raise CommandError(
            f"lock {name!r} on provider {provider!r} was not released: {why}",
            returncode=1,
        )

    def _confirm_unconditional(self, name: str, provider: str) -> None:
        if not (hasattr(self.stdin, "isatty") and self.stdin.isatty()) and self.stdin is sys.stdin:
            raise CommandError(
                "an unconditional release needs --yes when there is no terminal to confirm on; "
                "or give --fencing-token N (or --token T) to release only the holding you saw"
            )
        self.stdout.write(
            f"Release lock {name!r} on provider {provider!r} whoever holds it now? "
            "The holder is not stopped and may still be running. Type 'yes' to continue: ",
            ending="",
        )
        self.stdout.flush()
        answer = self.stdin.readline().strip().lower()
        if answer != "yes":
            raise CommandError("not released: the release was not confirmed")

    # -- check --------------------------------------------------------------------------

    def handle_check(self, **_: Any) -> None:
        aliases = self._aliases(None)
        failed = []
        for alias in aliases:
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
                self.stdout.write(f"{alias}: " + self.style.ERROR(f"FAILED: {reason}"))
            else:
                self.stdout.write(f"{alias}: " + self.style.SUCCESS("ok") + f" ({store.guarantee})")
                for record in page.records:
                    if isinstance(record, UnreadableRecord):
                        self.stdout.write(
                            f"{alias}: "
                            + self.style.WARNING(
                                f"warning: {printable(record.name) or '(no readable name)'}: "
                                f"{record.locked_by}"
                            )
                        )
        if failed:
            raise CommandError(
                f"{len(failed)} of {len(aliases)} lock provider(s) failed: {', '.join(failed)}",
                returncode=1,
            )

    # -- purge --------------------------------------------------------------------------

    def handle_purge(
        self,
        *,
        expired_for: timedelta,
        provider: str | None,
        dry_run: bool,
        batch_size: int,
        **_: Any,
    ) -> None:
        given = format_duration(expired_for)
        failures = 0
        for alias in self._aliases(provider):
            try:
                store = providers[alias]
                if store.self_cleaning:
                    self.stdout.write(f"{alias}: nothing to purge: {store.self_cleaning}")
                    continue
                count = store.purge(expired_for, dry_run=dry_run, batch_size=batch_size)
            except NotImplementedError as err:
                self.stdout.write(f"{alias}: nothing to purge: {err}")
                continue
            except ValueError as err:  # an option this store does not accept
                failures += 1
                self.stderr.write(f"{alias}: purge refused: {err}")
                continue
            except (InvalidLockProvider, LockProviderError) as err:
                failures += 1
                self.stderr.write(f"{alias}: purge failed: {err}")
                continue
            records = f"{count} record{'' if count == 1 else 's'}"
            if dry_run:
                self.stdout.write(f"{alias}: would delete {records} expired for more than {given} (dry run)")
            else:
                self.stdout.write(f"{alias}: deleted {records} expired for more than {given}")
        if failures:
            raise CommandError(f"{failures} provider(s) could not be purged", returncode=1)

    # -- reindex ------------------------------------------------------------------------

    def handle_reindex(self, *, provider: str | None, batch_size: int, **_: Any) -> None:
        # Only the Durable Object Worker keeps an index apart from the locks themselves.
        found = []
        for alias in self._aliases(provider):
            store = self._provider(alias)
            if callable(getattr(store, "reindex", None)):
                found.append((alias, store))
            elif provider is not None:
                raise CommandError(
                    f"{alias}: nothing to rebuild: only a Durable Object provider keeps a separate index"
                )
        if not found:
            self.stdout.write("nothing to rebuild: no Durable Object provider is configured")
            return
        failures = 0
        for alias, store in found:

            def report(resent: int, last: str | None, alias: str = alias) -> None:
                where = f" (through {printable(last)})" if last is not None else ""
                self.stdout.write(f"{alias}: {resent} lock object(s) re-sent{where}")

            try:
                total = store.reindex(batch_size=batch_size, progress=report)  # type: ignore[attr-defined]
            except ValueError as err:
                raise CommandError(str(err)) from err
            except LockProviderError as err:
                failures += 1
                self.stderr.write(f"{alias}: rebuild failed: {err}")
                continue
            self.stdout.write(f"{alias}: index rebuilt from {total} lock object(s)")
        if failures:
            raise CommandError(f"{failures} provider(s) could not rebuild their index", returncode=1)

    def handle_runtime(self, **options: Any) -> None:
        _runtime.handle(self, **options)

    # -- worker -------------------------------------------------------------------------

    def handle_worker(self, *, output: str, overwrite: bool, worker_name: str, **_: Any) -> None:
        # Imported here: the bundle writer is only needed by this subcommand.
        from ...worker.export import write_worker_bundle

        try:
            written = write_worker_bundle(output, worker_name=worker_name, overwrite=overwrite)
        except (
            OSError,
            ValueError,
        ) as err:
            raise CommandError(str(err)) from err
        self.stdout.write(self.style.SUCCESS(f"Wrote the Worker bundle to {output}"))
        for path in written:
            self.stdout.write(f"  {path}")


# -- list output ---------------------------------------------------------------------------


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
