"""Fixtures for the Durable Objects provider: one real Workers runtime (workerd via
Miniflare) for the whole session, and a fresh provider per test on a key prefix of its
own so that tests never see each other's locks."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import require_node
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.worker.export import copy_worker_modules
from tslock_django.worker.runtime import LocalWorker

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_worker(folder: Path, fixture: str, variables: dict[str, str]) -> LocalWorker:
    """A (not yet started) LocalWorker running ``fixtures/<fixture>``, a test-only wrapper
    of the shipped Worker: both are copied into ``folder``, since the wrapper imports
    ``./index.js``."""
    copy_worker_modules(folder)
    shutil.copy(FIXTURES / fixture, folder / fixture)
    return LocalWorker(script=folder / fixture, variables=variables)


@pytest.fixture
def node() -> str:
    """The path of node (skips per the rule above when it is absent)."""
    require_node()
    return shutil.which("node") or "node"


@pytest.fixture(scope="session")
def local_worker() -> Iterator[LocalWorker]:
    """The tslock Worker on the real Workers runtime, shared by the session."""
    require_node()
    with LocalWorker() as worker:
        yield worker


@pytest.fixture(scope="session")
def worker_without_secret() -> Iterator[LocalWorker]:
    """A second runtime started without TSLOCK_TOKEN, as a deployment that forgot the secret."""
    require_node()
    with LocalWorker(token="") as worker:
        yield worker


@pytest.fixture
def key_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def provider(local_worker: LocalWorker, key_prefix: str) -> Iterator[DurableObjectLockProvider]:
    """A fresh provider against the runtime, isolated by its own key_prefix."""
    instance = DurableObjectLockProvider(
        "edge", url=local_worker.url, token=local_worker.token, key_prefix=key_prefix
    )
    yield instance
    instance.close()


@pytest.fixture
def advance() -> Callable[[float], None]:
    """Moves time forward for the store. The Durable Object's clock is real, so: sleep."""
    return time.sleep


@pytest.fixture
def api(local_worker: LocalWorker) -> Iterator[httpx.Client]:
    """A raw, authenticated HTTP client for the Worker's protocol."""
    with httpx.Client(
        base_url=local_worker.url, headers={"Authorization": f"Bearer {local_worker.token}"}, timeout=10
    ) as client:
        yield client
