"""When Redis fails: every operation raises a LockProviderError that names the alias and
what to check, never reports "held", never shows the password; a decorated command
on a dead Redis does not run and exits non-zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tslock_django import LockConfiguration
from tslock_django.core.query import LockQuery
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.redis import RedisLockProvider

from .conftest import PASSWORD, require_redis_server
from .server import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = LockConfiguration("nightly-report", "5m")


def every_operation(provider: RedisLockProvider, held: Any = None) -> dict[str, Callable[[], object]]:
    operations: dict[str, Callable[[], object]] = {
        "acquire": lambda: provider.lock(CONFIG),
        "force release": lambda: provider.force_unlock(CONFIG.name, expected=None),
        "list": lambda: provider.query(LockQuery()),
        "purge": lambda: provider.purge(__import__("datetime").timedelta(days=1)),
    }
    if held is not None:
        operations["unlock"] = held.unlock
        operations["extend"] = lambda: held.extend("5m")
    return operations


def assert_store_failure(operation: Callable[[], object], *, alias: str, saying: str) -> LockProviderError:
    with pytest.raises(LockProviderError) as caught:
        operation()
    message = str(caught.value)
    assert caught.value.alias == alias
    assert f"lock provider {alias!r}" in message
    assert saying in message, message
    assert PASSWORD not in message
    assert "held by" not in message
    return caught.value


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., RedisLockProvider]]:
    made: list[RedisLockProvider] = []

    def build(url: str, **options: Any) -> RedisLockProvider:
        provider = RedisLockProvider("jobs", url=url, **options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        provider.close()


def test_nothing_listening(make: Callable[..., RedisLockProvider]) -> None:
    provider = make(f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", timeout=2)
    for operation in every_operation(provider).values():
        assert_store_failure(operation, alias="jobs", saying="could not talk to Redis")


def test_server_goes_down_between_operations(
    server: RedisServer, make: Callable[..., RedisLockProvider]
) -> None:
    provider = make(server.url, timeout=2)
    held = provider.lock(CONFIG)
    assert held is not None
    server.stop()
    for operation in every_operation(provider, held).values():
        assert_store_failure(operation, alias="jobs", saying="could not talk to Redis")
    server.start()
    assert held.unlock() is False, "the restarted server forgot the lock (no persistence)"
    assert provider.lock(CONFIG) is not None, "the provider reconnects by itself"


@pytest.mark.parametrize(
    ("password", "case"), [("wrong-password-123", "wrong password"), ("", "no password")]
)
def test_credentials_refused(
    server: RedisServer, make: Callable[..., RedisLockProvider], password: str, case: str
) -> None:
    auth = f":{password}@" if password else ""
    provider = make(f"redis://{auth}127.0.0.1:{server.port}/0", timeout=2)
    for operation in every_operation(provider).values():
        error = assert_store_failure(operation, alias="jobs", saying="Redis refused the credentials")
        if password:
            assert password not in str(error)


def test_server_that_stops_answering_times_out(
    server: RedisServer, make: Callable[..., RedisLockProvider]
) -> None:
    provider = make(server.url, timeout=0.3)
    held = provider.lock(CONFIG)
    assert held is not None
    server.pause()
    try:
        for operation in every_operation(provider, held).values():
            assert_store_failure(operation, alias="jobs", saying="did not answer in time")
    finally:
        server.resume()
    # The answer the provider gave up on must not confuse the next operation.
    assert provider.lock(CONFIG) is None
    assert held.unlock() is True


def acquire_waits_on_the_pause(admin: Any) -> bool:
    """Whether a client is held by CLIENT PAUSE (flag ``b``) on an EVALSHA. The command name
    alone does not tell: the warm-up's EVALSHA stays as ``cmd`` of the idle connection, and
    a kill before the acquire is sent is only a reconnect (on a loaded machine it was)."""
    listing = admin.execute_command("CLIENT", "LIST", "TYPE", "normal")
    text = listing.decode() if isinstance(listing, bytes) else str(listing)
    return any("cmd=evalsha" in line and re.search(r"\bflags=[a-zA-Z]*b", line) for line in text.splitlines())


def test_connection_killed_mid_operation(server: RedisServer, make: Callable[..., RedisLockProvider]) -> None:
    provider = make(server.url, timeout=10)
    assert provider.lock(LockConfiguration("warm-up", "1m")) is not None  # scripts loaded, connection open
    admin = server.admin()
    # Writes wait while the server is paused: the acquire below is in flight, sent and
    # unanswered, when its connection is killed.
    admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    outcome: list[object] = []

    def acquire() -> None:
        try:
            outcome.append(provider.lock(CONFIG))
        except LockProviderError as err:
            outcome.append(err)

    worker = threading.Thread(target=acquire)
    worker.start()
    try:
        deadline = time.monotonic() + 5
        while not acquire_waits_on_the_pause(admin):
            assert time.monotonic() < deadline, "the acquire never reached the server"
            time.sleep(0.01)
        killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert killed >= 1
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        worker.join(timeout=10)
    (error,) = outcome
    assert isinstance(error, LockProviderError), f"expected a store failure, got {error!r}"
    assert "could not talk to Redis" in str(error) and PASSWORD not in str(error)
    assert provider.lock(CONFIG) is not None, "the killed acquire never ran; the next one does"


def test_read_only_replica(
    server: RedisServer, tmp_path: Path, make: Callable[..., RedisLockProvider]
) -> None:
    on_primary = make(server.url)
    held = on_primary.lock(CONFIG)
    assert held is not None
    (tmp_path / "replica").mkdir()
    with RedisServer(tmp_path / "replica", password=PASSWORD, replica_of=server.port) as replica:
        deadline = time.monotonic() + 10
        while not replica.admin().exists(on_primary.options["key_prefix"] + "records"):
            assert time.monotonic() < deadline, "the replica never synchronised"
            time.sleep(0.05)
        provider = make(replica.url)
        writes = every_operation(provider)
        writes.pop("list")  # reading from a replica is allowed
        for operation in writes.values():
            # The lock is held on the primary and the replica has that record: still a
            # failure, never "held" from the replica's copy.
            assert_store_failure(operation, alias="jobs", saying="read-only replica")


def test_decorated_command_on_a_dead_redis_fails_closed(tmp_path: Path) -> None:
    require_redis_server()  # not needed itself; keeps the module's skips uniform
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "TSLOCK_URL": f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0?timeout=2",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("TSLOCK_EDGE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "demo_report", "--seconds", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "ran:" not in done.stdout, "the job ran without its lock"
    assert "lock provider 'default'" in done.stderr
    assert "could not talk to Redis" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout
