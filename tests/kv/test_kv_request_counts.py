"""How many REST requests each operation costs, counted by the fake. The REST API allows
1,200 requests per 5 minutes per token, so these numbers are part of the documentation."""

from __future__ import annotations

import json

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.query import LockQuery

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


def store(kv: FakeKVTransport, count: int, *, metadata: bool) -> None:
    for i in range(count):
        record = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "h", "token": f"t{i}"}
        text = json.dumps(record, separators=(",", ":"))
        if metadata:
            kv.put_raw(f"tslock:job-{i:05}", text, metadata=record)
        else:  # as written by @tslock/cloudflare-kv
            kv.put_raw(f"tslock:job-{i:05}", text)


# (keys, metadata, list_cache_seconds) -> (records on the admin's first page, requests of
# one view, of ten views, of a walk over every page (list_locks), pages in that walk).
# The default list_request_budget is 10 requests a page.
LISTING_COSTS = [
    ((5000, True, 5), (100, 1, 1, {"GET keys": 5}, 5)),
    ((5000, True, 0), (100, 1, 10, {"GET keys": 9}, 5)),
    ((300, False, 5), (9, 10, 10, {"GET keys": 1, "GET value": 300}, 34)),
    ((300, False, 0), (9, 10, 100, {"GET keys": 34, "GET value": 300}, 34)),
]


@pytest.mark.parametrize(("stored", "costs"), LISTING_COSTS)
def test_listing_costs(
    make_provider: MakeProvider,
    kv: FakeKVTransport,
    clock: MutableClock,
    stored: tuple[int, bool, float],
    costs: tuple[int, int, int, dict[str, int], int],
) -> None:
    count, metadata, cache_seconds = stored
    first_page, one_view, ten_views, walk, pages = costs
    provider = make_provider(list_cache_seconds=cache_seconds)
    store(kv, count, metadata=metadata)

    kv.reset_counts()
    assert len(provider.query(LockQuery()).records) == first_page
    assert kv.request_count() == one_view, "the admin's first page"
    for _ in range(9):
        provider.query(LockQuery())
    assert kv.request_count() == ten_views, "ten views of the admin's first page"

    clock.advance(60)  # past the cache period
    kv.reset_counts()
    assert len(provider.list_locks()) == count
    assert kv.requests == walk, "every page, 1,000 records at most per page"
    assert len(list(provider.pages(LockQuery(limit=1000)))) == pages


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
