"""Fixtures of the fault-injection tests: one real Workers runtime per module and a
fault-injecting proxy in front of it per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tslock_django.testing.worker_runtime import LocalWorker

from .proxy import FaultProxy


@pytest.fixture(scope="module")
def worker() -> Iterator[LocalWorker]:
    if shutil.which("node") is None and not os.environ.get("CI"):
        pytest.skip("Node.js is not installed: the real Workers runtime (Miniflare/workerd) needs node >= 20")
    with LocalWorker() as running:
        yield running


@pytest.fixture
def proxy(worker: LocalWorker) -> Iterator[FaultProxy]:
    with FaultProxy(worker.url, delay=1.5) as running:
        yield running
