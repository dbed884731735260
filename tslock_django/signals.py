"""Signals sent around every lock operation.

Every signal is sent with ``sender`` = the provider class and these keyword arguments:
``alias`` (provider alias), ``name`` (lock name) and, where one exists, ``record``
(the :class:`~tslock_django.LockRecord` involved), ``lock_at_most_for`` and
``lock_at_least_for`` (``timedelta``).

- ``lock_attempted``: before asking the store.
- ``lock_acquired``: the store granted the lock (``record`` is ours).
- ``lock_skipped``: held by someone else (``record`` is the holder's when known).
- ``lock_released``: ``unlock()`` finished (``released`` says whether it was still ours).
- ``lock_extended``: ``extend()`` succeeded (``record`` is the new holding).
- ``keep_alive_failed``: a keep-alive extension failed or was refused (``error`` is the
  exception or ``None`` when the store said the lock was no longer ours).
- ``lock_force_released``: an operator released a lock (``released`` says whether
  anything changed; ``expected`` is the token or fencing token the release was
  conditional on).
"""

from django.dispatch import Signal

lock_attempted = Signal()
lock_acquired = Signal()
lock_skipped = Signal()
lock_released = Signal()
lock_extended = Signal()
keep_alive_failed = Signal()
lock_force_released = Signal()
