"""The Redis provider under asyncio beyond the contract: failures are wrapped as in sync
code (without the password), each event loop gets connections of its own, and a
cancelled request leaves the next one a clean connection."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings

import pytest

from tslock_django import LockConfiguration, LockProviderError
from tslock_django.providers.redis import RedisLockProvider

from .conftest import PASSWORD, MakeProvider

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

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        held = asyncio.run(take())  # this loop's connection is left open on purpose...
        assert held is not None
        assert asyncio.run(release(held)) is True  # ...and a new loop does not reuse it
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
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
