"""``tslock overdue [--json] [--at ISO-8601] [--notify]``: the scheduled names that are
late, failing, running long, new or paused, with the reason; ``--at`` evaluates the
journal as it is at another instant (to check a schedule's zone and grace,
daylight-saving days included). ``--notify`` first evaluates the alerts
(:mod:`tslock_django.alerts.evaluation`: records each change of status and sends what is
unsent to the channels of ``TSLOCK_ALERTS``), as cron or a CronJob runs it every minute;
a channel that fails is one line on stderr and changes nothing else.

Exit status, for cron monitors and readiness probes: 0 when none is late or
failing, 1 when any is, 2 when the journal could not be read (its database failed, it is
off, or its settings are malformed): one line on stderr then says which database and
why, and nothing goes to stdout, so that no reader takes an error for an empty list.
Reasons quote the journal's details, and are shown scrubbed
(:func:`~tslock_django.core.scrubbing.hide_secrets`), as is that line."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..core.decode import visible
from ..core.scrubbing import cut, hide_secrets
from ..journal.alerting import Listing, not_ok
from ..journal.recorder import journal_database
from ..journal.status import ALERTING

HELP = (
    "List scheduled jobs that are late, failing or running long (exit 1 when any is, 2 when the "
    "journal cannot be read); --notify also sends their changes of status to TSLOCK_ALERTS."
)

#: Exit statuses.
ON_TIME, OVERDUE, UNREADABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON array of flat objects (nothing on stdout when the journal cannot be read)",
    )
    parser.add_argument(
        "--at",
        type=_instant,
        metavar="ISO-8601",
        help="evaluate as of this instant instead of now, with an offset or Z "
        "(e.g. 2026-03-29T03:10:00+02:00); the journal is read as it is",
    )
    parser.add_argument(
        "--notify",
        action="store_true",
        help="first record each change of a job's status and send it (and anything unsent) to the "
        "channels of TSLOCK_ALERTS, once however many processes do this at once",
    )


def _instant(value: str) -> datetime:
    """An ISO-8601 instant with its offset (``Z`` accepted); a usage error otherwise.
    A time without an offset is refused rather than guessed: in which zone it is read
    is the very question ``--at`` is there to check."""
    text = value.strip()
    if text[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat does not read Z
        text = text[:-1] + "+00:00"
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO-8601 time; give e.g. 2026-03-29T03:10:00+02:00 or 2026-03-29T01:10:00Z"
        ) from None
    if found.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} has no offset; give one (e.g. +02:00) or Z, so the instant is not guessed"
        )
    return found


def handle(command: BaseCommand, **options: Any) -> None:
    """Print the overdue names.

    Raises:
        CommandError: exit status 1 when any is late or failing (after the list is
            printed); exit status 2, printing nothing, when the journal is off or its
            settings or database failed (or, with ``--notify``, the evaluation could
            not read or write it).
    """
    if options.get("notify"):
        _notify(command, options.get("at"))
    listing = _read(options.get("at"))
    found = listing.found
    if options["json"]:
        shown = [{**s.as_json(), "reason": hide_secrets(s.reason)} for s in found]
        command.stdout.write(json.dumps(shown, ensure_ascii=True))
    elif not found:
        command.stdout.write("Every scheduled job is on time.")
    else:
        for s in found:
            command.stdout.write(f"{s.status:<12} {visible(s.name)}: {visible(hide_secrets(s.reason))}")
        if listing.unlisted:
            more = listing.unlisted
            command.stdout.write(f"and up to {more} more late, failing or running long, not listed")
    if listing.unlisted or any(s.status in ALERTING for s in found):
        raise CommandError(
            "scheduled jobs are late or failing or running long (listed above)", returncode=OVERDUE
        )


def _notify(command: BaseCommand, at: datetime | None) -> None:
    """Evaluate the alerts at ``at`` (default now); a channel's failure is a line on
    stderr, the journal's (or the lock's) a ``CommandError`` with exit status 2."""
    from django.db import DatabaseError

    from ..alerts.errors import InvalidAlertChannel
    from ..alerts.evaluation import evaluate
    from ..exceptions import LockProviderError

    using = _journal()
    try:
        done = evaluate(now=at, using=using, record=at is None)
    except (ValueError, InvalidAlertChannel) as err:  # TSLOCK_SCHEDULES or TSLOCK_ALERTS malformed
        raise CommandError(str(err), returncode=UNREADABLE) from err
    except (DatabaseError, LockProviderError) as err:
        cause = " ".join(hide_secrets(f"{type(err).__name__}: {err}").split())
        raise CommandError(
            f"the alerts could not be evaluated on database {using!r}: {cut(cause, 300)}",
            returncode=UNREADABLE,
        ) from err
    for key, error in sorted(done.failed.items()):
        command.stderr.write(
            f"tslock: channel {visible(key)} failed ({visible(cut(error, 300))}); "
            "what it did not take is sent at the next evaluation"
        )


def _journal() -> str:
    """The journal's database alias, or a ``CommandError`` with exit status 2."""
    try:
        using = journal_database()
    except ValueError as err:  # TSLOCK_JOURNAL malformed
        raise CommandError(str(err), returncode=UNREADABLE) from err
    if using is None:
        raise CommandError(
            "the journal is off (TSLOCK_JOURNAL = None): tslock cannot tell whether jobs ran",
            returncode=UNREADABLE,
        )
    return using


def _read(at: datetime | None) -> Listing:
    """The names that are not ok at ``at`` (default now), or a ``CommandError`` with
    exit status 2."""
    from django.db import DatabaseError

    using = _journal()
    try:
        # At another instant the journal is only read: a first sight dated then would
        # move a never-run name's first due time for every later reader.
        return not_ok(using, at or datetime.now(timezone.utc), record=at is None)
    except ValueError as err:  # TSLOCK_SCHEDULES malformed
        raise CommandError(str(err), returncode=UNREADABLE) from err
    except DatabaseError as err:
        # Every DATABASES password is among the secrets hidden (and so is a URL's).
        cause = " ".join(hide_secrets(f"{type(err).__name__}: {err}").split())
        raise CommandError(
            f"the journal could not be read from database {using!r}: {cut(cause, 300)}", returncode=UNREADABLE
        ) from err
