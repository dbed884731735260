"""Retention of the journal: ``purge_runs`` deletes runs older than a period, in short
batches, and always keeps each name's latest run and latest success (the Runs page and
``tslock overdue`` read those)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import transaction

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
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise ValueError(
            f"older_than must be a timedelta of zero or more, e.g. timedelta(days=90); got {older_than!r}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be a whole number from 1 to {MAX_BATCH}, got {batch_size!r}")
    cutoff = to_db(datetime.now(timezone.utc) - older_than)
    jobs = Job.objects.using(using)
    old = (
        Run.objects.using(using)
        .filter(started_at__lt=cutoff)
        .exclude(outcome=outcomes.RUNNING)
        .exclude(id__in=jobs.exclude(last_run_id=None).values("last_run_id"))
        .exclude(id__in=jobs.exclude(last_success_run_id=None).values("last_success_run_id"))
    )
    if dry_run:
        return old.count()
    deleted = 0
    while True:
        ids = list(old.order_by("started_at", "id").values_list("id", flat=True)[:batch_size])
        if not ids:
            return deleted
        with transaction.atomic(using=using):
            deleted += Run.objects.using(using).filter(id__in=ids).delete()[0]
