"""Fixtures for the Workers KV provider: a fresh fake namespace per test, sharing one
MutableClock with the provider so that tests move time instead of sleeping."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.providers.cloudflare_kv import KVLockProvider

ACCOUNT_ID = "test-account"
NAMESPACE_ID = "test-namespace"
API_TOKEN = "cf-secret-Sn3lZJTBX6kkg7Od"

MakeProvider = Callable[..., KVLockProvider]


@pytest.fixture
def clock() -> MutableClock:
    # A fixed start with a millisecond fraction: epoch-ms rounding bugs show up.
    return MutableClock(datetime(2026, 11, 29, 12, 0, 0, 123_456, tzinfo=timezone.utc))


@pytest.fixture
def kv(clock: MutableClock) -> FakeKVTransport:
    """The fake namespace (its default location has fresh reads)."""
    return FakeKVTransport(clock, account_id=ACCOUNT_ID, namespace_id=NAMESPACE_ID, api_token=API_TOKEN)


@pytest.fixture
def make_provider(kv: FakeKVTransport, clock: MutableClock) -> Iterator[MakeProvider]:
    """Build providers on the fake: ``make_provider(location=None, **options)``."""
    made: list[KVLockProvider] = []

    def make(location: str | None = None, alias: str = "kv", **options: Any) -> KVLockProvider:
        opts: dict[str, Any] = {
            "account_id": ACCOUNT_ID,
            "namespace_id": NAMESPACE_ID,
            "api_token": API_TOKEN,
            "acknowledge_advisory_lock": True,
            **options,
        }
        transport = kv if location is None else kv.location(location)
        provider = KVLockProvider(alias, clock=clock, transport=transport, **opts)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture
def provider(make_provider: MakeProvider) -> KVLockProvider:
    """A fresh KVLockProvider on a fresh fake (fresh reads), for the contract suite."""
    return make_provider()


@pytest.fixture
def advance(clock: MutableClock) -> Callable[[float], None]:
    """Move the shared clock (provider and fake) forward by ``seconds``."""

    def move(seconds: float) -> None:
        clock.advance(seconds)

    return move
