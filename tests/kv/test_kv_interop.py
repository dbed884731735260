"""Sharing a namespace with @tslock/cloudflare-kv: its records (value only, no metadata)
are read, listed and respected, and ours decode with a strict reader of its format."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.records import fingerprint
from tslock_django.providers.cloudflare_kv import epoch_ms

from .conftest import MakeProvider

TS_TOKEN = "0b5e7c1e-8f55-4a8e-9d43-2f1c6f3f0e11"


def ts_record(clock: MutableClock, lock_for_ms: int, locked_by: str = "worker.example:scheduled") -> str:
    """What the TypeScript package writes: JSON.stringify of the record, no metadata."""
    now = epoch_ms(clock.now())
    return json.dumps(
        {"lockUntil": now + lock_for_ms, "lockedAt": now, "lockedBy": locked_by, "token": TS_TOKEN},
        separators=(",", ":"),
    )


def strict_decode(text: str) -> dict[str, Any]:
    """A reader that accepts exactly the TypeScript format and nothing else."""
    data = json.loads(text)
    assert isinstance(data, dict)
    assert list(data) == ["lockUntil", "lockedAt", "lockedBy", "token"], list(data)
    for key in ("lockUntil", "lockedAt"):
        assert type(data[key]) is int and 0 <= data[key] < 2**53, data[key]
    assert type(data["lockedBy"]) is str and type(data["token"]) is str and data["token"]
    assert data["lockUntil"] >= data["lockedAt"]
    return data


def test_a_typescript_record_is_respected_listed_and_released(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    kv.put_raw("tslock:shared-job", ts_record(clock, 120_000), expiration_ttl=121)
    provider = make_provider()

    attempt = provider.attempt(LockConfiguration("shared-job", "5m"))
    assert attempt.held is None
    assert attempt.holder is not None and attempt.holder.locked_by == "worker.example:scheduled"

    kv.reset_counts()
    [listed] = provider.list_locks()
    assert listed.name == "shared-job" and listed.token == ""
    assert listed.token_fingerprint == fingerprint(TS_TOKEN)
    assert kv.requests == {"GET keys": 1, "GET value": 1}, "no metadata: the value is read"

    clock.advance(120)
    held = provider.lock(LockConfiguration("shared-job", "5m"))
    assert held is not None, "an expired TypeScript record is taken over by lockUntil"


def test_force_unlock_of_a_typescript_record_by_its_token(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    kv.put_raw("tslock:shared-job", ts_record(clock, 60_000), expiration_ttl=61)
    provider = make_provider()
    assert provider.force_unlock("shared-job", expected=TS_TOKEN) is True
    assert kv.keys() == []


def test_typescript_keys_mixed_with_ours_list_in_one_pass(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    assert provider.lock(LockConfiguration("from-django", "1m")) is not None
    kv.put_raw("tslock:from-worker", ts_record(clock, 60_000), expiration_ttl=61)
    kv.reset_counts()
    names = [r.name for r in provider.list_locks()]
    assert names == ["from-django", "from-worker"]
    assert kv.requests == {"GET keys": 1, "GET value": 1}


def test_our_record_passes_a_strict_reader_of_the_typescript_format(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    provider.locked_by = 'web-1:4242 \u00fc\u00f1\u00ee\u00e7\u00f8d\u00e9 "quoted"'
    held = provider.lock(LockConfiguration("strict", "90s", "10s"))
    assert held is not None
    stored = kv.get_raw("tslock:strict") or ""
    data = strict_decode(stored)
    assert data == {
        "lockUntil": epoch_ms(held.record.lock_until),
        "lockedAt": epoch_ms(held.record.locked_at),
        "lockedBy": provider.locked_by,
        "token": held.token,
    }
    assert kv.metadata_of("tslock:strict") == data
    clock.advance(5)
    assert held.unlock() is True  # before at-least: a shorter record is written
    strict_decode(kv.get_raw("tslock:strict") or "")


def test_javascript_reads_our_record_and_writes_the_same_bytes(
    make_provider: MakeProvider, kv: FakeKVTransport, tmp_path: Any
) -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is required in CI for the JavaScript round-trip test")
        pytest.skip(reason="node is not installed: cannot check the record with JavaScript's JSON")
    provider = make_provider()
    provider.locked_by = 'host-\u00e9\u65e5\u672c:1 \\ "q" \t'
    held = provider.lock(LockConfiguration("js", "1h"))
    assert held is not None
    stored = kv.get_raw("tslock:js") or ""
    script = (
        "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{"
        "const r=JSON.parse(s);"
        "const ok=Number.isSafeInteger(r.lockUntil)&&Number.isSafeInteger(r.lockedAt)"
        "&&typeof r.lockedBy==='string'&&typeof r.token==='string';"
        "process.stdout.write(JSON.stringify({ok,again:JSON.stringify("
        "{lockUntil:r.lockUntil,lockedAt:r.lockedAt,lockedBy:r.lockedBy,token:r.token})}));});"
    )
    out = subprocess.run(
        [node, "-e", script], input=stored.encode(), capture_output=True, check=True, timeout=30
    )
    answer = json.loads(out.stdout)
    assert answer["ok"] is True
    assert answer["again"] == stored, "JSON.stringify of the same record differs from what we stored"
