"""Pausing a job: ``Job.paused_at`` set by ``tslock pause`` (or the Runs page's action),
cleared by ``tslock resume``; while it is set, the name's journaled runs skip without
taking the lock, journaled ``skipped`` with the detail ``paused``.

A run asks once, before it takes the lock: one read of ``tslock_job`` by its primary
key on the journal's database (only when the journal is on: without a journal there is
nowhere to keep a pause). A pause that cannot be read never changes the job, as with
every other journal failure: the run goes on, and a warning is logged.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from django.db import DatabaseError, connections, transaction

from ..core.scrubbing import cut, hide_secrets
from .recorder import from_db, message_of, to_db

logger = logging.getLogger("tslock_django")

#: The detail of a run skipped because its job is paused (``held_by`` stays empty).
PAUSED = "paused"


def is_paused(using: str, name: str) -> bool:
    """Whether the job journaled as ``name`` (already :func:`journal_name`'d) is paused:
    one query. ``False`` when the journal cannot be read (a warning is logged)."""
    conn = connections[using]
    try:
        if conn.in_atomic_block:
            # In the caller's transaction a failed query would spoil it: a savepoint keeps
            # a journal failure from reaching the caller's work.
            with transaction.atomic(using=using):
                return _paused(using, name)
        return _paused(using, name)
    except Exception as err:  # noqa: BLE001 - whatever it is, the job must not notice
        if not conn.in_atomic_block:
            with contextlib.suppress(Exception):  # only tidying after the warning's cause
                conn.close_if_unusable_or_obsolete()
        text = cut(" ".join(hide_secrets(message_of(err)).split()), 300)
        logger.warning("tslock: could not read whether %r is paused (%s); it runs", name, text)
        return False


#: The read, by primary key. Raw SQL through Django's cursor: a run pays for it on every
#: start, and the ORM's query building costs as much again as the read itself (figures
#: in ``docs/howto/pause.md``).
_READ = "SELECT 1 FROM tslock_job WHERE name = %s AND paused_at IS NOT NULL"


def _paused(using: str, name: str) -> bool:
    with connections[using].cursor() as cursor:
        cursor.execute(_READ, [name])
        return cursor.fetchone() is not None


@dataclass(frozen=True)
class PauseChange:
    """What :func:`pause` or :func:`resume` did to one name.

    Attributes:
        name: the name as given.
        paused_at: when the job was paused (``None`` after a resume, or a resume of a job
            that was not paused).
        changed: ``False`` when it was already so (paused again, or resumed while running).
        created: the name had never been journaled; its ``Job`` row was made for the pause.
    """

    name: str
    paused_at: datetime | None
    changed: bool
    created: bool = False

    def describe(self) -> str:
        """One line saying what happened, for the CLI and the admin's message."""
        if self.paused_at is not None:
            since = f"{self.paused_at:%Y-%m-%d %H:%M:%S} UTC"
            if not self.changed:
                return f"{self.name} was already paused (since {since}); its runs skip until tslock resume"
            first = " (never run yet: its first run will skip)" if self.created else ""
            return f"paused {self.name} at {since}{first}; its runs skip until tslock resume"
        if not self.changed:
            return f"{self.name} is not paused; nothing to resume"
        return f"resumed {self.name}; its next run takes the lock as usual"

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "paused": self.paused_at is not None,
            "paused_at": self.paused_at.isoformat() if self.paused_at else None,
            "changed": self.changed,
        }


def pause(using: str, name: str, now: datetime | None = None) -> PauseChange:
    """Pause ``name`` on the journal database ``using``; makes its ``Job`` row when the
    name was never journaled, so a job can be paused ahead of its first run. A job
    already paused keeps its first ``paused_at``.

    Raises:
        DatabaseError: the journal could not be written.
    """
    from .models import Job, journal_name

    when = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    journaled = journal_name(name)
    jobs = Job.objects.using(using).filter(name=journaled)
    with transaction.atomic(using=using):
        if jobs.filter(paused_at__isnull=True).update(paused_at=to_db(when)):
            return PauseChange(name, when, changed=True)
        current = jobs.values_list("paused_at", flat=True).first()
        if current is not None:
            return PauseChange(name, from_db(current), changed=False)
    try:
        with transaction.atomic(using=using):
            Job.objects.using(using).create(name=journaled, first_seen_at=to_db(when), paused_at=to_db(when))
    except DatabaseError:
        # Made meanwhile by a first run or another pause: pause that row instead.
        if not jobs.exists():
            raise
        return pause(using, name, when)
    return PauseChange(name, when, changed=True, created=True)


def resume(using: str, name: str) -> PauseChange:
    """Clear ``name``'s pause; a name that is not paused (or never journaled) is left as
    it is.

    Raises:
        DatabaseError: the journal could not be written.
    """
    from .models import Job, journal_name

    changed = Job.objects.using(using).filter(name=journal_name(name), paused_at__isnull=False)
    resumed = changed.update(paused_at=None, resumed_at=to_db(datetime.now(timezone.utc)))
    return PauseChange(name, None, changed=bool(resumed))
