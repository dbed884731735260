"""One evaluation of the alerts: find each change of a job's status, record it once, and
tell every channel of ``TSLOCK_ALERTS`` about it once.

An evaluation runs under a tslock lock of its own (:data:`LOCK_NAME`), taken through the
database lock provider on the journal's database, so that any number of processes may
evaluate at once (``tslock overdue --notify`` from several hosts, the ends of runs) and
still record each change once and send it once: the one that holds the lock does the
work, the others return at once. Two steps, each safe to cut short:

1. *Record.* The candidates are bounded whatever the number of names: the names whose
   last notification announced a problem (they may have recovered), the late, failing
   or running-long candidates as :func:`~tslock_django.journal.alerting.alerting`
   narrows them, and the names the caller gives (the job that just ended). A status that
   differs from ``Job.notified_status`` (empty counts as ``ok``; ``new`` and ``paused``
   count as no change) is one :class:`~tslock_django.journal.models.Notification`,
   inserted in the transaction that moves ``notified_status`` on, and only if no one
   moved it meanwhile.
2. *Deliver.* The unsent notifications, oldest first, a bounded batch, go to every
   channel whose key is not yet in their ``delivered``; the row is saved after each
   call, and ``sent_at`` is set once every channel has it. A channel that fails (or
   does not answer within :data:`SEND_DEADLINE`) is not tried again in this evaluation,
   so it keeps its notifications in order and its waits bounded; the next evaluation
   tries it again.

A send that timed out may still have been delivered: it is then sent again at the next
evaluation. The notification's id (:attr:`Notice.id`, the webhook's
``X-Tslock-Notification-Id``) is the same for every attempt, so a receiver can drop it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from django.db import connections, transaction

from ..core.configuration import LockConfiguration
from ..core.scrubbing import cut, hide_secrets
from ..exceptions import LockProviderError
from ..journal import outcomes
from ..journal.alerting import EVALUATED, alerting
from ..journal.models import Job, Notification, journal_name
from ..journal.recorder import from_db, journal_database, message_of, to_db
from ..journal.status import judge, schedules_from_settings
from .configured import configured_channels
from .notice import Channel, Notice

logger = logging.getLogger("tslock_django")

#: The evaluators' lock, in the journal database's ``tslock_lock`` table.
LOCK_NAME = "tslock:alerts"
#: How long one channel's ``send`` may take before it counts as failed (seconds), for a
#: channel without a ``timeout`` of its own; one with it (the built-in channels' option)
#: gets that and :data:`DEADLINE_MARGIN` more, so its own timeout is what the user sees.
SEND_DEADLINE = 5.0
DEADLINE_MARGIN = 1.0
#: After this long (seconds) an evaluation starts no more sends; the rest wait for the
#: next evaluation.
SENDING_BUDGET = 60.0
#: The lock outlives the longest evaluation (the budget, one last send with the longest
#: timeout a built-in channel accepts, 60 s, and the reads), and holds up the next
#: evaluator at most this long after one that died.
LOCK_AT_MOST_FOR = timedelta(minutes=3)
#: The most unsent notifications read by one evaluation, oldest first.
BATCH = 200
#: Statuses that are not a change to announce.
UNANNOUNCED = ("new", "paused")
#: The most characters of a notification's ``last_error``.
ERROR_LIMIT = 1000


@dataclass
class Evaluation:
    """What one evaluation did."""

    #: ``False`` when another evaluator held the lock (it records and sends instead).
    evaluated: bool
    #: The changes it recorded, oldest first.
    recorded: list[Notification] = field(default_factory=list)
    #: Notifications handed to a channel that accepted them.
    sent: int = 0
    #: Per channel key that failed in this evaluation: the error, scrubbed.
    failed: dict[str, str] = field(default_factory=dict)


def evaluate(
    *,
    now: datetime | None = None,
    names: Iterable[str] = (),
    using: str | None = None,
    record: bool = True,
    stop: Callable[[], bool] = lambda: False,
) -> Evaluation:
    """Record the status changes at ``now`` (default: the current time) and send what is
    unsent, under the evaluators' lock; return at once when another evaluator holds it.

    Args:
        now: the instant statuses are evaluated at (``tslock overdue --notify --at``).
        names: names to evaluate beside the candidates (a job that just ended).
        using: the journal's database alias (default: ``TSLOCK_JOURNAL``'s).
        record: give a name of ``TSLOCK_SCHEDULES`` the journal has not seen its row
            (false for an evaluation at another instant than now).
        stop: asked before each send; true: send nothing more (the process is exiting).

    Raises:
        ValueError: the journal is off, or ``TSLOCK_JOURNAL`` or ``TSLOCK_SCHEDULES``
            is malformed.
        InvalidAlertChannel: ``TSLOCK_ALERTS`` is malformed.
        DatabaseError: the journal could not be read or written.
        LockProviderError: the evaluators' lock could not be taken (its store failed).

    A channel's failure is never raised: it is kept on the notification and in
    :attr:`Evaluation.failed`.
    """
    from ..providers.database import DatabaseLockProvider

    using = using or journal_database()
    if using is None:
        raise ValueError("the journal is off (TSLOCK_JOURNAL = None): there is no status to evaluate")
    channels = configured_channels()
    provider = DatabaseLockProvider("alerts", using=using)
    held = provider.lock(LockConfiguration(LOCK_NAME, LOCK_AT_MOST_FOR))
    if held is None:
        return Evaluation(evaluated=False)
    try:
        at = now or datetime.now(timezone.utc)
        found = Evaluation(evaluated=True, recorded=record_changes(using, at, names, bool(channels), record))
        deliver(using, channels, found, stop)
        return found
    finally:
        try:
            held.unlock()
        except LockProviderError as err:  # it expires by itself after LOCK_AT_MOST_FOR
            logger.warning("tslock: the alerts' lock could not be released: %s", hide_secrets(str(err)))


def evaluate_after_run(
    using: str, names: Iterable[str], stop: Callable[[], bool] = lambda: False
) -> Evaluation | None:
    """The evaluation at a run's end: ``names`` judged first, without the lock, and the
    whole :func:`evaluate` only when one of them changed status or a notification is
    still unsent; ``None`` when there was nothing to do. Most runs change nothing (a
    success of a job that is ``ok``), and then their process pays two small reads, not
    the evaluators' lock and the candidates' scan; late and running-long jobs are found
    by ``tslock overdue --notify``."""
    now = datetime.now(timezone.utc)
    configured = {journal_name(name): schedule for name, schedule in schedules_from_settings().items()}
    wanted = {journal_name(name) for name in names}
    rows: dict[str, Job | None] = {job.name: job for job in Job.objects.using(using).filter(name__in=wanted)}
    judged = judge(using, rows, configured, now)
    changed = any(
        job is not None
        and judged[name].status not in UNANNOUNCED
        and judged[name].status != (job.notified_status or "ok")
        for name, job in rows.items()
    )
    if not changed and not Notification.objects.using(using).filter(sent_at=None).exists():
        return None
    return evaluate(names=names, using=using, stop=stop)


def record_changes(
    using: str, now: datetime, names: Iterable[str], has_channels: bool, record: bool = True
) -> list[Notification]:
    """Record each candidate's change of status at ``now`` (see the module): one
    ``Notification`` per change, ``sent_at`` set at once when there is no channel."""
    configured = {journal_name(name): schedule for name, schedule in schedules_from_settings().items()}
    jobs = Job.objects.using(using)
    rows: dict[str, Job | None] = {
        job.name: job for job, _ in alerting(using, now, limit=EVALUATED, record=record).found
    }
    announced = jobs.exclude(notified_status__in=["", "ok"]).order_by("name")[:EVALUATED]
    rows.update({job.name: job for job in announced})
    asked = {journal_name(name) for name in names} - set(rows)
    if asked:
        rows.update({job.name: job for job in jobs.filter(name__in=asked)})
    judged = judge(using, rows, configured, now)
    recorded = []
    for name in sorted(rows):
        job, status = rows[name], judged[name]
        if job is None or status.status in UNANNOUNCED:
            continue
        previous = job.notified_status or "ok"
        if status.status == previous:
            continue
        if status.last_outcome == outcomes.RUNNING and status.status != "running_long":
            # A run under way has no result yet: a failing job whose next run started is
            # not "ok" until that run succeeds (nor "late" meanwhile).
            continue
        with transaction.atomic(using=using):
            # Only from the status this evaluation read: a change someone recorded
            # meanwhile (an evaluator whose lock had run out) is not recorded twice.
            moved = jobs.filter(name=name, notified_status=job.notified_status).update(
                notified_status=status.status, notified_at=to_db(now)
            )
            if not moved:
                continue
            recorded.append(
                Notification.objects.using(using).create(
                    name=name,
                    status=status.status,
                    previous=previous,
                    reason=cut(hide_secrets(status.reason), ERROR_LIMIT),
                    at=to_db(now),
                    last_started_at=_stored(status.last_started_at),
                    last_success_at=_stored(status.last_success_at),
                    sent_at=None if has_channels else to_db(datetime.now(timezone.utc)),
                )
            )
    return recorded


def deliver(
    using: str,
    channels: list[tuple[str, Channel]],
    found: Evaluation,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Send the unsent notifications, oldest first, a page of :data:`BATCH` at a time, to
    each channel that does not have them yet, saving each row after each call. A channel
    that failed is skipped for the rest of the evaluation, and the pages go on past the
    rows only it still needs: one dead channel does not hold up the others. Stops when
    every channel has failed, after :data:`SENDING_BUDGET`, or when ``stop()`` says so
    (the interpreter is exiting)."""
    keys = {key for key, _ in channels}
    started = time.monotonic()
    after = 0
    while True:
        unsent = Notification.objects.using(using).filter(sent_at=None, id__gt=after)
        page = list(unsent.order_by("id")[:BATCH])
        if not page:
            return
        for note in page:
            after = note.id
            for key, channel in channels:
                if key in note.delivered or key in found.failed:
                    continue
                if stop() or time.monotonic() - started > SENDING_BUDGET:
                    return
                error = send_within(channel, notice_of(note), deadline_of(channel))
                note.attempts += 1
                if error is None:
                    note.delivered = [*note.delivered, key]
                    found.sent += 1
                else:
                    note.last_error = cut(f"{key}: {error}", ERROR_LIMIT)
                    found.failed[key] = error
                if keys <= set(note.delivered):
                    note.sent_at = to_db(datetime.now(timezone.utc))
                note.save(using=using, update_fields=["delivered", "attempts", "last_error", "sent_at"])
            if note.sent_at is None and keys <= set(note.delivered):  # no channel (left) to send to
                note.sent_at = to_db(datetime.now(timezone.utc))
                note.save(using=using, update_fields=["sent_at"])
        if keys and keys <= set(found.failed):
            return  # every channel failed: nothing more can go out in this evaluation


