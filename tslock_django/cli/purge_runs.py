"""``tslock purge --runs-older-than D [--dry-run]``: the journal's retention (see
:func:`tslock_django.journal.retention.purge_runs`)."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from ..core.human import format_duration
from ..journal.recorder import journal_database


def purge_runs(command: BaseCommand, older_than: timedelta, *, dry_run: bool, batch_size: int) -> None:
    from django.db import DatabaseError

    from ..journal.retention import purge_names
    from ..journal.retention import purge_runs as purge

    using = journal_database()
    if using is None:
        raise CommandError("the journal is off (TSLOCK_JOURNAL = None): there are no runs to purge")
    try:
        count = purge(using, older_than, dry_run=dry_run, batch_size=batch_size)
        names = purge_names(using, older_than, dry_run=dry_run, batch_size=batch_size)
    except DatabaseError as err:
        raise CommandError(
            f"journal: purge failed on database {using!r}: {type(err).__name__}: {err}"
        ) from err
    runs = f"{count} run{'' if count == 1 else 's'}"
    given = format_duration(older_than)
    kept = "(each name's latest run and latest success are kept)"
    if dry_run:
        command.stdout.write(f"journal: would delete {runs} older than {given} {kept} (dry run)")
    else:
        command.stdout.write(f"journal: deleted {runs} older than {given} {kept}")
    if names:
        rows = f"{names} name{'' if names == 1 else 's'}"
        why = f"without a run left, first seen more than {given} ago and not in TSLOCK_SCHEDULES"
        if dry_run:
            command.stdout.write(f"journal: would delete {rows} {why} (dry run)")
        else:
            command.stdout.write(f"journal: deleted {rows} {why}")
