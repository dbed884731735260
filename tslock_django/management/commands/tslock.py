"""``manage.py tslock``: look at and repair locks from a shell, thin over the library.

Subcommands:
    ``list [--provider A] [--prefix P] [--json]``: every record of every configured
        provider (or one); JSON for scripts, never with tokens.
    ``release NAME --provider A [--fencing-token N | --token T] [--yes]``: force-release a
        lock, conditional on the holding when a condition is given; an unconditional
        release asks first (or needs ``--yes``).
    ``check``: one harmless listing per provider; exit status 1 if any fails.
    ``worker --output DIR [--overwrite]``: write the companion Cloudflare Worker bundle.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ...conf import providers
from ...core.provider import LockProvider
from ...core.records import LockRecord
from ...exceptions import InvalidLockProvider, LockProviderError

#: The prefix ``check`` lists with: any store can answer it, and it matches no real lock
#: in practice, so the check stays one cheap request.
CHECK_PREFIX = "__tslock_check__/"

STATE_LABELS = {
    "held": "held",
    "held_for_at_least": "held for at-least",
    "expired": "expired",
}


def _state(record: LockRecord, now: datetime) -> str:
    try:
        return record.state(now)
    except TypeError:  # naive or missing times from a misbehaving store
        return "unknown"


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def _local(value: Any) -> str:
    if isinstance(value, datetime) and timezone.is_aware(value):
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")
    return "-"


class Command(BaseCommand):
    help = "List, check and force-release tslock locks in every configured provider."

    # call_command(..., stdin=io.StringIO("yes\n")) answers the confirmation in tests.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", metavar="{list,release,check,worker}", required=True)
        # CommandParser.add_subparsers passes called_from_command_line on, so a usage error
        # in a subcommand is a CommandError under call_command and a usage line in a shell.
        listing = sub.add_parser("list", help="Show the records of every provider.")
        listing.add_argument("--provider", help="Only this provider alias.")
        listing.add_argument("--prefix", default="", help="Only names starting with this.")
        listing.add_argument(
            "--json",
            dest="as_json",
            action="store_true",
            help="Print JSON (no tokens) for scripts.",
        )

        release = sub.add_parser("release", help="Force-release a lock.")
        release.add_argument("name", help="The lock name.")
        release.add_argument("--provider", required=True, help="The provider alias holding the lock.")
        condition = release.add_mutually_exclusive_group()
        condition.add_argument(
            "--fencing-token",
            type=int,
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

        worker = sub.add_parser(
            "worker",
            help="Write the Cloudflare Worker bundle for the Durable Object provider.",
        )
        worker.add_argument("--output", required=True, help="The directory to write to.")
        worker.add_argument("--overwrite", action="store_true", help="Replace files that already exist.")
        worker.add_argument(
            "--name", dest="worker_name", default="tslock", help="The Worker's name in wrangler.jsonc."
        )

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

    def handle_list(self, *, provider: str | None, prefix: str, as_json: bool, **_: Any) -> None:
        now = timezone.now()
        rows: list[dict[str, Any]] = []
        failures = 0
        for alias in self._aliases(provider):
            try:
                store = providers[alias]
                records = store.list_locks(prefix)
                guarantee = store.guarantee
            except (InvalidLockProvider, LockProviderError) as err:
                failures += 1
                self.stderr.write(f"{alias}: {err}")
                continue
            for record in records:
                remaining = (
                    (record.lock_until - now).total_seconds()
                    if isinstance(record.lock_until, datetime) and timezone.is_aware(record.lock_until)
                    else None
                )
                rows.append(
                    {
                        "provider": alias,
                        "guarantee": guarantee,
                        "name": record.name,
                        "state": _state(record, now),
                        "locked_by": record.locked_by,
                        "locked_at": _iso(record.locked_at),
                        "lock_until": _iso(record.lock_until),
                        "remaining_seconds": remaining,
                        "fencing_token": record.fencing_token,
                        "token_fingerprint": record.token_fingerprint or None,
                        "released": record.released,
                        "_record": record,
                    }
                )
        if as_json:
            self._print_json(rows)
        else:
            self._print_table(rows)
        if failures:
            raise CommandError(f"{failures} provider(s) could not be listed", returncode=1)

    def _print_json(self, rows: Sequence[dict[str, Any]]) -> None:
        public = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
        self.stdout.write(json.dumps(public, indent=2, ensure_ascii=False))

    def _print_table(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            self.stdout.write("No locks.")
            return
        header = [
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
        table = [header]
        for row in rows:
            record: LockRecord = row["_record"]
            guarantee = " (advisory)" if row["guarantee"] == "advisory" else ""
            remaining = row["remaining_seconds"]
            table.append(
                [
                    f"{row['provider']}{guarantee}",
                    row["name"],
                    STATE_LABELS.get(row["state"], row["state"]),
                    str(row["locked_by"]),
                    _local(record.locked_at),
                    _local(record.lock_until),
                    "-" if remaining is None else (f"{int(remaining)}s" if remaining > 0 else "overdue"),
                    "-" if row["fencing_token"] is None else str(row["fencing_token"]),
                    row["token_fingerprint"] or "-",
                ]
            )
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        for i, line in enumerate(table):
            text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            self.stdout.write(self.style.MIGRATE_HEADING(text) if i == 0 else text)

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
                store.list_locks(CHECK_PREFIX)
            except Exception as err:  # noqa: BLE001  (report every provider, then fail)
                failed.append(alias)
                reason = (
                    str(err)
                    if isinstance(err, (InvalidLockProvider, LockProviderError))
                    else type(err).__name__
                )
                self.stdout.write(f"{alias}: " + self.style.ERROR(f"FAILED: {reason}"))
            else:
                self.stdout.write(f"{alias}: " + self.style.SUCCESS("ok") + f" ({store.guarantee})")
        if failed:
            raise CommandError(
                f"{len(failed)} of {len(aliases)} lock provider(s) failed: {', '.join(failed)}",
                returncode=1,
            )

    # -- worker -------------------------------------------------------------------------

    def handle_worker(self, *, output: str, overwrite: bool, worker_name: str, **_: Any) -> None:
        # Imported here: the bundle writer is only needed by this subcommand.
        from ...worker.export import write_worker_bundle

        try:
            written = write_worker_bundle(output, worker_name=worker_name, overwrite=overwrite)
        except (
            FileExistsError,
            NotADirectoryError,
            PermissionError,
            ValueError,
        ) as err:
            raise CommandError(str(err)) from err
        self.stdout.write(self.style.SUCCESS(f"Wrote the Worker bundle to {output}"))
        for path in written:
            self.stdout.write(f"  {path}")
