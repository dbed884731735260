"""The journal's tables: ``Run`` (one row per run) and ``Job`` (one row per name,
the summary the Runs page, ``tslock overdue`` and the metrics read).

Both live in the project's database whichever store holds the locks: the journal is
the project's record of its jobs, not the lock store's."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import models

from . import outcomes

OUTCOME_CHOICES = [(outcome, outcome) for outcome in outcomes.OUTCOMES]

#: The longest name a journal row holds, in characters: the widest column that MariaDB
#: and MySQL can index whole (3,072 bytes a key; utf8mb4 counts four bytes a character,
#: and ``tslock_run``'s indexes add ``started_at`` and ``id``, or ``outcome``). It holds
#: every name that Workers KV and Durable Objects accept (512 bytes with the prefix);
#: longer names (Redis and memory take 1,024 bytes) are journaled under
#: :func:`journal_name`.
NAME_LENGTH = 750
#: The characters of a digest that ends a name too long for the column.
_DIGEST_LENGTH = 64


def journal_name(name: str, length: int = NAME_LENGTH) -> str:
    """The name a job is journaled under: ``name`` itself when it fits in ``length``
    characters; otherwise its beginning, ``"…"`` and the SHA-256 of the whole name in
    hex, ``length`` characters in all. Distinct names stay distinct, the stand-in sorts
    near the name, and every run of the name lands on the same row."""
    if len(name) <= length:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[: length - _DIGEST_LENGTH - 1]}\u2026{digest}"


class Run(models.Model):
    """One run of a job: written when it starts and again when it ends.

    A ``running`` row whose ``deadline`` (the lock's ``lock_until`` as last known,
    moved on by keep-alive) has passed without an end is ``lost``: its process died
    or lost its lock. Readers show it so at once, and the next run of the name writes
    it so."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=NAME_LENGTH)
    provider = models.CharField(max_length=100)
    outcome = models.CharField(max_length=16, choices=OUTCOME_CHOICES)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    #: Seconds from start to end.
    duration = models.FloatField(null=True, blank=True)
    host = models.CharField(max_length=255, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    locked_by = models.CharField(max_length=255, blank=True)
    fencing_token = models.BigIntegerField(null=True, blank=True)
    #: For a skip: who held the lock.
    held_by = models.CharField(max_length=255, blank=True)
    #: For a failure or error: the exception or exit status, scrubbed, at most 1,000 characters.
    detail = models.TextField(blank=True)
    #: While running: when the lock ends unless extended.
    deadline = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tslock_run"
        verbose_name = "run"
        verbose_name_plural = "runs"
        default_permissions = ()
        indexes = [
            # A name's history, newest first, and the purge's "older than" per name.
            models.Index(fields=["name", "-started_at", "-id"], name="tslock_run_name_started"),
            # Every run, newest first (``tslock runs`` without a name), and retention.
            models.Index(fields=["-started_at", "-id"], name="tslock_run_started"),
            # A run's start finds its name's runs still "running" (to write them lost)
            # without reading the name's whole history.
            models.Index(fields=["name", "outcome"], name="tslock_run_name_outcome"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.outcome} at {self.started_at}"


class JobNameField(models.CharField):  # type: ignore[type-arg]
    """``Job``'s key: a ``CharField`` of :data:`NAME_LENGTH` characters that does not
    raise MySQL's ``mysql.W003`` ("MariaDB may not allow unique CharFields to have a
    max_length > 255"). That warning is about the 767-byte key limit of old InnoDB row
    formats; since MariaDB 10.2 and MySQL 5.7 tables are ``DYNAMIC`` with 3,072 bytes a
    key, which :data:`NAME_LENGTH` is chosen to fit (a server that cannot index it fails
    the migration, saying so). Migrations see a plain ``CharField``."""

    def check(self, **kwargs: Any) -> list[Any]:
        return [found for found in super().check(**kwargs) if found.id != "mysql.W003"]

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.CharField", args, kwargs


class Job(models.Model):
    """One row per lock name that has been journaled: its last run, last success,
    schedule (as its last run declared it) and run counts by outcome."""

    name = JobNameField(max_length=NAME_LENGTH, primary_key=True)
    provider = models.CharField(max_length=100, blank=True)
    first_seen_at = models.DateTimeField()
    #: The schedule and grace its decorator declared (``TSLOCK_SCHEDULES`` overrides).
    schedule = models.CharField(max_length=100, blank=True)
    grace = models.FloatField(null=True, blank=True)
    #: The last run that ran the job (not a skip or a store error).
    last_run_id = models.BigIntegerField(null=True, blank=True)
    last_outcome = models.CharField(max_length=16, blank=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_duration = models.FloatField(null=True, blank=True)
    last_deadline = models.DateTimeField(null=True, blank=True)
    last_detail = models.TextField(blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_success_run_id = models.BigIntegerField(null=True, blank=True)
    last_success_duration = models.FloatField(null=True, blank=True)
    #: The last skip or store error, for the page's "last attempt" line.
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_outcome = models.CharField(max_length=16, blank=True)
    runs_succeeded = models.BigIntegerField(default=0)
    runs_failed = models.BigIntegerField(default=0)
    runs_skipped = models.BigIntegerField(default=0)
    runs_error = models.BigIntegerField(default=0)
    runs_lost = models.BigIntegerField(default=0)
    #: The alert thresholds its last run declared (``TSLOCK_SCHEDULES`` overrides): how many
    #: failed runs in a row make it ``failing`` (``None``: 1), and how long a run may go on
    #: before the job is ``running_long`` (seconds; ``None``: no bound).
    failures_before_alert = models.PositiveIntegerField(null=True, blank=True)
    max_duration = models.FloatField(null=True, blank=True)
    #: Set by ``tslock pause`` (or the admin's action), cleared by ``tslock resume``: a
    #: paused job's runs skip, and it raises no alert.
    paused_at = models.DateTimeField(null=True, blank=True)
    #: When ``tslock resume`` last cleared a pause: lateness counts from then at the
    #: earliest, so a job is not late the moment it is resumed.
    resumed_at = models.DateTimeField(null=True, blank=True)
    #: The status the last :class:`Notification` of the name announced (empty: none yet,
    #: which counts as ``ok``), and when it changed to it.
    notified_status = models.CharField(max_length=16, blank=True)
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tslock_job"
        verbose_name = "job"
        verbose_name_plural = "runs"
        # view_job anchors the Runs page; the page uses the Locks page's permission
        # model (view_lock) so one grant shows both.
        default_permissions = ("view",)

    def __str__(self) -> str:
        return str(self.name)


class Notification(models.Model):
    """One change of a job's status, to be told to every channel of ``TSLOCK_ALERTS``
    exactly once. Written (with ``Job.notified_status``) by the evaluator that saw the
    change, under a lock of its own; ``delivered`` lists the channels that took it, and
    ``sent_at`` is set once all have, so a channel that failed is tried again at the next
    evaluation and one that succeeded is never sent it twice."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=NAME_LENGTH)
    #: The new status and the one before it (``ok``, ``late``, ``failing``, ``running_long``).
    status = models.CharField(max_length=16)
    previous = models.CharField(max_length=16)
    #: Why, in a sentence, scrubbed.
    reason = models.TextField(blank=True)
    #: When the change was seen.
    at = models.DateTimeField()
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    #: The keys of the channels that accepted it, as a JSON list.
    delivered = models.JSONField(default=list, blank=True)
    #: When every channel had it; ``None`` while one is still to be tried.
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    #: The last channel failure, scrubbed, at most 1,000 characters.
    last_error = models.TextField(blank=True)

    class Meta:
        db_table = "tslock_notification"
        verbose_name = "notification"
        verbose_name_plural = "notifications"
        default_permissions = ()
        indexes = [
            # A name's notifications, newest first (the Runs page's "last notification").
            models.Index(fields=["name", "-id"], name="tslock_notice_name"),
            # The ones still to send, oldest first.
            models.Index(fields=["sent_at", "id"], name="tslock_notice_unsent"),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.previous} -> {self.status} at {self.at}"