def notice_of(note: Notification) -> Notice:
    """What a channel is told of ``note``."""
    at = from_db(note.at)
    assert at is not None  # a required column
    return Notice(
        name=note.name,
        status=note.status,
        previous=note.previous,
        reason=hide_secrets(note.reason),
        at=at,
        last_started_at=from_db(note.last_started_at),
        last_success_at=from_db(note.last_success_at),
        id=note.id,
    )


def deadline_of(channel: Channel) -> float:
    """How long ``channel``'s ``send`` may take (see :data:`SEND_DEADLINE`)."""
    own = getattr(channel, "timeout", None)
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return float(own) + DEADLINE_MARGIN
    return SEND_DEADLINE


def send_within(channel: Channel, notice: Notice, deadline: float) -> str | None:
    """``channel.send(notice)`` with a deadline: ``None`` when it returned, else what
    went wrong, scrubbed. The call runs in a daemon thread of its own, so a channel
    that hangs holds neither the evaluation (it counts as failed after ``deadline``
    seconds) nor the interpreter's exit."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            channel.send(notice)
        except BaseException as err:  # noqa: BLE001 - whatever a channel raises is its failure
            outcome.append(err)
        else:
            outcome.append(None)
        finally:
            with contextlib.suppress(Exception):  # a channel that used the ORM in this thread
                connections.close_all()

    sender = threading.Thread(target=attempt, name=f"tslock-alert-{notice.id}", daemon=True)
    sender.start()
    sender.join(deadline)
    if not outcome:
        return (
            f"no answer within {deadline:g} s (the channel may still deliver it; it is sent again at "
            "the next evaluation)"
        )
    err = outcome[0]
    if err is None:
        return None
    return " ".join(hide_secrets(message_of(err)).split())


def _stored(value: datetime | None) -> datetime | None:
    return to_db(value) if value is not None else None
