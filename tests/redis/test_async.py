"""The Redis provider under asyncio beyond the contract: failures are wrapped as in sync
code (without the password), each event loop gets connections of its own, and a
cancelled request leaves the next one a clean connection."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import Coroutine
from typing import Any

import pytest

from tslock_django import LockConfiguration, LockProviderError
from tslock_django.providers.redis import RedisLockProvider

from .conftest import LOCAL_URL, PASSWORD, MakeProvider, require_local_redis
from .server import RedisServer

pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")


def test_an_unreachable_server_is_a_provider_error_without_the_password() -> None:
    provider = RedisLockProvider("r", url=f"redis://:{PASSWORD}@127.0.0.1:1/0", timeout=1)

    async def main() -> None:
        try:
            with pytest.raises(LockProviderError) as caught:
                await provider.alock(LockConfiguration("job", "1m"))
        finally:
            await provider.aclose()
        assert caught.value.alias == "r"
        assert PASSWORD not in str(caught.value)
        assert "could not talk to Redis" in str(caught.value)

    asyncio.run(main())


def test_each_event_loop_opens_its_own_connections(make_provider: MakeProvider) -> None:
    provider = make_provider()
    config = LockConfiguration("job", "1m")

    async def take() -> object:
        return await provider.alock(config)

    async def release(held: object) -> bool:
        try:
            return await held.aunlock()  # type: ignore[attr-defined, no-any-return]
        finally:
            await provider.aclose()

    # Earlier tests' garbage is collected first, outside the window: a socket one of them
    # left would otherwise warn here (seen once on Python 3.13 under xdist).
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        held = asyncio.run(take())  # this loop's connection is left open on purpose...
        assert held is not None
        assert asyncio.run(release(held)) is True  # ...and a new loop does not reuse it
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks
    assert provider.lock(config) is not None


def test_a_request_cancelled_in_flight_leaves_a_clean_connection(make_provider: MakeProvider) -> None:
    provider = make_provider()

    async def main() -> None:
        try:
            # Cancelled at every point of its first round trips in turn; whatever the
            # point, the next request reads its own answer, not a late one.
            for switches in range(6):
                task = asyncio.create_task(provider.aforce_unlock(f"n{switches}", expected=None))
                for _ in range(switches):
                    await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                held = await provider.alock(LockConfiguration(f"job{switches}", "1m"))
                assert held is not None and held.name == f"job{switches}"
                assert await held.aunlock() is True
        finally:
            await provider.aclose()

    asyncio.run(main())


def test_a_server_that_stops_answering_times_out_and_the_next_request_is_clean(server: RedisServer) -> None:
    provider = RedisLockProvider("jobs", url=server.url, timeout=0.3)
    config = LockConfiguration("job", "5m")

    async def main() -> None:
        try:
            held = await provider.alock(config)
            assert held is not None
            server.pause()
            try:
                # One timer keeps the deadlines of every connection in use at once.
                failures = await asyncio.gather(
                    provider.alock(config), held.aextend("5m"), return_exceptions=True
                )
            finally:
                server.resume()
            for failure in failures:
                assert isinstance(failure, LockProviderError), failure
                assert "did not answer in time" in str(failure) and PASSWORD not in str(failure)
            # The answers given up on must not be read as those of the next requests.
            assert await provider.alock(config) is None
            assert await held.aunlock() is True
        finally:
            await provider.aclose()
        provider.close()

    asyncio.run(main())


async def cancelled_in_flight(admin: Any, command: Coroutine[Any, Any, Any], *, times: int) -> None:
    """Run ``command`` while Redis holds writes back (CLIENT PAUSE WRITE), so that it is
    sent and unanswered; cancel it ``times`` times, let writes go on, and check that the
    cancellation reached the caller."""
    admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    try:
        task = asyncio.create_task(command)
        await asyncio.sleep(0.1)  # sent; Redis holds it until writes go on
        assert not task.done()
        for _ in range(times):
            task.cancel()
            await asyncio.sleep(0.05)
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    with pytest.raises(asyncio.CancelledError):
        await task


def test_an_acquire_cancelled_in_flight_leaves_no_lock(server: RedisServer) -> None:
    # The acquire reaches Redis while writes wait (CLIENT PAUSE WRITE), so it is
    # cancelled sent and unanswered; Redis grants it once writes go on, and the undo
    # sent after it on the same connection releases it.
    provider = RedisLockProvider("jobs", url=server.url, timeout=10)
    admin = server.admin()
    config = LockConfiguration("job", "5m")

    async def main() -> None:
        try:
            assert await provider.alock(LockConfiguration("warm-up", "1m")) is not None
            await cancelled_in_flight(admin, provider.alock(config), times=1)
            again = await provider.alock(config)
            assert again is not None, "the cancelled acquire left the lock held by nobody"
            assert await again.aunlock() is True
        finally:
            await provider.aclose()
        provider.close()
        admin.close()

    asyncio.run(main())


def test_a_release_cancelled_in_flight_still_releases(server: RedisServer) -> None:
    provider = RedisLockProvider("jobs", url=server.url, timeout=10)
    admin = server.admin()
    config = LockConfiguration("job", "5m")

    async def main() -> None:
        from tslock_django.core.aexecutor import agive_back, atake

        try:
            held, acquired = await atake(provider, config)
            # A second cancellation does not cut the release short either.
            await cancelled_in_flight(admin, agive_back(held, acquired), times=2)
            again = await provider.alock(config)
            assert again is not None, "the cancelled release left the lock held"
            assert await again.aunlock() is True
        finally:
            await provider.aclose()
        provider.close()
        admin.close()

    asyncio.run(main())


@pytest.mark.parametrize("operation", ["acquire", "force release"])
def test_a_cancellation_while_connecting_reaches_the_caller(key_prefix: str, operation: str) -> None:
    # Cancelled after each number of loop passes of a provider's first operation (the
    # connection being made, then the command): the task ends cancelled, never done as
    # if nothing had happened. redis-py's socket timeout runs each write under
    # asyncio.wait_for, which before Python 3.12 drops a cancellation that arrives as
    # the write completes.
    require_local_redis()

    async def main() -> None:
        for passes in range(60):
            provider = RedisLockProvider("r", url=LOCAL_URL, key_prefix=key_prefix)
            config = LockConfiguration(f"job{passes}", "1m")
            if operation == "acquire":
                task = asyncio.create_task(provider.alock(config))
            else:
                task = asyncio.create_task(provider.aforce_unlock("x", expected=None))
            try:
                for _ in range(passes):
                    await asyncio.sleep(0)
                if task.done():
                    return  # past the first round trip: every point before it was tried
                task.cancel()
                await asyncio.wait([task], timeout=30)
                assert task.done(), f"cancelled after {passes} passes: still running"
                assert task.cancelled(), f"cancelled after {passes} passes, it went on: {task.result()!r}"
                again = await provider.alock(config)
                assert again is not None, "a cancelled acquire left the lock held"
                await again.aunlock()
            finally:
                await provider.aclose()
        pytest.fail("60 passes did not get past the first round trip")

    asyncio.run(main())
