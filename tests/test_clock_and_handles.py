"""Clocks, single-use handles under store failures, and keep-alive when the store fails."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from tslock_django import (
    LockConfiguration,
    LockProviderError,
    MutableClock,
    SimpleLock,
    StaleLockHandle,
    signals,
)
from tslock_django.core.clock import ClockProvider, SystemClock
from tslock_django.core.executor import HeldLock
from tslock_django.providers.memory import MemoryLockProvider


def test_mutable_clock_moves_only_when_told() -> None:
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    clock = MutableClock(start)
    assert clock.now() == start
    assert clock.advance("1m30s") == start + timedelta(seconds=90)
    clock.set(start)
    assert clock.now() == start
    assert "2030-01-01" in repr(clock)
    with pytest.raises(ValueError, match="aware"):
        MutableClock(datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        clock.set(datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="by must not be negative"):
        clock.advance(-1)


def test_system_clock_is_aware_utc_and_both_are_clock_providers() -> None:
    now = SystemClock().now()
    assert now.tzinfo is timezone.utc
    assert isinstance(SystemClock(), ClockProvider) and isinstance(MutableClock(), ClockProvider)
    assert repr(SystemClock()) == "SystemClock()"


class FlakyStore(MemoryLockProvider):
    """Fails the next ``failures`` unlocks or extends, then behaves."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.failures = 0

    def _fail(self) -> None:
        if self.failures:
            self.failures -= 1
            raise LockProviderError("connection reset", alias=self.alias)

    def _unlock(self, held: SimpleLock) -> bool:
        self._fail()
        return super()._unlock(held)

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        self._fail()
        return super()._extend(held, config)


def test_a_failed_unlock_can_be_retried_and_a_handle_is_spent_after_success() -> None:
    store = FlakyStore("flaky")
    held = store.lock(LockConfiguration("job", "1m"))
    assert held is not None
    store.failures = 1
    with pytest.raises(LockProviderError, match="connection reset"):
        held.unlock()
    assert held.unlock() is True, "the handle still owned the lock after the failed attempt"
    with pytest.raises(StaleLockHandle, match="already used by unlock"):
        held.unlock()
    assert "spent by unlock()" in repr(held)


def test_a_refused_extend_leaves_the_handle_usable() -> None:
    clock = MutableClock()
    store = MemoryLockProvider("m", clock=clock)
    held = store.lock(LockConfiguration("job", "10s"))
    assert held is not None
    clock.advance("11s")
    assert held.extend("10s") is None
    assert held.unlock() is False, "expired: nothing to release, but no error either"


def test_keep_alive_survives_a_transient_failure() -> None:
    store = FlakyStore("flaky")
    held = store.lock(LockConfiguration("job", "0.6s"))
    assert held is not None
    store.failures = 1
    failures = []
    signals.keep_alive_failed.connect(
        lambda **kw: failures.append(kw["error"]), weak=False, dispatch_uid="flaky"
    )
    try:
        keeper = HeldLock(held, keep_alive=True)
        time.sleep(1.5)
        assert not keeper.lost.is_set()
        assert keeper.record.lock_until > held.record.lock_until, "a later extension succeeded"
        keeper.release()
    finally:
        signals.keep_alive_failed.disconnect(dispatch_uid="flaky")
    assert len(failures) == 1 and isinstance(failures[0], LockProviderError)


def test_keep_alive_gives_up_when_the_store_fails_until_lock_until() -> None:
    store = FlakyStore("flaky")
    held = store.lock(LockConfiguration("job", "0.4s"))
    assert held is not None
    store.failures = 1000
    keeper = HeldLock(held, keep_alive=True)
    assert keeper.lost.wait(3), "the lock ran out while the store kept failing"
    store.failures = 0
    keeper.release()
    assert "HeldLock 'job'" in repr(keeper)
