"""Listing queries on Workers KV: what KV answers itself (prefix, name order), what is
applied to the keys read (search, states) within the request budget of a page, the
listing cache, and what a page says about the keys it could not read.

Requests are counted by the fake; time is the shared MutableClock."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.query import ALL_STATES, LockPage, LockQuery, encode_cursor
from tslock_django.core.records import LockRecord
from tslock_django.exceptions import InvalidCursor, LockProviderError, UnsupportedQuery
from tslock_django.providers.cloudflare_kv import KVLockProvider
from tslock_django.providers.kv_rest import MISS, ListingCache

from .conftest import MakeProvider

FAR = 10**13  # epoch ms in the year 2286: held throughout every test


def record(i: int, lock_until: int = FAR) -> dict[str, Any]:
    return {"lockUntil": lock_until, "lockedAt": 0, "lockedBy": "host:1", "token": f"t{i}"}


def fill(
    kv: FakeKVTransport, count: int, *, metadata: bool, name: str = "job-{:05}", start: int = 0
) -> list[str]:
    """``count`` held locks as stored keys; with ``metadata=False`` as @tslock/cloudflare-kv
    writes them. Returns the lock names."""
    names = []
    for i in range(start, start + count):
        data = record(i)
        text = json.dumps(data, separators=(",", ":"))
        lock = name.format(i)
        if metadata:
            kv.put_raw("tslock:" + lock, text, metadata=data)
        else:
            kv.put_raw("tslock:" + lock, text)
        names.append(lock)
    return names


def names(page: LockPage) -> list[str]:
    return [r.name for r in page.records]


def walk(provider: KVLockProvider, kv: FakeKVTransport, query: LockQuery) -> tuple[list[LockPage], list[int]]:
    """Every page of ``query`` and the REST requests each one cost."""
    pages, costs = [], []
    kv.reset_counts()
    for page in provider.pages(query):
        pages.append(page)
        costs.append(kv.request_count())
        kv.reset_counts()
    return pages, costs


# -- what KV answers itself ---------------------------------------------------------------


def test_listing_support_says_what_kv_answers_itself(provider: KVLockProvider) -> None:
    listing = provider.listing
    assert listing.orders == frozenset({"name"})
    assert not listing.descending and not listing.backward and not listing.total
    assert not listing.search and not listing.states and listing.expired
    assert listing.limitations() == [
        "cannot sort by lock until, locked at",
        "cannot sort in reverse",
        "searches only the keys it reads per page",
        "filters states only over the keys it reads per page",
        "cannot page backwards",
    ]
    for refused in (LockQuery(order="lock_until"), LockQuery(order="locked_at"), LockQuery(descending=True)):
        with pytest.raises(UnsupportedQuery):
            provider.query(refused)


def test_purge_has_nothing_to_do_because_kv_drops_keys_by_their_ttl(provider: KVLockProvider) -> None:
    assert provider.self_cleaning is not None and "TTL" in provider.self_cleaning
    with pytest.raises(NotImplementedError, match="needs no purge: Workers KV deletes each lock's key"):
        provider.purge(__import__("datetime").timedelta(days=30))


def test_prefix_is_kvs_own_and_names_come_in_utf8_byte_order(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    odd = ["a", "a/b", "a%", "a_", "B", "é", "\U0001f512", "ab", "a\\"]
    for i, each in enumerate(odd):
        kv.put_raw("tslock:" + each, json.dumps(record(i)), metadata=record(i))
    kv.put_raw("other:a", json.dumps(record(99)), metadata=record(99))
    kv.reset_counts()
    page = provider.query(LockQuery())
    assert names(page) == sorted(odd, key=lambda n: n.encode()) == sorted(odd)
    assert kv.requests == {"GET keys": 1}
    assert names(provider.query(LockQuery(prefix="a"))) == ["a", "a%", "a/b", "a\\", "a_", "ab"]
    assert names(provider.query(LockQuery(prefix="a_"))) == ["a_"], "no LIKE in a KV prefix"
    assert page.total is None and page.previous_cursor is None


# -- the cache ---------------------------------------------------------------------------


@pytest.mark.parametrize(("metadata", "count", "first_view"), [(True, 5000, 1), (False, 300, 10)])
def test_ten_identical_listings_cost_the_requests_of_one(
    make_provider: MakeProvider, kv: FakeKVTransport, metadata: bool, count: int, first_view: int
) -> None:
    provider = make_provider()
    fill(kv, count, metadata=metadata)
    kv.reset_counts()
    first = provider.query(LockQuery())  # the admin's first page
    assert kv.request_count() == first_view
    for _ in range(9):
        again = provider.query(LockQuery())
        assert names(again) == names(first) and again.notes == first.notes
    assert kv.request_count() == first_view, "nine more views within the cache period cost nothing"


def test_after_the_cache_period_a_listing_reads_again(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(list_cache_seconds=5)
    other_process = make_provider()
    fill(kv, 3, metadata=True)
    assert len(provider.query(LockQuery()).records) == 3
    assert other_process.lock(LockConfiguration("new", "5m")) is not None

    kv.reset_counts()
    clock.advance(4.9)
    assert len(provider.query(LockQuery()).records) == 3, "another process's lock shows up to 5 s late"
    assert kv.request_count() == 0
    clock.advance(0.1)
    assert len(provider.query(LockQuery()).records) == 4
    assert kv.requests == {"GET keys": 1}


def test_a_clock_that_went_back_does_not_keep_answers_longer(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(list_cache_seconds=5)
    fill(kv, 3, metadata=True)
    provider.query(LockQuery())
    clock.set(clock.now().replace(year=2025))
    kv.reset_counts()
    provider.query(LockQuery())
    assert kv.requests == {"GET keys": 1}


def test_no_cache_with_zero_seconds(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider(list_cache_seconds=0)
    fill(kv, 3, metadata=False)
    kv.reset_counts()
    for _ in range(3):
        assert len(provider.query(LockQuery()).records) == 3
    assert kv.requests == {"GET keys": 3, "GET value": 9}


def test_this_providers_own_writes_show_at_once(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(list_cache_seconds=60)
    query = LockQuery(states=ALL_STATES)

    def listed() -> dict[str, LockRecord]:
        kv.reset_counts()
        found = {r.name: r for r in provider.query(query).records}
        assert kv.request_count() > 0, "a write must clear the cache"
        return found

    assert listed() == {}
    held = provider.lock(LockConfiguration("job", "5m", "1m"))
    assert held is not None
    assert listed()["job"].lock_until == held.record.lock_until, "acquire"
    clock.advance(1.1)
    extended = held.extend("10m", "1m")
    assert extended is not None
    assert listed()["job"].lock_until == extended.record.lock_until, "extend"
    clock.advance(1.1)
    assert extended.unlock() is True
    assert listed()["job"].released, "unlock before lock_at_least_for: kept, released"
    clock.advance(1.1)
    assert provider.force_unlock("job", expected=None) is True
    assert listed() == {}, "force release"
    other = provider.lock(LockConfiguration("other", "5m"))
    assert other is not None
    clock.advance(1.1)
    assert other.unlock() is True
    assert listed() == {}, "unlock that deletes"


def test_a_write_that_failed_still_clears_the_cache(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider(list_cache_seconds=60)
    assert provider.query(LockQuery()).records == []
    kv.timeout_next(method="PUT", after_write=True)
    with pytest.raises(LockProviderError):
        provider.lock(LockConfiguration("job", "5m"))
    assert names(provider.query(LockQuery())) == ["job"], "the write landed; the listing must show it"


def test_the_cache_keeps_prefixes_and_pages_apart(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider()
    provider.list_page_keys = 10
    fill(kv, 15, metadata=True, name="a-{:02}")
    fill(kv, 5, metadata=True, name="b-{:02}")
    assert len(provider.query(LockQuery(prefix="a-")).records) == 15
    assert names(provider.query(LockQuery(prefix="b-"))) == [f"b-{i:02}" for i in range(5)]
    first = provider.query(LockQuery(limit=12))
    assert names(first) == [f"a-{i:02}" for i in range(12)]
    assert first.next_cursor is not None
    rest = provider.query(LockQuery(limit=12, cursor=first.next_cursor))
    assert names(rest) == [f"a-{i:02}" for i in range(12, 15)] + [f"b-{i:02}" for i in range(5)]


def test_listing_cache_is_bounded_least_recently_used_first() -> None:
    clock = MutableClock()
    cache = ListingCache(clock, 5, max_weight=10)
    g = cache.generation
    cache.put("a", "A", generation=g, weight=4)
    cache.put("b", "B", generation=g, weight=4)
    assert cache.get("a") == "A"  # now "b" is the least recently used
    cache.put("c", "C", generation=g, weight=4)
    assert cache.get("b") is MISS and cache.get("a") == "A" and cache.get("c") == "C"
    cache.put("huge", "H", generation=g, weight=11)
    assert cache.get("huge") is MISS and len(cache) == 2, "an answer over the bound is not kept"
    cache.put("none", None, generation=g)
    assert cache.get("none") is None, "None (a key found missing) is an answer"
    clock.advance(5)
    assert cache.get("a") is MISS and cache.get("c") is MISS


def test_an_answer_fetched_before_a_write_is_not_kept() -> None:
    cache = ListingCache(MutableClock(), 5)
    before = cache.generation
    cache.clear()  # this process wrote while the listing request was on its way
    cache.put("keys", "stale", generation=before)
    assert cache.get("keys") is MISS
    cache.put("keys", "fresh", generation=cache.generation)
    assert cache.get("keys") == "fresh"


def test_listing_cache_is_thread_safe() -> None:
    clock = MutableClock()
    cache = ListingCache(clock, 5, max_weight=50)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(seed: int) -> None:
        try:
            start.wait()
            for i in range(2000):
                key = (seed * 7 + i) % 40
                if i % 97 == 0:
                    cache.clear()
                value = cache.get(key)
                assert value is MISS or value == key * 2
                cache.put(key, key * 2, generation=cache.generation, weight=1 + key % 5)
        except BaseException as err:  # noqa: BLE001  (re-raised in the test's thread)
            errors.append(err)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert cache._weight == sum(w for _, _, w in cache._entries.values()) <= 50


# -- the request budget --------------------------------------------------------------------


@pytest.mark.parametrize("budget", [2, 3, 10, 50])
@pytest.mark.parametrize("cache_seconds", [0, 5])
def test_a_page_spends_at_most_its_budget_and_the_next_goes_on_where_it_stopped(
    make_provider: MakeProvider, kv: FakeKVTransport, budget: int, cache_seconds: int
) -> None:
    provider = make_provider(list_request_budget=budget, list_cache_seconds=cache_seconds)
    stored = fill(kv, 300, metadata=False)
    pages, costs = walk(provider, kv, LockQuery(limit=100))
    listed = [name for page in pages for name in names(page)]
    assert listed == stored, "every key once, in name order"
    assert all(cost <= budget for cost in costs), costs
    # Every page lists its KV page again: from KV without the cache, from the cache
    # with it; either way the list counts against the page's budget.
    full = budget if cache_seconds == 0 else budget - 1
    assert costs[0] == budget and all(cost == full for cost in costs[1:-1]), costs
    assert len(pages) == -(-300 // (budget - 1))
    assert sum(costs) == 300 + (len(pages) if cache_seconds == 0 else 1)
    for page in pages[:-1]:
        assert any(
            note.startswith(f"examined {len(page.records)} keys with the {budget} REST")
            for note in page.notes
        )


def test_notes_name_the_keys_the_budget_left_unread(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider()  # the default budget: 10 requests a page
    fill(kv, 300, metadata=False)
    kv.reset_counts()
    page = provider.query(LockQuery())
    assert kv.requests == {"GET keys": 1, "GET value": 9}
    assert names(page) == [f"job-{i:05}" for i in range(9)]
    assert page.next_cursor is not None
    unread = [note for note in page.notes if "not read yet" in note]
    assert unread == [
        "291 keys written without metadata (as @tslock/cloudflare-kv writes them) were not read yet, "
        "at one request each: 'tslock:job-00009', 'tslock:job-00010', 'tslock:job-00011', "
        "'tslock:job-00012', 'tslock:job-00013' and 286 more; they follow on the next page"
    ]
    assert "examined 9 keys with the 10 REST requests a page may spend" in " ".join(page.notes)
    following = provider.query(LockQuery(cursor=page.next_cursor))
    assert names(following)[0] == "job-00009"


def test_unread_keys_never_show_and_keys_with_metadata_wait_behind_them(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider(list_request_budget=3, list_cache_seconds=0)
    fill(kv, 4, metadata=True, name="a-{}")
    fill(kv, 4, metadata=False, name="b-{}")
    fill(kv, 4, metadata=True, name="c-{}")
    first = provider.query(LockQuery())
    # Order is kept: the c- keys are not shown before the b- keys the budget left unread.
    assert names(first) == ["a-0", "a-1", "a-2", "a-3", "b-0", "b-1"]
    assert any(
        "2 keys written without metadata" in n and "'tslock:b-2', 'tslock:b-3'" in n for n in first.notes
    )
    assert first.next_cursor is not None
    second = provider.query(LockQuery(cursor=first.next_cursor))
    assert names(second) == ["b-2", "b-3", "c-0", "c-1", "c-2", "c-3"]
    assert second.next_cursor is None


def test_search_reads_only_the_values_of_matching_names(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider(list_request_budget=20)
    fill(kv, 300, metadata=False)
    kv.reset_counts()
    page = provider.query(LockQuery(search="JOB-0001"))
    assert names(page) == [f"job-{i:05}" for i in range(10, 20)]
    assert kv.requests == {"GET keys": 1, "GET value": 10}
    assert page.next_cursor is None and page.notes == (
        "10 current locks were written without metadata (as @tslock/cloudflare-kv writes them), which "
        "does not say whether the holder released them early and they are kept only for "
        "lock_at_least_for; they count as held",
    )


def test_states_are_applied_to_the_keys_read(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(list_cache_seconds=0)
    now_ms = int(clock.now().timestamp() * 1000)
    for i, until in enumerate([now_ms - 1000, FAR, now_ms - 5, FAR]):
        kv.put_raw(f"tslock:j{i}", json.dumps(record(i, until)), metadata=record(i, until))
    kv.put_raw("tslock:ts", json.dumps(record(9, now_ms - 1)))  # expired, no metadata
    assert names(provider.query(LockQuery())) == ["j1", "j3"]
    assert names(provider.query(LockQuery(states=frozenset({"expired"})))) == ["j0", "j2", "ts"]
    assert names(provider.query(LockQuery(states=frozenset({"at_least"})))) == []


def test_more_is_known_without_reading_another_value(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider(list_request_budget=50)
    fill(kv, 20, metadata=False)
    kv.reset_counts()
    page = provider.query(LockQuery(limit=5))
    assert names(page) == [f"job-{i:05}" for i in range(5)]
    assert kv.requests == {"GET keys": 1, "GET value": 5}
    assert page.next_cursor is not None
    assert names(provider.query(LockQuery(limit=5, cursor=page.next_cursor)))[0] == "job-00005"


def test_a_full_page_of_keys_with_metadata_knows_more_from_the_next_kv_page(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider(list_cache_seconds=0)
    provider.list_page_keys = 10
    fill(kv, 25, metadata=True)
    pages, costs = walk(provider, kv, LockQuery(limit=10))
    assert [len(p.records) for p in pages] == [10, 10, 5]
    # Page one reads KV pages 1 and 2 (to know there is more); page two starts at KV
    # page 2 because the last record ended KV page 1, and so on.
    assert costs == [2, 2, 1]


def test_a_page_restarts_its_kv_page_and_neither_skips_nor_repeats_while_keys_change(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(list_cache_seconds=0)
    provider.list_page_keys = 10
    fill(kv, 30, metadata=True, name="k{:02}", start=0)
    first = provider.query(LockQuery(limit=7))
    assert names(first) == [f"k{i:02}" for i in range(7)]
    # Between pages: listed and unlisted keys go, new ones come before and after the place.
    for gone in ("tslock:k02", "tslock:k08", "tslock:k25"):
        kv._remove(gone, clock.now(), "default")
    fill(kv, 1, metadata=True, name="k03b")
    fill(kv, 1, metadata=True, name="k07b")
    rest = [r.name for p in provider.pages(LockQuery(limit=7, cursor=first.next_cursor)) for r in p.records]
    expected_rest = ["k07", "k07b"] + [f"k{i:02}" for i in range(9, 30) if i != 25]
    assert rest == expected_rest


# -- values that are not records, cursors that do not fit, stores that misbehave ------------


def test_a_value_that_is_not_utf8_is_an_unreadable_row(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    kv.put_raw("tslock:bin", b"\xff\xfe not text")
    fill(kv, 2, metadata=False)
    page = provider.query(LockQuery())
    assert names(page) == ["bin", "job-00000", "job-00001"]
    assert "key 'tslock:bin'" in page.records[0].unreadable
    assert "not UTF-8 text" in page.records[0].unreadable


def test_metadata_that_is_not_a_record_falls_back_to_the_value(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    kv.put_raw("tslock:job", json.dumps(record(1)), metadata={"written": "by another tool"})
    kv.reset_counts()
    assert names(provider.query(LockQuery())) == ["job"]
    assert kv.requests == {"GET keys": 1, "GET value": 1}


def test_a_huge_value_under_the_prefix_is_not_kept_in_the_cache(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    kv.put_raw("tslock:huge", b"x" * (11 * 1024 * 1024))
    for _ in range(2):
        page = provider.query(LockQuery())
        [row] = page.records
        assert "'tslock:huge'" in row.unreadable and "more than the 65,536" in row.unreadable
    assert kv.requests == {"GET keys": 1, "GET value": 2}, "read again rather than kept"


def test_a_key_deleted_between_listing_and_reading_is_left_out(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(list_cache_seconds=0)
    fill(kv, 3, metadata=False)
    provider.list_page_keys = 10
    real_list = provider.namespace.list

    def list_then_delete(**kwargs: Any) -> Any:
        page = real_list(**kwargs)
        kv._remove("tslock:job-00001", clock.now(), "default")
        return page

    provider.namespace.list = list_then_delete  # type: ignore[method-assign]
    page = provider.query(LockQuery())
    assert names(page) == ["job-00000", "job-00002"]
    assert not any("job-00001" in note for note in page.notes)


@pytest.mark.parametrize("position", [["a", "b", "c"], [1, None], "tslock:x", [None, "x"], {"c": ""}])
def test_a_position_that_is_not_a_kv_position_is_an_invalid_cursor(
    provider: KVLockProvider, position: object
) -> None:
    query = LockQuery()
    cursor = encode_cursor(provider.alias, query, position)
    with pytest.raises(InvalidCursor, match="not a Workers KV position"):
        provider.query(LockQuery(cursor=cursor))


def test_a_kv_cursor_kv_refuses_is_an_invalid_cursor(provider: KVLockProvider, kv: FakeKVTransport) -> None:
    fill(kv, 3, metadata=True)
    cursor = encode_cursor(provider.alias, LockQuery(), ["no such cursor", None])
    with pytest.raises(InvalidCursor, match="start again from the first page"):
        provider.query(LockQuery(cursor=cursor))


@pytest.mark.parametrize("cache_seconds", [0, 5])
def test_a_store_that_repeats_its_cursor_is_an_error_not_a_loop(
    make_provider: MakeProvider, kv: FakeKVTransport, cache_seconds: int
) -> None:
    provider = make_provider(list_cache_seconds=cache_seconds, list_request_budget=1000)
    fill(kv, 3, metadata=True)
    kv.default.repeat_list_cursor(50)
    kv.reset_counts()
    with pytest.raises(LockProviderError, match="already given"):
        provider.query(LockQuery())
    assert kv.requests == {"GET keys": 2}


def test_empty_pages_before_the_end_are_walked_through(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    provider.list_page_keys = 10
    stored = fill(kv, 25, metadata=True)
    kv.default.empty_list_pages(3)
    kv.reset_counts()
    page = provider.query(LockQuery())
    assert names(page) == stored
    assert kv.requests == {"GET keys": 6}


def test_empty_pages_count_against_the_budget(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider(list_request_budget=2)
    stored = fill(kv, 3, metadata=True)
    kv.default.empty_list_pages(3)
    pages, costs = walk(provider, kv, LockQuery())
    assert [name for page in pages for name in names(page)] == stored
    assert costs == [2, 2]
    assert pages[0].records == [] and pages[0].next_cursor is not None
