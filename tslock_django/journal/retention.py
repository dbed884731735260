"""Retention of the journal: ``purge_runs`` deletes runs older than a period, in short
batches, and always keeps each name's latest run and latest success (the Runs page and
``tslock overdue`` read those); ``purge_names`` then deletes the ``Job`` rows of names
left without a run (names that only ever skipped or met a store error), unless
``TSLOCK_SCHEDULES`` names them or they are paused, so that the names the metrics and the health check
count do not only grow."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from . import outcomes
from .models import Job, Run
from .recorder import to_db

#: The most runs one purge transaction deletes.
MAX_BATCH = 10_000


def purge_runs(using: str, older_than: timedelta, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete runs that started more than ``older_than`` ago; returns how many (with
    ``dry_run``: how many would be). Runs still ``running`` are kept, as are each name's
    latest run and latest success.

    Raises:
        ValueError: ``older_than`` is negative or ``batch_size`` is not 1 to ``MAX_BATCH``.
    """
    _check(older_than, batch_size)
    old = _old_runs(using, older_than)
    if dry_run:
        return old.count()
    deleted = 0
    while True:
        ids = list(old.order_by("started_at", "id").values_list("id", flat=True)[:batch_size])
        if not ids:
            return deleted
        with transaction.atomic(using=using):
            deleted += Run.objects.using(using).filter(id__in=ids).delete()[0]


def purge_names(using: str, older_than: timedelta, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete the ``Job`` rows of names that have no run left after :func:`purge_runs`
    (with ``dry_run``: that would have none), were first seen more than ``older_than``
    ago, are not in ``TSLOCK_SCHEDULES`` (a scheduled name that never ran must stay
    visible: it is the one to alert on) and are not paused (a pause made ahead of a first
    run must not vanish). Returns how many.

    Raises:
        ValueError: as :func:`purge_runs`.
    """
    _check(older_than, batch_size)
    cutoff = to_db(datetime.now(timezone.utc) - older_than)
    kept_runs = Run.objects.using(using).exclude(id__in=_old_runs(using, older_than).values("id"))
    gone = (
        Job.objects.using(using)
        .filter(first_seen_at__lt=cutoff, paused_at=None)
        .exclude(name__in=list(getattr(settings, "TSLOCK_SCHEDULES", None) or ()))
        .exclude(name__in=kept_runs.values("name"))
    )
    if dry_run:
        return gone.count()
    deleted = 0
    while True:
        names = list(gone.order_by("name").values_list("name", flat=True)[:batch_size])
        if not names:
            return deleted
        with transaction.atomic(using=using):
            # Checked again: a run that started since keeps its name. (Read first, then
            # deleted by name: MySQL refuses a DELETE whose subquery reads its own table.)
            still = list(gone.filter(name__in=names).values_list("name", flat=True))
            Job.objects.using(using).filter(name__in=still).delete()
            deleted += len(still)


def _check(older_than: timedelta, batch_size: int) -> None:
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise ValueError(
            f"older_than must be a timedelta of zero or more, e.g. timedelta(days=90); got {older_than!r}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be a whole number from 1 to {MAX_BATCH}, got {batch_size!r}")


def _old_runs(using: str, older_than: timedelta) -> QuerySet[Run]:
    """The runs :func:`purge_runs` deletes: started before the cutoff, not running, and
    neither their name's latest run nor its latest success."""
    cutoff = to_db(datetime.now(timezone.utc) - older_than)
    jobs = Job.objects.using(using)
    return (
        Run.objects.using(using)
        .filter(started_at__lt=cutoff)
        .exclude(outcome=outcomes.RUNNING)
        .exclude(id__in=jobs.exclude(last_run_id=None).values("last_run_id"))
        .exclude(id__in=jobs.exclude(last_success_run_id=None).values("last_success_run_id"))
    )
