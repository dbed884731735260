"""The async cases of the provider contract: what ``alock``, ``aunlock``, ``aextend``
and ``aforce_unlock`` must do on every provider, cancellation included.

Mixed into ``ProviderContract`` and ``StrongProviderContract`` (see ``contract``), so
every provider that runs the contract runs these too, with the same fixtures. Each case
runs its coroutine with ``asyncio.run`` (no pytest plugin needed) through :meth:`arun`,
which also fails the case when the provider leaves an unclosed client or a pending task
behind.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from ..core.aexecutor import agive_back, atake
from ..core.configuration import LockConfiguration
from ..core.provider import LockProvider, SimpleLock
from ..core.records import LockRecord
from ..exceptions import LockHeld, StaleLockHandle

T = TypeVar("T")
Advance = Callable[[float], object]
Settle = Callable[[], object]

#: ResourceWarnings (an unclosed client or socket) fail the async cases.
no_resource_warnings = pytest.mark.filterwarnings("error::ResourceWarning")


class AsyncProviderCases:
    """Single-caller async behaviour every provider must show (needs the fixtures and
    helpers of ``ProviderContract``)."""

    short: float
    long: str

    if TYPE_CHECKING:  # provided by ProviderContract

        def config(
            self, name: str, at_most: float | str | None = None, at_least: float | str = 0
        ) -> LockConfiguration: ...

        def past_short(self, advance: Advance) -> None: ...

    def arun(self, provider: LockProvider, main: Callable[[], Awaitable[T]]) -> T:
        """``main()`` on a fresh event loop, the provider's async clients closed at the
        end; fails if that leaves a pending task, an unclosed client or an error the
        loop could only log."""
        problems: list[str] = []

        async def run() -> T:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda _, context: problems.append(str(context.get("message"))))
            try:
                return await main()
            finally:
                await provider.aclose()
                await self.athread_finished()

        # Garbage left by earlier tests in this process (a socket another test never closed)
        # is collected here, before the window, so that its warning is not laid at this
        # provider's door.
        gc.collect()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            result = asyncio.run(run())
            gc.collect()
        leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert not leaks, f"the provider left unclosed resources behind: {leaks}"
        assert not problems, f"the event loop reported: {problems}"
        return result

    async def athread_finished(self) -> None:
        """Close the database connections of the thread that ``sync_to_async`` runs the
        database provider's statements on (Django opens them per thread)."""
        from asgiref.sync import sync_to_async
        from django.db import connections

        await sync_to_async(connections.close_all, thread_sensitive=True)()

    async def aacquire(self, provider: LockProvider, config: LockConfiguration) -> SimpleLock:
        held = await provider.alock(config)
        assert held is not None, f"{config.name!r} should have been acquired"
        return held

    # -- the primitives ------------------------------------------------------------------

    @no_resource_warnings
    def test_async_lock_unlock_and_lock_again(
        self, provider: LockProvider, name: str, settle: Settle
    ) -> None:
        async def main() -> None:
            held = await self.aacquire(provider, self.config(name))
            assert held.name == name and held.record.token
            assert await provider.alock(self.config(name)) is None
            settle()
            assert await held.aunlock() is True
            with pytest.raises(StaleLockHandle):
                await held.aunlock()
            settle()
            await self.aacquire(provider, self.config(name))

        self.arun(provider, main)

    @no_resource_warnings
    def test_async_and_sync_callers_share_one_lock(
        self, provider: LockProvider, name: str, settle: Settle
    ) -> None:
        sync_held = provider.lock(self.config(name))
        assert sync_held is not None

        async def refused() -> SimpleLock | None:
            return await provider.alock(self.config(name))

        assert self.arun(provider, refused) is None, "an async caller took a lock a sync caller holds"
        settle()
        assert sync_held.unlock() is True
        settle()
        async_held = self.arun(provider, lambda: self.aacquire(provider, self.config(name)))
        assert provider.lock(self.config(name)) is None, "a sync caller took a lock an async caller holds"
        assert async_held.fencing_token is None or async_held.fencing_token > (sync_held.fencing_token or 0)

    @no_resource_warnings
    def test_async_extend_and_single_use(
        self, provider: LockProvider, name: str, advance: Advance, settle: Settle
    ) -> None:
        async def main() -> None:
            held = await self.aacquire(provider, self.config(name, at_most=self.short))
            settle()
            extended = await held.aextend(self.long)
            assert extended is not None
            assert extended.record.lock_until > held.record.lock_until
            assert extended.fencing_token == held.fencing_token
            with pytest.raises(StaleLockHandle):
                await held.aunlock()
            with pytest.raises(StaleLockHandle):
                await held.aextend(self.long)
            self.past_short(advance)
            assert await provider.alock(self.config(name)) is None, "the extension did not keep the lock"

        self.arun(provider, main)

    @no_resource_warnings
    def test_async_expiry_leaves_nothing_to_unlock_or_extend(
        self, provider: LockProvider, name: str, advance: Advance
    ) -> None:
        async def main() -> None:
            held = await self.aacquire(provider, self.config(name, at_most=self.short))
            self.past_short(advance)
            assert await held.aextend(self.long) is None
            assert await held.aunlock() is False, "an expired lock was released"

        self.arun(provider, main)

    @no_resource_warnings
    def test_async_force_unlock(self, provider: LockProvider, name: str, settle: Settle) -> None:
        async def main() -> None:
            held = await self.aacquire(provider, self.config(name))
            settle()
            assert await provider.aforce_unlock(name, expected="not-the-token") is False
            assert await provider.aforce_unlock(name, expected=held.token) is True
            settle()
            assert await provider.aforce_unlock(name, expected=None) is False
            with pytest.raises(ValueError, match="expected"):
                await provider.aforce_unlock(name, expected="")

        self.arun(provider, main)

    @no_resource_warnings
    def test_async_name_over_the_limit_is_rejected(self, provider: LockProvider) -> None:
        async def main() -> None:
            with pytest.raises(ValueError, match="too long"):
                await provider.alock(self.config("x" * (provider.max_key_bytes + 1)))

        self.arun(provider, main)

    # -- holding around a block ------------------------------------------------------

    @no_resource_warnings
    def test_async_take_holds_for_the_block_and_refuses_others(
        self, provider: LockProvider, name: str, settle: Settle
    ) -> None:
        async def main() -> None:
            held, acquired = await atake(provider, self.config(name))
            assert acquired and not held.released
            again, reentrant = await atake(provider, self.config(name))
            assert again is held and reentrant is False, "re-entrant use must share the holding"

            async def other_task() -> None:
                with pytest.raises(LockHeld):
                    await atake(provider, self.config(name))

            # A task of its own, not a child of this block (a child shares its holdings).
            await contextvars.Context().run(asyncio.create_task, other_task())
            settle()
            await agive_back(held, acquired)
            assert held.released
            settle()
            assert await provider.alock(self.config(name)) is not None, "the block's lock was not released"

        self.arun(provider, main)

    # -- cancellation --------------------------------------------------------------------

    @no_resource_warnings
    def test_cancelled_after_the_store_granted_leaves_no_lock(
        self, provider: LockProvider, name: str, settle: Settle
    ) -> None:
        # The store grants the lock; the caller is cancelled before it sees the answer.
        granted, gate = asyncio.Event(), asyncio.Event()
        acquire = provider._aacquire

        async def granted_then_held_up(config: LockConfiguration) -> SimpleLock | LockRecord | None:
            outcome = await acquire(config)
            granted.set()
            await gate.wait()
            return outcome

        async def main() -> None:
            provider._aacquire = granted_then_held_up  # type: ignore[method-assign]
            try:
                task = asyncio.create_task(provider.alock(self.config(name)))
                await granted.wait()
                task.cancel()
                await asyncio.sleep(0)
                settle()  # the release that follows is a second write to the name
                gate.set()
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                del provider._aacquire
            settle()
            assert await provider.alock(self.config(name)) is not None, (
                "a cancelled acquire left the lock held by nobody"
            )

        self.arun(provider, main)

    @no_resource_warnings
    def test_cancelled_while_waiting_takes_nothing_later(
        self, provider: LockProvider, name: str, settle: Settle
    ) -> None:
        holder = provider.lock(self.config(name))
        assert holder is not None

        async def main() -> None:
            waiting = asyncio.create_task(atake(provider, self.config(name), wait=self.long))
            # Let it ask at least twice (each poll is a refusal), then cancel it.
            while provider_attempts["n"] < 2:
                await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting

        provider_attempts = {"n": 0}
        attempt = provider.aattempt

        async def counted(config: LockConfiguration) -> Any:
            provider_attempts["n"] += 1
            return await attempt(config)

        provider.aattempt = counted  # type: ignore[method-assign]
        try:
            self.arun(provider, main)
        finally:
            del provider.aattempt
        settle()
        assert holder.unlock() is True
        settle()
        assert provider.lock(self.config(name)) is not None, "a cancelled waiter took the lock afterwards"

    @no_resource_warnings
    def test_cancelled_block_releases(self, provider: LockProvider, name: str, settle: Settle) -> None:
        async def main() -> None:
            entered = asyncio.Event()

            async def block() -> None:
                held, acquired = await atake(provider, self.config(name))
                try:
                    entered.set()
                    await asyncio.Event().wait()  # until cancelled
                finally:
                    await agive_back(held, acquired)

            task = asyncio.create_task(block())
            await entered.wait()
            settle()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            settle()
            assert await provider.alock(self.config(name)) is not None, "a cancelled block kept its lock"

        self.arun(provider, main)


