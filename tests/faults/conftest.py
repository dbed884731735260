"""Fixtures of the fault-injection tests: one real Workers runtime per module and a
fault-injecting proxy in front of it per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tslock_django.worker.runtime import LocalWorker

from .proxy import FaultProxy


@pytest.fixture
def proxy(worker: LocalWorker) -> Iterator[FaultProxy]:
    with FaultProxy(worker.url, delay=1.5) as running:
        yield running
