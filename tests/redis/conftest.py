"""Fixtures of the Redis provider's tests: the machine's Redis on 127.0.0.1:6379 (a key
prefix of its own per test run, removed afterwards) and redis-server processes the
tests start themselves.

Without a Redis on 6379 or without redis-server the tests are skipped with the reason,
except under CI, where they must run (the missing server then fails them)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CI

from .server import REDIS_SERVER, RedisServer

LOCAL_URL = "redis://127.0.0.1:6379/0"
#: The password of the servers the tests start (it must never show in a message).
PASSWORD = "s3cret-Redis-pw-7Qx"


def local_redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


def require_local_redis() -> None:
    if not CI and not local_redis_up():
        pytest.skip(reason="no Redis on 127.0.0.1:6379 (required when CI is set)")


def require_redis_server() -> None:
    if not CI and REDIS_SERVER is None:
        pytest.skip(reason="redis-server is not installed (required when CI is set)")


@pytest.fixture(scope="session")
def run_prefix() -> Iterator[str]:
    """A key prefix for this test run on the shared Redis; its keys go afterwards."""
    prefix = f"tslock-test-{os.getpid()}-{uuid.uuid4().hex[:8]}:"
    yield prefix
    if local_redis_up():
        import redis

        client = redis.Redis.from_url(LOCAL_URL)
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture
def key_prefix(run_prefix: str) -> str:
    """A prefix of its own per test: tests never see each other's records."""
    return f"{run_prefix}{uuid.uuid4().hex[:8]}:"


MakeProvider = Callable[..., Any]


@pytest.fixture
def make_provider(key_prefix: str) -> Iterator[MakeProvider]:
    """``make_provider(alias="redis", **options)``: a RedisLockProvider on the local
    Redis (unless ``url`` or ``cache`` is given), closed after the test."""
    from tslock_django.providers.redis import RedisLockProvider

    made: list[RedisLockProvider] = []

    def make(alias: str = "redis", **options: Any) -> RedisLockProvider:
        if "url" not in options and "cache" not in options:
            require_local_redis()
            options["url"] = LOCAL_URL
        options.setdefault("key_prefix", key_prefix)
        provider = RedisLockProvider(alias, **options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test, with a password, on a free port."""
    require_redis_server()
    with RedisServer(tmp_path, password=PASSWORD) as running:
        yield running