class AsyncStrongCases:
    """Async behaviour only a store with one holder at a time promises."""

    coroutines = 16
    rounds = 10

    if TYPE_CHECKING:  # provided by ProviderContract and AsyncProviderCases

        def config(
            self, name: str, at_most: float | str | None = None, at_least: float | str = 0
        ) -> LockConfiguration: ...

        def arun(self, provider: LockProvider, main: Callable[[], Awaitable[T]]) -> T: ...

    @no_resource_warnings
    def test_async_no_lost_update_under_contention(self, provider: LockProvider, name: str) -> None:
        state = {"counter": 0, "inside": 0, "overlaps": 0, "executed": 0}

        async def worker() -> None:
            for _ in range(self.rounds):
                try:
                    held, acquired = await atake(provider, self.config(name))
                except LockHeld:
                    await asyncio.sleep(0)
                    continue
                try:
                    # A read-modify-write with a switch of tasks in the middle.
                    state["inside"] += 1
                    state["overlaps"] += state["inside"] > 1
                    value = state["counter"]
                    await asyncio.sleep(0)
                    state["counter"] = value + 1
                    state["inside"] -= 1
                    state["executed"] += 1
                finally:
                    await agive_back(held, acquired)

        async def main() -> None:
            await asyncio.gather(*(worker() for _ in range(self.coroutines)))

        self.arun(provider, main)
        assert state["executed"] >= 1
        assert state["overlaps"] == 0
        assert state["counter"] == state["executed"], "an increment was lost: two holders overlapped"


__all__ = ["AsyncProviderCases", "AsyncStrongCases", "no_resource_warnings"]
