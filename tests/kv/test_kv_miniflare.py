"""End to end on a real Workers KV implementation: Miniflare (workerd from npm) runs
tests/kv/rest_worker.js, which serves the Cloudflare REST path shape in front of a real KV
binding, and the Python provider talks to it over HTTP.

Miniflare's KV is strongly consistent and has no write-rate limit, so this checks the wire
format (paths, key encoding, multipart PUT, metadata, TTL, listing, error envelope), not
the failure modes; those are in test_kv_failure_modes.py on the fake.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from tslock_django.core.clock import SystemClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.query import LockQuery
from tslock_django.core.records import fingerprint
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_kv import KVLockProvider
from tslock_django.providers.kv_rest import KVRestNamespace

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE.parent.parent / "tslock_django" / "worker"
ACCOUNT_ID = "e2e-account"
NAMESPACE_ID = "e2e-namespace"
API_TOKEN = "e2e-secret-token-9f8e7d"
START_TIMEOUT = 60.0


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required when CI is set)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def rest_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed: cannot run Miniflare")
    if not (PACKAGE_DIR / "node_modules" / "miniflare").is_dir():
        _unavailable(f"Miniflare is not installed: run `npm ci --prefix {PACKAGE_DIR}`")
    tmp = tmp_path_factory.mktemp("miniflare-kv")
    env = {**os.environ, "TMPDIR": str(tmp), "CLOUDFLARE_CF_FETCH_ENABLED": "false"}
    process = subprocess.Popen(
        [node, str(HERE / "serve_kv.mjs"), str(PACKAGE_DIR), ACCOUNT_ID, NAMESPACE_ID, API_TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group: workerd is stopped with it
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()
    url: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            if line.startswith("READY ") and not url:
                url.append(line.split()[1])
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        ready.wait(START_TIMEOUT)
        if not url:
            pytest.fail("Miniflare did not start:\n" + "\n".join(lines[-30:]))
        yield url[0] + "/client/v4"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        # The reader ends at the pipe's end of file; then the pipe can be closed without
        # a ResourceWarning.
        reader.join(timeout=5)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture
def provider(rest_url: str) -> Iterator[KVLockProvider]:
    made = KVLockProvider(
        "kv-e2e",
        clock=SystemClock(),
        account_id=ACCOUNT_ID,
        namespace_id=NAMESPACE_ID,
        api_token=API_TOKEN,
        acknowledge_advisory_lock=True,
        base_url=rest_url,
        timeout=10.0,
        key_prefix=f"e2e-{os.urandom(4).hex()}:",
    )
    yield made
    made.close()


def test_lock_cycle_on_real_kv(provider: KVLockProvider) -> None:
    name = "reports/daily?x=1 100% ü"
    held = provider.lock(LockConfiguration(name, "5m"))
    assert held is not None
    assert provider.lock(LockConfiguration(name, "5m")) is None

    raw = provider.namespace.get(provider.key_for(name))
    stored = json.loads(raw or "")
    assert list(stored) == ["lockUntil", "lockedAt", "lockedBy", "token"]
    assert stored["token"] == held.token

    [listed] = provider.list_locks()
    assert listed.name == name and listed.token == ""
    assert listed.token_fingerprint == fingerprint(held.token)

    extended = held.extend("10m")
    assert extended is not None and extended.record.lock_until > held.record.lock_until
    assert extended.unlock() is True
    assert provider.namespace.get(provider.key_for(name)) is None
    assert provider.lock(LockConfiguration(name, "5m")) is not None


def test_metadata_listing_and_ttl_on_real_kv(provider: KVLockProvider, rest_url: str) -> None:
    for i in range(12):
        assert provider.lock(LockConfiguration(f"job-{i:02}", "10s")) is not None
    ns = provider.namespace
    page = ns.list(prefix=provider.key_prefix, limit=10)
    assert len(page.keys) == 10 and page.cursor
    assert all(k.has_metadata and k.metadata["token"] for k in page.keys)
    assert all(k.expiration is not None for k in page.keys)
    rest = ns.list(prefix=provider.key_prefix, limit=10, cursor=page.cursor)
    assert len(rest.keys) == 2 and rest.cursor == ""
    assert [r.name for r in provider.list_locks()] == [f"job-{i:02}" for i in range(12)]


def test_real_kv_refuses_what_cloudflare_refuses(provider: KVLockProvider) -> None:
    ns = provider.namespace
    with pytest.raises(LockProviderError, match="Expiration TTL must be at least 60") as ttl:
        ns.put(provider.key_prefix + "ttl", "v", expiration_ttl=59)
    assert ttl.value.status_code == 400
    with pytest.raises(LockProviderError) as meta:
        ns.put(provider.key_prefix + "meta", "v", expiration_ttl=60, metadata={"x": "m" * 1100})
    assert meta.value.status_code is not None and meta.value.status_code >= 400
    with pytest.raises(LockProviderError) as long_key:
        ns.put("k" * 513, "v", expiration_ttl=60)
    assert long_key.value.status_code is not None and long_key.value.status_code >= 400


def test_wrong_namespace_and_token_on_real_kv(rest_url: str) -> None:
    wrong_ns = KVRestNamespace(
        account_id=ACCOUNT_ID, namespace_id="nope", api_token=API_TOKEN, base_url=rest_url, alias="e2e"
    )
    wrong_token = KVRestNamespace(
        account_id=ACCOUNT_ID, namespace_id=NAMESPACE_ID, api_token="bad", base_url=rest_url, alias="e2e"
    )
    try:
        with pytest.raises(LockProviderError, match="10013") as caught:
            wrong_ns.get("tslock:x")
        assert caught.value.status_code == 404 and API_TOKEN not in str(caught.value)
        with pytest.raises(LockProviderError) as refused:
            wrong_token.get("tslock:x")
        assert refused.value.status_code == 401
    finally:
        wrong_ns.close()
        wrong_token.close()
    with httpx.Client() as client:  # the worker is a real HTTP server
        assert client.get(rest_url + "/nothing").status_code == 404


def test_query_pages_restart_real_kv_cursors(provider: KVLockProvider, rest_url: str) -> None:
    provider.list_page_keys = 10  # three KV pages for 25 locks
    for i in range(20):
        assert provider.lock(LockConfiguration(f"job-{i:02}", "5m")) is not None
    for i in range(20, 25):  # as @tslock/cloudflare-kv writes them: no metadata
        record = {"lockUntil": 4102444800000, "lockedAt": 0, "lockedBy": "worker", "token": f"t{i}"}
        provider.namespace.put(provider.key_for(f"job-{i:02}"), json.dumps(record), expiration_ttl=300)
    expected = [f"job-{i:02}" for i in range(25)]

    pages = list(provider.pages(LockQuery(limit=7)))
    assert [r.name for p in pages for r in p.records] == expected
    assert [len(p.records) for p in pages] == [7, 7, 7, 4]

    tight = KVLockProvider(
        "kv-e2e-tight",
        clock=SystemClock(),
        account_id=ACCOUNT_ID,
        namespace_id=NAMESPACE_ID,
        api_token=API_TOKEN,
        acknowledge_advisory_lock=True,
        base_url=rest_url,
        key_prefix=provider.key_prefix,
        list_request_budget=3,
        list_cache_seconds=0,
    )
    tight.list_page_keys = 10
    try:
        pages = list(tight.pages(LockQuery(limit=100)))
        assert [r.name for p in pages for r in p.records] == expected
        assert any("not read yet" in note for p in pages for note in p.notes)
    finally:
        tight.close()
