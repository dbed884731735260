"""The provider contract on the in-process provider, with a clock the tests move."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tslock_django import MutableClock
from tslock_django.providers.memory import MemoryLockProvider
from tslock_django.testing import StrongProviderContract


class TestMemoryProvider(StrongProviderContract):
    @pytest.fixture
    def clock(self) -> MutableClock:
        return MutableClock()

    @pytest.fixture
    def provider(self, clock: MutableClock) -> Iterator[MemoryLockProvider]:
        yield MemoryLockProvider("memory", clock=clock)

    @pytest.fixture
    def advance(self, clock: MutableClock):  # type: ignore[no-untyped-def]
        return clock.advance

    def thread_finished(self) -> None:
        """No database connections to close."""
