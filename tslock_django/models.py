"""The database provider's table, which also anchors the admin's Locks page and its
permissions (``view_lock`` and ``release_lock``)."""

from __future__ import annotations

from django.db import models


class Lock(models.Model):
    """One row per lock name. Rows are never deleted by locking: after a release they
    keep the last holder (the admin's history) and the fencing counter, which must
    keep growing across holders.

    The provider writes times as UTC with its own SQL; read rows through
    ``DatabaseLockProvider.list_locks()``, not this model, whose datetimes would be
    taken for local time under ``USE_TZ=False``."""

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

    def __str__(self) -> str:
        return self.name
