"""``alock`` and ``@lock`` on coroutine functions, on the memory provider: what they
yield and raise, waiting, keep-alive as an asyncio task, signals, and cancellation.
Each test runs its coroutine with ``asyncio.run`` through ``run`` (no plugin), which
fails on a pending task or an error the loop could only log."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from django.test import override_settings

from tslock_django import (
    HeldLock,
    LockConfiguration,
    LockHeld,
    LockProvider,
    LockProviderError,
    alock,
    assert_locked,
    current_lock,
    lock,
    providers,
    signals,
)
from tslock_django.core.aio import finish
from tslock_django.providers.memory import MemoryLockProvider

pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")

T = TypeVar("T")

MEMORY = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "threaded": {"BACKEND": "tests.test_alocking.ThreadedMemoryProvider"},
}


class ThreadedMemoryProvider(MemoryLockProvider):
    """A provider without async methods of its own, as a third party's would be: the
    base class runs its sync primitives in a worker thread."""

    threads: set[str] = set()

    _aacquire = LockProvider._aacquire
    _aunlock = LockProvider._aunlock
    _aextend = LockProvider._aextend
    _aforce_unlock = LockProvider._aforce_unlock

    def _acquire(self, config: LockConfiguration) -> Any:
        self.threads.add(threading.current_thread().name)
        return super()._acquire(config)


@pytest.fixture(autouse=True)
def memory_providers() -> Iterator[None]:
    with override_settings(TSLOCK_PROVIDERS=MEMORY):
        yield


def run(main: Callable[[], Awaitable[T]]) -> T:
    problems: list[str] = []

    async def wrapped() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda _, c: problems.append(str(c.get("message"))))
        return await main()

    result = asyncio.run(wrapped())
    gc.collect()
    assert not problems, problems
    return result


def is_free(name: str, using: str = "default") -> bool:
    held = providers[using].lock(LockConfiguration(name, "1m"))
    if held is None:
        return False
    held.unlock()
    return True


def test_alock_yields_the_held_lock_and_releases_it() -> None:
    async def main() -> None:
        async with alock("job", "1m") as held:
            assert isinstance(held, HeldLock)
            assert held.fencing_token == 1
            assert assert_locked("job") is held
            assert await providers["default"].alock(LockConfiguration("job", "1m")) is None
        assert current_lock() is None
        assert held.released

    run(main)
    assert is_free("job")


def test_alock_raises_lock_held_naming_the_holder_and_the_block_does_not_run() -> None:
    other = providers["default"].lock(LockConfiguration("job", "1m"))
    assert other is not None

    async def main() -> None:
        with pytest.raises(LockHeld) as caught:
            async with alock("job", "1m"):
                pytest.fail("the body must not run")
        assert caught.value.holder is not None
        assert other.record.locked_by in str(caught.value)

    run(main)


def test_alock_waits_for_a_lock_that_is_released_meanwhile() -> None:
    other = providers["default"].lock(LockConfiguration("job", "1m"))
    assert other is not None

    async def main() -> int | None:
        async def release_soon() -> None:
            await asyncio.sleep(0.1)
            other.unlock()

        releaser = asyncio.create_task(release_soon())
        async with alock("job", "1m", wait="5s") as held:
            await releaser
            return held.fencing_token

    assert run(main) == 2


def test_alock_is_reentrant_and_shared_objects_acquire_afresh() -> None:
    shared = alock("job", "1m")

    async def main() -> None:
        async with shared as outer:
            async with alock("job", "1m") as inner:
                assert inner is outer, "the same name in the same task is one holding"
            with lock("job", "1m") as sync_inner:
                assert sync_inner is outer, "a sync block inside shares it too"
            assert not outer.released
        async with shared as again:
            assert again.fencing_token == 2

    run(main)


def test_alock_exited_in_another_task_is_a_clear_error() -> None:
    shared = alock("job", "1m")

    async def main() -> None:
        held = await contextvars.Context().run(asyncio.create_task, shared.__aenter__())
        with pytest.raises(Exception, match="exited in another thread or task"):
            await shared.__aexit__(None, None, None)
        await held.arelease()

    run(main)
    assert is_free("job")


def test_alock_validates_early() -> None:
    with pytest.raises(ValueError, match="lock_at_most_for"):
        alock("job", "0s")


def test_decorated_coroutine_function_runs_under_the_lock() -> None:
    seen: list[int | None] = []

    @lock("report", "1m")
    async def report(x: int) -> int:
        seen.append(assert_locked("report").fencing_token)
        await asyncio.sleep(0)
        return x * 2

    assert inspect.iscoroutinefunction(report)
    assert report.__name__ == "report"
    assert run(lambda: report(21)) == 42
    assert run(lambda: report(1)) == 2
    assert seen == [1, 2], "each call acquires afresh"
    assert is_free("report")


def test_decorated_coroutine_function_skips_or_raises_when_held() -> None:
    other = providers["default"].lock(LockConfiguration("report", "1m"))
    assert other is not None
    ran = []

    @lock("report", "1m")
    async def skipping() -> str:
        ran.append("skip")
        return "ran"

    @lock("report", "1m", on_locked="raise")
    async def raising() -> str:
        ran.append("raise")
        return "ran"

    assert run(skipping) is None
    with pytest.raises(LockHeld):
        run(raising)
    assert ran == []


def test_decorated_coroutine_function_releases_when_it_raises() -> None:
    @lock("report", "1m")
    async def broken() -> None:
        raise RuntimeError("job failed")

    with pytest.raises(RuntimeError, match="job failed"):
        run(broken)
    assert is_free("report")


def test_signals_trace_an_async_lifecycle_like_a_sync_one() -> None:
    seen: list[str] = []
    hooks = {
        "attempted": signals.lock_attempted,
        "acquired": signals.lock_acquired,
        "skipped": signals.lock_skipped,
        "released": signals.lock_released,
        "extended": signals.lock_extended,
    }
    for label, signal in hooks.items():
        signal.connect(lambda label=label, **kw: seen.append(label), weak=False, dispatch_uid=f"a-{label}")

    async def main() -> None:
        async with alock("sig", "1m") as held:
            assert await providers["default"].alock(LockConfiguration("sig", "1m")) is None
            assert await held.aextend_now()

    try:
        run(main)
    finally:
        for label, signal in hooks.items():
            signal.disconnect(dispatch_uid=f"a-{label}")
    assert seen == ["attempted", "acquired", "attempted", "skipped", "extended", "released"]


# -- keep-alive ------------------------------------------------------------------------


def test_keep_alive_task_extends_past_lock_at_most_for() -> None:
    extended: list[object] = []
    signals.lock_extended.connect(lambda **kw: extended.append(kw), weak=False, dispatch_uid="a-ext")

    async def main() -> None:
        async with alock("long", "0.4s", keep_alive=True) as held:
            await asyncio.sleep(1.0)  # well past lock_at_most_for
            assert await providers["default"].alock(LockConfiguration("long", "1m")) is None
            assert not held.lost.is_set()
        assert all(not t.get_name().startswith("tslock-keep-alive") for t in asyncio.all_tasks())

    try:
        run(main)
    finally:
        signals.lock_extended.disconnect(dispatch_uid="a-ext")
    assert extended, "keep-alive never extended the lock"
    assert is_free("long")


def test_keep_alive_task_notices_a_lost_lock() -> None:
    failures: list[dict[str, Any]] = []
    signals.keep_alive_failed.connect(lambda **kw: failures.append(kw), weak=False, dispatch_uid="a-ka")

    async def main() -> None:
        async with alock("long", "0.3s", keep_alive=True) as held:
            assert await providers["default"].aforce_unlock("long", expected=held.fencing_token)
            for _ in range(100):
                if held.lost.is_set():
                    break
                await asyncio.sleep(0.05)
            assert held.lost.is_set(), "keep-alive should notice that the lock was taken away"

    try:
        run(main)
    finally:
        signals.keep_alive_failed.disconnect(dispatch_uid="a-ka")
    assert failures and failures[0]["error"] is None and failures[0]["name"] == "long"


def test_keep_alive_task_keeps_trying_a_failing_store_then_gives_up() -> None:
    class Failing(MemoryLockProvider):
        async def _aextend(self, held: Any, config: LockConfiguration) -> Any:
            raise LockProviderError("the store is down", alias=self.alias)

    provider = Failing("failing")
    failures: list[dict[str, Any]] = []
    signals.keep_alive_failed.connect(lambda **kw: failures.append(kw), weak=False, dispatch_uid="a-kf")

    async def main() -> HeldLock:
        from tslock_django.core.aexecutor import agive_back, atake

        held, acquired = await atake(provider, LockConfiguration("down", "0.4s"), keep_alive=True)
        for _ in range(100):
            if held.lost.is_set():
                break
            await asyncio.sleep(0.05)
        await agive_back(held, acquired)
        return held

    try:
        held = run(main)
    finally:
        signals.keep_alive_failed.disconnect(dispatch_uid="a-kf")
    assert held.lost.is_set()
    assert len(failures) >= 2, "a failing store is tried again before the lock is given up"
    assert all(isinstance(f["error"], LockProviderError) for f in failures)


def test_keep_alive_is_refused_where_the_store_cannot_keep_up() -> None:
    class SlowWrites(MemoryLockProvider):
        min_keep_alive_at_most_for = timedelta(seconds=2)

    from tslock_django.core.aexecutor import atake

    async def main() -> None:
        with pytest.raises(ValueError, match="at least 0:00:02"):
            await atake(SlowWrites("kv"), LockConfiguration("x", "1s"), keep_alive=True)

    run(main)


# -- providers without async methods ---------------------------------------------------


def test_a_provider_without_async_methods_runs_in_a_worker_thread() -> None:
    ThreadedMemoryProvider.threads = set()

    async def main() -> None:
        async with alock("job", "1m", using="threaded") as held:
            assert held.provider.alias == "threaded"
            assert await providers["threaded"].alock(LockConfiguration("job", "1m")) is None
            assert await providers["threaded"].aforce_unlock("job", expected=None) is True

    run(main)
    assert ThreadedMemoryProvider.threads
    assert threading.main_thread().name not in ThreadedMemoryProvider.threads
    assert is_free("job", using="threaded")


# -- cancellation ------------------------------------------------------------------------


def test_a_cancelled_alock_block_releases() -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def job() -> None:
            async with alock("job", "1m"):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(job())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main)
    assert is_free("job")


def test_a_cancelled_decorated_coroutine_releases() -> None:
    entered = threading.Event()

    @lock("job", "1m")
    async def job() -> None:
        entered.set()
        await asyncio.Event().wait()

    async def main() -> None:
        task = asyncio.create_task(job())
        while not entered.is_set():
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main)
    assert is_free("job")


def test_a_release_runs_to_its_end_when_cancelled_twice() -> None:
    class SlowUnlock(MemoryLockProvider):
        async def _aunlock(self, held: Any) -> bool:
            await asyncio.sleep(0.05)
            return self._unlock(held)

    provider = SlowUnlock("slow")

    async def main() -> None:
        from tslock_django.core.aexecutor import agive_back, atake

        async def job() -> None:
            held, acquired = await atake(provider, LockConfiguration("job", "1m"))
            try:
                await asyncio.Event().wait()
            finally:
                await agive_back(held, acquired)

        task = asyncio.create_task(job())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)  # now inside the slow release
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main)
    assert provider.lock(LockConfiguration("job", "1m")) is not None, "the release was cut short"


def test_a_keep_alive_task_ends_with_a_cancelled_block() -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def job() -> None:
            async with alock("job", "0.4s", keep_alive=True):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(job())
        await entered.wait()
        await asyncio.sleep(0.3)  # a keep-alive extension or two
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    run(main)
    assert is_free("job")


def test_finish_passes_the_cancellation_on_after_the_operation() -> None:
    done = []

    async def operation() -> str:
        await asyncio.sleep(0.05)
        done.append(True)
        return "done"

    async def main() -> None:
        task = asyncio.create_task(finish(operation()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert done == [True], "the operation was cut short"
        assert await finish(operation()) == "done"

    run(main)
