"""lock() as context manager and decorator, the executor, keep-alive and assert_locked."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.test import override_settings

from tslock_django import (
    LockConfiguration,
    LockHeld,
    LockingTaskExecutor,
    TslockError,
    assert_locked,
    current_lock,
    lock,
    providers,
    signals,
)
from tslock_django.providers.memory import MemoryLockProvider

MEMORY = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "other": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
}


@pytest.fixture(autouse=True)
def memory_providers() -> Iterator[None]:
    with override_settings(TSLOCK_PROVIDERS=MEMORY):
        yield


def test_context_manager_yields_the_held_lock_and_releases_it() -> None:
    with lock("job", "1m") as held:
        assert held.name == "job"
        assert held.fencing_token == 1
        assert assert_locked("job") is held
        assert providers["default"].lock(LockConfiguration("job", "1m")) is None
    assert current_lock() is None
    assert providers["default"].lock(LockConfiguration("job", "1m")) is not None


def test_context_manager_raises_lock_held_naming_the_holder() -> None:
    other = providers["default"].lock(LockConfiguration("job", "1m"))
    assert other is not None
    with pytest.raises(LockHeld) as caught, lock("job", "1m"):
        pytest.fail("the body must not run")
    assert caught.value.holder is not None
    assert other.record.locked_by in str(caught.value)


def test_decorator_skips_or_raises_and_acquires_afresh_per_call() -> None:
    calls = []

    @lock("report", "1m")
    def report(x: int) -> int:
        calls.append(x)
        return x * 2

    assert report(2) == 4
    assert report(3) == 6, "a second call must acquire again, not reuse state"
    held = providers["default"].lock(LockConfiguration("report", "1m"))
    assert report(4) is None
    assert calls == [2, 3]
    strict = lock("report", "1m", on_locked="raise")(lambda: "ran")
    with pytest.raises(LockHeld):
        strict()
    assert held is not None and held.unlock()


def test_release_happens_when_the_body_raises() -> None:
    with pytest.raises(ZeroDivisionError), lock("job", "1m"):
        1 / 0  # noqa: B018
    assert providers["default"].lock(LockConfiguration("job", "1m")) is not None


def test_reentrant_in_one_thread() -> None:
    with lock("job", "1m") as outer, lock("job", "1m") as inner:
        assert inner is outer
    executor = LockingTaskExecutor(providers["default"])
    config = LockConfiguration("job", "1m")
    result = executor.execute_with_lock(lambda: executor.execute_with_lock(lambda: "deep", config), config)
    assert result.executed and result.result is not None and result.result.result == "deep"


def test_one_lock_object_shared_by_threads_keeps_state_apart() -> None:
    shared = lock("shared", "1m")
    outcomes: list[str] = []
    inside = threading.Event()
    leave = threading.Event()

    def first() -> None:
        with shared:
            inside.set()
            leave.wait(5)
        outcomes.append("first released")

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(5)
    with pytest.raises(LockHeld):
        shared.__enter__()
    leave.set()
    thread.join(5)
    with shared as held:
        outcomes.append(f"second got {held.fencing_token}")
    assert outcomes == ["first released", "second got 2"]


def test_assert_locked_outside_a_lock() -> None:
    with pytest.raises(TslockError, match="none is held"):
        assert_locked()
    with lock("a", "1m"), pytest.raises(TslockError, match="lock 'b'"):
        assert_locked("b")


def test_executor_reports_skip_and_holder() -> None:
    provider = providers["default"]
    executor = LockingTaskExecutor(provider)
    config = LockConfiguration("job", "1m")
    held = provider.lock(config)
    result = executor.execute_with_lock(lambda: pytest.fail("must not run"), config)
    assert not result.executed
    assert result.holder is not None and held is not None
    assert result.holder.fencing_token == held.fencing_token


def test_wait_polls_until_the_holder_releases() -> None:
    provider = providers["default"]
    held = provider.lock(LockConfiguration("job", "1m"))
    assert held is not None
    threading.Timer(0.3, held.unlock).start()
    with lock("job", "1m", wait="5s") as mine:
        assert mine.fencing_token == 2


def test_wait_gives_up_after_the_budget() -> None:
    assert providers["default"].lock(LockConfiguration("job", "1m")) is not None
    attempts = []
    signals.lock_attempted.connect(lambda **kw: attempts.append(kw), weak=False, dispatch_uid="t-wait")
    try:
        with pytest.raises(LockHeld), lock("job", "1m", wait="0.3s"):
            pytest.fail("the body must not run")
    finally:
        signals.lock_attempted.disconnect(dispatch_uid="t-wait")
    assert len(attempts) >= 2, "waiting means trying again, not once"


def test_keep_alive_holds_past_lock_at_most_for() -> None:
    provider = providers["default"]
    extended = []
    signals.lock_extended.connect(
        lambda **kw: extended.append(kw["record"]), weak=False, dispatch_uid="t-ext"
    )
    try:
        with lock("long", "0.6s", keep_alive=True) as held:
            time.sleep(1.5)  # well past lock_at_most_for
            assert provider.lock(LockConfiguration("long", "1m")) is None
            assert not held.lost.is_set()
    finally:
        signals.lock_extended.disconnect(dispatch_uid="t-ext")
    assert extended, "keep-alive never extended the lock"
    assert provider.lock(LockConfiguration("long", "1m")) is not None


def test_keep_alive_notices_a_lost_lock() -> None:
    provider = providers["default"]
    failures = []
    signals.keep_alive_failed.connect(lambda **kw: failures.append(kw), weak=False, dispatch_uid="t-ka")
    try:
        with lock("long", "0.3s", keep_alive=True) as held:
            assert provider.force_unlock("long", expected=held.fencing_token)
            assert held.lost.wait(2), "keep-alive should notice that the lock was taken away"
    finally:
        signals.keep_alive_failed.disconnect(dispatch_uid="t-ka")
    assert failures and failures[0]["error"] is None and failures[0]["name"] == "long"


def test_keep_alive_is_refused_where_the_store_cannot_keep_up() -> None:
    class SlowWrites(MemoryLockProvider):
        min_keep_alive_at_most_for = __import__("datetime").timedelta(seconds=2)

    executor = LockingTaskExecutor(SlowWrites("kv"))
    with pytest.raises(ValueError, match="at least 0:00:02"):
        executor.execute_with_lock(lambda: None, LockConfiguration("x", "1s"), keep_alive=True)


def test_signals_trace_a_lock_lifecycle() -> None:
    seen = []
    hooks = {
        "attempted": signals.lock_attempted,
        "acquired": signals.lock_acquired,
        "skipped": signals.lock_skipped,
        "released": signals.lock_released,
        "force_released": signals.lock_force_released,
    }
    for label, signal in hooks.items():
        signal.connect(
            lambda label=label, **kw: seen.append((label, kw["alias"], kw["name"])),
            weak=False,
            dispatch_uid=label,
        )
    try:
        with lock("sig", "1m") as held:
            assert providers["default"].lock(LockConfiguration("sig", "1m")) is None
            fencing = held.fencing_token
        with lock("sig", "1m") as held:
            fencing = held.fencing_token
            assert providers["default"].force_unlock("sig", expected=fencing)
    finally:
        for label, signal in hooks.items():
            signal.disconnect(dispatch_uid=label)
    labels = [label for label, alias, name in seen if (alias, name) == ("default", "sig")]
    assert labels == [
        "attempted",
        "acquired",
        "attempted",
        "skipped",
        "released",
        "attempted",
        "acquired",
        "force_released",
        "released",
    ]


def test_bad_on_locked_is_rejected_early() -> None:
    with pytest.raises(ValueError, match="on_locked"):
        lock("x", "1m", on_locked="wait")  # type: ignore[arg-type]


def test_reentrancy_is_per_provider() -> None:
    with lock("job", "1m", using="default") as outer, lock("job", "1m", using="other") as inner:
        assert inner is not outer, "the same name on another provider is another lock"
        assert providers["other"].lock(LockConfiguration("job", "1m")) is None


def test_a_failing_signal_receiver_does_not_strand_the_lock(caplog: pytest.LogCaptureFixture) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("receiver bug")

    signals.lock_acquired.connect(broken, weak=False, dispatch_uid="t-broken")
    try:
        with lock("job", "1m") as held:
            assert held.fencing_token == 1
    finally:
        signals.lock_acquired.disconnect(dispatch_uid="t-broken")
    assert "receiver bug" in caplog.text
    assert providers["default"].lock(LockConfiguration("job", "1m")) is not None, "released as usual"


def test_force_unlock_refuses_an_empty_token() -> None:
    held = providers["default"].lock(LockConfiguration("job", "1m"))
    assert held is not None
    with pytest.raises(ValueError, match="non-empty token"):
        providers["default"].force_unlock("job", expected="")
    assert providers["default"].lock(LockConfiguration("job", "1m")) is None


def test_locks_left_out_of_order_leave_nothing_behind() -> None:
    a, b = lock("a", "1m"), lock("b", "1m")
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    assert current_lock() is None
    with lock("a", "1m") as again:
        assert again.fencing_token == 2, "a fresh acquisition, not a stale re-entrant holding"


def test_a_released_lock_in_a_copied_context_holds_nothing() -> None:
    import contextvars

    with lock("c", "1m"):
        inherited = contextvars.copy_context()  # as an asyncio task started in the block
    assert inherited.run(current_lock, "c") is None
    held = inherited.run(lambda: lock("c", "1m").__enter__())
    assert held.fencing_token == 2


def test_exiting_in_another_context_is_a_clear_error() -> None:
    import contextvars

    shared = lock("d", "1m")
    held = contextvars.copy_context().run(shared.__enter__)
    with pytest.raises(TslockError, match="exited in another thread or task"):
        shared.__exit__(None, None, None)
    held.release()
