"""How many REST requests each operation costs, counted by the fake. The REST API allows
1,200 requests per 5 minutes per token, so these numbers are part of the documentation."""

from __future__ import annotations

import json

from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.testing.kv_fake import FakeKVTransport

from .conftest import MakeProvider


def test_requests_per_operation(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    confirming, blind = make_provider(), make_provider(confirm_write=False)
    job = LockConfiguration("job", "5m")

    kv.reset_counts()
    held = confirming.lock(job)
    assert held is not None
    assert kv.requests == {"GET value": 2, "PUT value": 1}, "acquire with confirm_write"

    kv.reset_counts()
    assert confirming.lock(job) is None
    assert kv.requests == {"GET value": 1}, "acquire of a held lock"

    clock.advance(1.1)
    kv.reset_counts()
    extended = held.extend("5m")
    assert extended is not None
    assert kv.requests == {"GET value": 1, "PUT value": 1}, "extend"

    clock.advance(1.1)
    kv.reset_counts()
    assert extended.unlock() is True
    assert kv.requests == {"GET value": 1, "DELETE value": 1}, "unlock"

    clock.advance(1.1)
    kv.reset_counts()
    held = blind.lock(LockConfiguration("job", "5m", "1m"))
    assert held is not None
    assert kv.requests == {"GET value": 1, "PUT value": 1}, "acquire without confirm_write"

    clock.advance(1.1)
    kv.reset_counts()
    assert held.unlock() is True
    assert kv.requests == {"GET value": 1, "PUT value": 1}, "unlock before lock_at_least_for passed"

    clock.advance(1.1)
    kv.reset_counts()
    assert confirming.force_unlock("job", expected=None) is True
    assert kv.requests == {"GET value": 1, "DELETE value": 1}, "force_unlock"


def test_listing_five_thousand_locks(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider()
    for i in range(5000):
        record = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "h", "token": f"t{i}"}
        kv.put_raw(f"tslock:job-{i:05}", json.dumps(record, separators=(",", ":")), metadata=record)
    kv.reset_counts()
    assert len(provider.list_locks()) == 5000
    assert kv.requests == {"GET keys": 5}, "with metadata: one request per 1,000 locks"

    for i in range(5000):  # the same records as written by @tslock/cloudflare-kv: no metadata
        record = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "h", "token": f"t{i}"}
        kv.put_raw(f"tslock:job-{i:05}", json.dumps(record, separators=(",", ":")))
    kv.reset_counts()
    assert len(provider.list_locks()) == 5000
    assert kv.requests == {"GET keys": 5, "GET value": 5000}, "without metadata: one read per key"


def test_force_unlock_by_fingerprint_as_the_admin_does(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    assert provider.lock(LockConfiguration("job", "5m")) is not None
    [listed] = provider.list_locks()
    clock.advance(1.1)

    kv.reset_counts()
    assert provider.force_unlock("job", expected="00000000") is False
    assert kv.requests == {"GET value": 1}, "force_unlock whose holding changed: read only"

    kv.reset_counts()
    assert provider.force_unlock("job", expected=listed.token_fingerprint) is True
    assert kv.requests == {"GET value": 1, "DELETE value": 1}, "force_unlock by fingerprint"
