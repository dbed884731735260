"""The shared provider contract on the fake KV namespace with fresh reads (one location,
no cache, no delays): what a single caller may rely on, advisory stores included.

Two settings adapt the contract to Workers KV without weakening the fake:

- ``settle`` moves the shared clock 1.1 s between two writes to one key, because KV
  accepts one write per key per second (the fake answers 429 otherwise, as KV does);
- ``short`` is 3 s: ``past_short`` must move the clock at least a second past the previous
  write, and ``lock_at_least_for = short`` must outlast one ``settle``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tslock_django.core.clock import MutableClock
from tslock_django.testing.contract import ProviderContract


class TestKVProviderContract(ProviderContract):
    short = 3.0

    @pytest.fixture
    def advance(self, clock: MutableClock) -> Callable[[float], object]:
        return clock.advance

    @pytest.fixture
    def settle(self, clock: MutableClock) -> Callable[[], object]:
        return lambda: clock.advance(1.1)
