"""``tslock runs [NAME] [--outcome O] [--limit N] [--json]``: the journal's runs, newest
first (a name's history, or every name's). Details and holders are shown scrubbed
(:func:`~tslock_django.core.scrubbing.hide_secrets`), also those of rows written before
the journal scrubbed what it stores.

The table shows each run's provider (the alias of the store that held its lock) when
that can differ between runs: when more than one provider is configured, or a run
listed was locked on a provider other than the one configured. ``--json`` always has it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..conf import providers
from ..core.decode import visible
from ..core.scrubbing import hide_secrets
from ..core.times import format_time
from ..exceptions import InvalidLockProvider
from ..journal import outcomes
from ..journal.recorder import from_db, journal_database
from ..journal.status import outcome_now, runs

HELP = "Show the journal's runs, newest first."
#: The most runs one call prints.
MAX_RUNS = 10_000


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {MAX_RUNS}, got {text!r}"
        ) from None
    if not 1 <= value <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_RUNS}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default=None, help="one lock name's runs (default: every name's)")
    parser.add_argument("--outcome", choices=outcomes.OUTCOMES, help="only runs that ended so")
    parser.add_argument(
        "--limit", type=_limit, default=20, help=f"at most this many (1 to {MAX_RUNS}; default 20)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON array of flat objects")


def as_json(run: Any, outcome: str) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        aware = from_db(value)
        return aware.isoformat() if aware else None

    return {
        "id": run.id,
        "name": run.name,
        "provider": run.provider,
        "outcome": outcome,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration": run.duration,
        "host": run.host,
        "pid": run.pid,
        "locked_by": hide_secrets(run.locked_by),
        "fencing_token": run.fencing_token,
        "held_by": hide_secrets(run.held_by) or None,
        "detail": hide_secrets(run.detail) or None,
    }


def handle(command: BaseCommand, **options: Any) -> None:
    from datetime import datetime, timezone

    from django.db import DatabaseError

    try:
        using = journal_database()
    except ValueError as err:
        raise CommandError(str(err)) from err
    if using is None:
        raise CommandError(
            "the journal is off (TSLOCK_JOURNAL = None); set it to {'using': 'default'} to record runs"
        )
    try:
        found = runs(using, name=options["name"], outcome=options["outcome"], limit=options["limit"])
    except DatabaseError as err:
        failure = hide_secrets(f"{type(err).__name__}: {err}")
        raise CommandError(f"the journal's database {using!r} failed: {failure}") from err
    now = datetime.now(timezone.utc)
    rows = [as_json(run, outcome_now(run.outcome, from_db(run.deadline), now)) for run in found]
    if options["json"]:
        command.stdout.write(json.dumps(rows, ensure_ascii=True))
        return
    if not rows:
        command.stdout.write("No runs.")
        return
    with_provider = _show_provider(rows)
    for run, row in zip(found, rows, strict=True):
        duration = "-" if row["duration"] is None else f"{row['duration']:.2f}s"
        extra = row["detail"] or (f"held by {row['held_by']}" if row["held_by"] else "")
        started = format_time(from_db(run.started_at))  # type: ignore[arg-type]
        provider = f"{visible(row['provider'])}  " if with_provider else ""
        command.stdout.write(
            f"{started}  {visible(row['name'])}  {provider}{row['outcome']:<9}  {duration:>9}  "
            f"{visible(row['host'] or '-')}:{row['pid'] or '-'}  {visible(extra)}".rstrip()
        )


def _show_provider(rows: list[dict[str, Any]]) -> bool:
    """Whether the provider column tells anything: more than one provider configured,
    or a run locked on one that is not (or no longer) the configured one."""
    try:
        configured = set(providers.aliases())
    except InvalidLockProvider:
        configured = set()  # the system checks report it; the runs are still worth showing
    return len(configured | {row["provider"] for row in rows}) > 1
