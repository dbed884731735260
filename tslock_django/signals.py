"""Signals sent around every lock operation.

Every signal is sent with ``sender`` = the provider class and these keyword arguments:
``alias`` (provider alias), ``name`` (lock name) and, where one exists, ``record``
(the :class:`~tslock_django.LockRecord` involved), ``lock_at_most_for`` and
``lock_at_least_for`` (``timedelta``).

- ``lock_attempted``: before asking the store.
- ``lock_acquired``: the store granted the lock (``record`` is ours).
- ``lock_skipped``: held by someone else (``record`` is the holder's when known).
- ``lock_failed``: the store failed while acquiring (``error`` is the exception, which
  the caller then receives; never sent for "held").
- ``lock_released``: ``unlock()`` finished (``released`` says whether it was still ours).
- ``lock_extended``: ``extend()`` succeeded (``record`` is the new holding).
- ``keep_alive_failed``: a keep-alive extension failed or was refused (``error`` is the
  exception or ``None`` when the store said the lock was no longer ours).
- ``lock_force_released``: an operator released a lock (``released`` says whether
  anything changed; ``expected`` is the token or fencing token the release was
  conditional on).

tslock sends them with ``send_robust``: a receiver that raises is logged (logger
``tslock_django``) and never interrupts the lock operation.
"""

import logging

from django.dispatch import Signal

logger = logging.getLogger("tslock_django")

lock_attempted = Signal()
lock_acquired = Signal()
lock_skipped = Signal()
lock_failed = Signal()
lock_released = Signal()
lock_extended = Signal()
keep_alive_failed = Signal()
lock_force_released = Signal()


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
