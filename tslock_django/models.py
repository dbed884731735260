"""The database provider's table, which also anchors the admin's Locks page and its
permissions (``view_lock`` and ``release_lock``)."""

from __future__ import annotations

from django.db import models


class Lock(models.Model):
    """One row per lock name. Rows are never deleted by locking: after a release they
    keep the last holder (the admin's history) and the fencing counter, which must
    keep growing across holders. ``DatabaseLockProvider.purge()`` deletes rows expired
    longer than a retention period and records their fencing tokens in
    :class:`FencingMark` first.

    The provider writes times as UTC with its own SQL; read rows through
    ``DatabaseLockProvider.query()`` (or ``list_locks()``), not this model, whose
    datetimes would be taken for local time under ``USE_TZ=False``."""

    name = models.CharField(max_length=255, primary_key=True)
    lock_until = models.DateTimeField()
    locked_at = models.DateTimeField()
    locked_by = models.CharField(max_length=255)
    # Empty once released: a record without a token is kept only for lock_at_least_for.
    token = models.CharField(max_length=64, blank=True)
    fencing_token = models.BigIntegerField(default=0)

    class Meta:
        db_table = "tslock_lock"
        verbose_name = "lock"
        verbose_name_plural = "locks"
        # view_lock comes with the model; releasing is a permission of its own because
        # it is destructive and must not ride on change_lock.
        permissions = [("release_lock", "Can force-release a lock")]
        # Listings: current locks are those with lock_until > now, and a time order's
        # keyset is (time, name), so both range scans and ORDER BY ... LIMIT read
        # these indexes in order. Names need none: they are the primary key. Both
        # columns change on every acquire, which costs writes (on PostgreSQL updates
        # are no longer HOT: WAL per lock+unlock goes from 423 to 832 bytes, 731 with
        # lock_until alone); locked_at's is kept because without it a sort by locked_at
        # that includes expired locks reads the whole table (0.1-3 s a page at a
        # million rows).
        indexes = [
            models.Index(fields=["lock_until", "name"], name="tslock_lock_until_name"),
            models.Index(fields=["locked_at", "name"], name="tslock_locked_at_name"),
        ]

    def __str__(self) -> str:
        return self.name


class FencingMark(models.Model):
    """One row (``id = 1``): the highest fencing token of any row ``purge()`` has
    deleted. A name inserted afresh starts from ``mark + 1``, so a name that is purged
    and locked again still gets a fencing token higher than any it had. Migration 0004
    creates the row; ``purge()`` puts it back if a ``flush`` emptied the table (which
    also emptied ``tslock_lock``, so fresh names starting from 1 again is right)."""

    id = models.PositiveSmallIntegerField(primary_key=True)
    mark = models.BigIntegerField(default=0)

    class Meta:
        db_table = "tslock_fence"
        verbose_name = "fencing high-water mark"
        default_permissions = ()

    def __str__(self) -> str:
        return f"fencing tokens purged up to {self.mark}"


# The journal's tables belong to this app (one migration history), kept in their own room.
from .journal.models import Job, Notification, Run  # noqa: E402

__all__ = ["FencingMark", "Job", "Lock", "Notification", "Run"]
