"""Signals sent around every lock operation, with ``sender`` the provider class and the
keyword arguments ``alias`` (provider alias), ``name`` (lock name) and, where one exists,
``record`` (the :class:`~tslock_django.LockRecord` involved), ``lock_at_most_for`` and
``lock_at_least_for`` (``timedelta``).

tslock sends them with ``send_robust``: a receiver that raises is logged (logger
``tslock_django``) and never interrupts the lock operation.
"""

import logging

from django.dispatch import Signal

logger = logging.getLogger("tslock_django")

#: Before the store is asked.
lock_attempted = Signal()
#: The store granted the lock (``record`` is ours).
lock_acquired = Signal()
#: Held by someone else (``record`` is the holder's when known).
lock_skipped = Signal()
#: The store failed while acquiring (``error``: the exception the caller then receives);
#: never sent for "held".
lock_failed = Signal()
#: ``unlock()`` finished (``released``: whether it was still ours).
lock_released = Signal()
#: ``extend()`` succeeded (``record`` is the new holding).
lock_extended = Signal()
#: A keep-alive extension failed or was refused (``error``: the exception, or ``None``
#: when the store said the lock was no longer ours).
keep_alive_failed = Signal()
#: An operator released a lock (``released``: whether anything changed; ``expected``: the
#: token or fencing token the release was conditional on).
lock_force_released = Signal()
#: A journaled run ended and its journal entry is written (``sender`` the recorder's
#: class; ``using``: the journal's database alias, ``name``: the name as journaled). The
#: alerts evaluate the job's status on it (``tslock_django.alerts.after_run``).
run_journaled = Signal()


def listened(signal: Signal) -> bool:
    """Whether any receiver is connected to ``signal``: a lock+unlock sends three signals,
    and when nobody listens, building their arguments is all the work they would cost."""
    return bool(signal.receivers)


def notify(signal: Signal, **kwargs: object) -> None:
    """Send ``signal`` so that a failing receiver cannot break locking.

    A receiver that raised after ``lock_acquired`` would otherwise lose the caller its
    handle while the lock stays held until ``lock_at_most_for``; its error is logged
    instead.
    """
    for receiver, result in signal.send_robust(**kwargs):  # type: ignore[arg-type]
        if isinstance(result, Exception):
            logger.error(
                "a receiver of a tslock signal failed: %r raised %s: %s",
                receiver,
                type(result).__name__,
                result,
                exc_info=result,
            )
