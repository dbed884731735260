"""Faults between Django and the Worker: each one is a LockProviderError, a decorated
command fails closed naming the provider, and no lock outlives lock_at_most_for."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tslock_django import LockConfiguration, LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.worker.runtime import LocalWorker

from .proxy import FORWARDED, FaultProxy

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ["refuse", "reset", "delay", "500", "502", "malformed", "fieldless"]
#: The client gives up after this; the proxy's "delay" holds answers for 1.5 s.
CLIENT_TIMEOUT = 0.5
AT_MOST = 2.0


#: How long past its expected expiry a lock may still look held: the proxy and the local
#: Worker run on the same two busy cores as the suite, so the moment the Worker granted a
#: forwarded request can trail the client's clock by a second or more.
SLACK = 3.0


def acquired_after_expiry(
    provider: DurableObjectLockProvider, config: LockConfiguration, expires: float
) -> bool:
    """Whether ``provider`` acquires ``config`` (and releases it) once the monotonic time
    ``expires`` has passed, trying until ``SLACK`` seconds after it."""
    time.sleep(max(0.0, expires - time.monotonic()))
    while True:
        held = provider.lock(config)
        if held is not None:
            assert held.unlock()
            return True
        if time.monotonic() > expires + SLACK:
            return False
        time.sleep(0.1)


def through(proxy: FaultProxy, worker: LocalWorker, prefix: str) -> DurableObjectLockProvider:
    return DurableObjectLockProvider(
        "edge", url=proxy.url, token=worker.token, key_prefix=prefix, timeout=CLIENT_TIMEOUT
    )


def direct(worker: LocalWorker, prefix: str) -> DurableObjectLockProvider:
    return DurableObjectLockProvider("edge", url=worker.url, token=worker.token, key_prefix=prefix)


@pytest.mark.parametrize("fault", FAULTS)
def test_acquire_fault_is_a_provider_error_and_the_lock_frees_by_lock_at_most_for(
    fault: str, proxy: FaultProxy, worker: LocalWorker
) -> None:
    prefix = f"fault-{uuid.uuid4().hex[:8]}:"
    faulty, clean = through(proxy, worker, prefix), direct(worker, prefix)
    config = LockConfiguration("job", AT_MOST)
    proxy.mode = fault
    started = time.monotonic()
    with pytest.raises(LockProviderError) as caught:
        faulty.lock(config)
    assert caught.value.alias == "edge"
    assert worker.token not in str(caught.value)
    proxy.mode = "pass"
    if fault in FORWARDED:
        # The Worker granted the lock to a token the client never learnt: it is held...
        assert clean.lock(config) is None, f"{fault}: the forwarded acquire did not take the lock"
        # ...but only until lock_at_most_for has passed.
        assert acquired_after_expiry(clean, config, started + AT_MOST), (
            f"{fault}: the lock was still held {SLACK} s after lock_at_most_for"
        )
    else:  # the Worker never saw the request: nothing is held
        held = clean.lock(config)
        assert held is not None and held.unlock(), f"{fault}: a request that never arrived left a lock"
    assert faulty.lock(config) is not None, "the provider works again once the fault is gone"
    faulty.close()
    clean.close()


@pytest.mark.parametrize("fault", ["refuse", "reset", "500", "malformed"])
def test_unlock_fault_is_a_provider_error_and_the_lock_still_expires(
    fault: str, proxy: FaultProxy, worker: LocalWorker
) -> None:
    prefix = f"fault-{uuid.uuid4().hex[:8]}:"
    faulty, clean = through(proxy, worker, prefix), direct(worker, prefix)
    config = LockConfiguration("job", AT_MOST)
    held = faulty.lock(config)
    assert held is not None
    proxy.mode = fault
    with pytest.raises(LockProviderError):
        held.unlock()
    proxy.mode = "pass"
    assert acquired_after_expiry(clean, config, time.monotonic() + AT_MOST), (
        f"{fault}: the lock outlived lock_at_most_for by more than {SLACK} s"
    )
    faulty.close()
    clean.close()


@pytest.mark.parametrize("fault", FAULTS)
def test_decorated_command_fails_closed_naming_the_provider(
    fault: str, proxy: FaultProxy, worker: LocalWorker, tmp_path: Path
) -> None:
    proxy.mode = fault
    host = proxy.url.removeprefix("http://")
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.sqlite3'}",
        TSLOCK_URL=f"cloudflare-do+http://{worker.token}@{host}/?timeout={CLIENT_TIMEOUT}&key_prefix={uuid.uuid4().hex}:",
    )
    env.pop("TSLOCK_EDGE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "demo_report", "--seconds", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0, f"{fault}: the command exited 0:\n{done.stdout}\n{done.stderr}"
    assert "ran:" not in done.stdout, f"{fault}: the command ran although the store failed"
    assert "lock provider 'default'" in done.stderr and "did not run" in done.stderr, done.stderr
    assert worker.token not in done.stderr + done.stdout, "the bearer token leaked into the output"
