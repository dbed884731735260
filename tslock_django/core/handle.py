"""The lock handle: ``SimpleLock``, what a provider returns for a lock it granted, and
``Attempt``, the outcome of one acquire.

The rules of a handle (single use, signals, retry after a store failure) are written
once here; ``unlock``/``extend`` and ``aunlock``/``aextend`` differ only in how they
wait for the store.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.dispatch import Signal

from .. import signals
from ..exceptions import LockProviderError, StaleLockHandle
from .configuration import LockConfiguration
from .durations import DurationLike
from .records import LockRecord

if TYPE_CHECKING:
    from .provider import LockProvider


class SimpleLock:
    """A held lock. Single-use: after ``unlock()`` or a successful ``extend()`` this
    handle raises :class:`~tslock_django.exceptions.StaleLockHandle`.

    Attributes:
        record: the :class:`LockRecord` this handle holds (with its token).
        lock_at_least_until: the earliest moment ``unlock()`` can free the lock.
        provider: the provider that granted it.
    """

    def __init__(
        self,
        provider: LockProvider,
        record: LockRecord,
        *,
        lock_at_most_for: timedelta,
        lock_at_least_for: timedelta,
        lock_at_least_until: datetime,
    ) -> None:
        self.provider = provider
        self.record = record
        self.lock_at_most_for = lock_at_most_for
        self.lock_at_least_for = lock_at_least_for
        self.lock_at_least_until = lock_at_least_until
        self._spent: str | None = None
        self._mutex = threading.Lock()

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def fencing_token(self) -> int | None:
        """The store's per-name acquisition counter (``None`` on Workers KV)."""
        return self.record.fencing_token

    @property
    def token(self) -> str:
        return self.record.token

    def _check_unspent(self) -> None:
        """Raise if used up; call with ``_mutex`` held."""
        if self._spent:
            raise StaleLockHandle(
                f"this handle for lock {self.name!r} was already used by {self._spent}(); "
                "use the handle that extend() returned"
            )

    def _spend(self, how: str) -> None:
        with self._mutex:
            self._check_unspent()
            self._spent = how

    # The rules of unlock and extend are written once, here and in the provider's
    # _attempt_* helpers; unlock()/extend() and aunlock()/aextend() differ only in how
    # they wait for the store.

    def unlock(self) -> bool:
        """Release the lock, keeping it held until ``lock_at_least_until`` if that is later.

        Returns:
            ``True`` if the lock was still ours and is now released; ``False`` if it had
            already expired or changed hands (nothing was changed then).

        Raises:
            StaleLockHandle: the handle was already unlocked or extended.
            LockProviderError: the store failed; the handle stays usable, so ``unlock()``
                may be retried; otherwise the lock expires at ``lock_until``.
        """
        self._spend("unlock")
        try:
            released = self.provider._unlock(self)
        except LockProviderError:
            self._unspend()
            raise
        return self._unlocked(released)

    async def aunlock(self) -> bool:
        """:meth:`unlock` for asyncio code: the same rules, returns and errors.

        If the awaiting task is cancelled, the handle stays usable (the release may or
        may not have reached the store; releasing again is harmless)."""
        self._spend("unlock")
        try:
            released = await self.provider._aunlock(self)
        except (LockProviderError, asyncio.CancelledError):
            self._unspend()
            raise
        return self._unlocked(released)

    def _unspend(self) -> None:
        """Give the handle back its use when the store did not answer: it still owns the
        lock, so the caller may retry (Workers KV answers 429 to a second write within a
        second; a cancelled task may release again)."""
        with self._mutex:
            self._spent = None

    def _unlocked(self, released: bool) -> bool:
        self.notify(signals.lock_released, released=released)
        return released

    def extend(
        self, lock_at_most_for: DurationLike, lock_at_least_for: DurationLike = 0
    ) -> SimpleLock | None:
        """Hold the lock for ``lock_at_most_for`` from now (store time).

        Returns:
            A new handle (this one becomes unusable), or ``None`` if the lock is no
            longer ours (expired or taken); this handle then stays usable for ``unlock``.

        Raises:
            ValueError: bad durations.
            StaleLockHandle: the handle was already unlocked or extended.
            LockProviderError: the store failed.
        """
        config = LockConfiguration(self.name, lock_at_most_for, lock_at_least_for)
        with self._mutex:
            self._check_unspent()
            successor = self.provider._extend(self, config)
            if successor is not None:
                self._spent = "extend"
        return self._extended(successor)

    async def aextend(
        self, lock_at_most_for: DurationLike, lock_at_least_for: DurationLike = 0
    ) -> SimpleLock | None:
        """:meth:`extend` for asyncio code: the same rules, returns and errors.

        The handle counts as used while the extension is in flight (an ``unlock`` then
        raises ``StaleLockHandle``), and is usable again if the store refused, failed,
        or the awaiting task was cancelled."""
        config = LockConfiguration(self.name, lock_at_most_for, lock_at_least_for)
        self._spend("extend")
        successor = None
        try:
            successor = await self.provider._aextend(self, config)
        finally:
            if successor is None:
                with self._mutex:
                    self._spent = None
        return self._extended(successor)

    def _extended(self, successor: SimpleLock | None) -> SimpleLock | None:
        if successor is not None:
            successor.notify(signals.lock_extended)
        return successor

    def notify(self, signal: Signal, **extra: object) -> None:
        """Send ``signal`` about this holding, with the arguments every tslock signal
        carries (``alias``, ``name``, ``record``, the durations) plus ``extra``."""
        if not signals.listened(signal):
            return
        signals.notify(
            signal,
            sender=type(self.provider),
            alias=self.provider.alias,
            name=self.name,
            record=self.record,
            lock_at_most_for=self.lock_at_most_for,
            lock_at_least_for=self.lock_at_least_for,
            **extra,
        )

    def __repr__(self) -> str:
        state = f" spent by {self._spent}()" if self._spent else ""
        return (
            f"<SimpleLock {self.name!r} on {self.provider.alias!r} until "
            f"{self.record.lock_until.isoformat()} fencing={self.fencing_token}{state}>"
        )


@dataclass(frozen=True)
class Attempt:
    """The outcome of one acquire: ``held`` when acquired, else ``holder`` (if known)."""

    held: SimpleLock | None
    holder: LockRecord | None
