"""The merged listing across providers (tslock_django.listing), on memory providers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from django.core import signing

from tests.admin.tslock_test_providers import EVERY_ORDER, FlakyMemoryProvider, KVLikeMemoryProvider
from tslock_django import LockConfiguration
from tslock_django.core.clock import MutableClock
from tslock_django.core.provider import LockProvider
from tslock_django.core.query import ALL_STATES, LockQuery
from tslock_django.exceptions import InvalidCursor
from tslock_django.listing import MergedListing, MergedPage
from tslock_django.providers.memory import MemoryLockProvider


@pytest.fixture
def clock() -> MutableClock:
    return MutableClock()


def fill(clock: MutableClock) -> dict[str, LockProvider]:
    """Three stores with interleaved names, equal and different times, a name in two
    stores, released and expired locks; "c" runs out after its two names."""
    stores: dict[str, LockProvider] = {
        "a": MemoryLockProvider("a", clock=clock),
        "b": MemoryLockProvider("b", clock=clock),
        "c": MemoryLockProvider("c", clock=clock),
    }
    plan = [
        ("a", "alpha", "10m"),
        ("b", "bravo", "10m"),
        ("a", "charlie", "3m"),
        ("b", "delta", "20m"),
        ("c", "echo", "10m"),
        ("a", "foxtrot", "1m"),
        ("b", "golf", "5m"),
        ("a", "hotel", "7m"),
        ("b", "shared", "7m"),
        ("a", "shared", "7m"),
        ("c", "india", "2m"),
        ("a", "juliett", "30s"),
        ("b", "kilo", "4m"),
        ("a", "lima", "4m"),
    ]
    for i, (alias, name, at_most) in enumerate(plan):
        lock = stores[alias].lock(LockConfiguration(name, at_most))
        assert lock is not None
        if name in ("golf", "lima"):
            assert lock.unlock() or True  # released: gone, unless kept for at-least (no)
        if i % 3 == 0:
            clock.advance("1s")  # some share a locked_at, some do not
    # "juliett" (30 s) expires now; the released ones are expired too.
    clock.advance("45s")
    return stores


def expected(stores: dict[str, LockProvider], query: LockQuery) -> list[tuple[str, str]]:
    order = list(stores)
    everything = [
        (query.sort_key(record), order.index(alias), alias, record.name)
        for alias, store in stores.items()
        for record in store.list_locks()
        if query.matches(record, store.clock.now())
    ]
    everything.sort(key=lambda item: (item[0], item[1]), reverse=query.descending)
    return [(alias, name) for _, _, alias, name in everything]


def names(page: MergedPage) -> list[tuple[str, str]]:
    return [(row.alias, row.record.name) for row in page.rows]


def walk(listing: MergedListing) -> tuple[list[MergedPage], list[MergedPage]]:
    """Every page forward from the first, then every page back from the last."""
    forward = [listing.page(None)]
    while forward[-1].next_cursor:
        forward.append(listing.page(forward[-1].next_cursor))
        assert len(forward) < 50, "the walk does not end"
    backward = [forward[-1]]
    while backward[-1].previous_cursor:
        backward.append(listing.page(backward[-1].previous_cursor))
        assert len(backward) < 50, "the walk back does not end"
    return forward, backward


@pytest.mark.parametrize(("order", "descending"), EVERY_ORDER)
@pytest.mark.parametrize("states", [None, ALL_STATES])
def test_pages_of_three_forward_to_the_end_and_back_to_the_start(
    clock: MutableClock, order: str, descending: bool, states: Any
) -> None:
    stores = fill(clock)
    query = LockQuery(order=order, descending=descending, limit=3)
    if states:
        query = replace(query, states=states)
    listing = MergedListing(list(stores), query, stores.__getitem__)
    want = expected(stores, query)
    assert len(want) > 7  # several pages, and the test data did not go stale

    forward, backward = walk(listing)

    assert [row for page in forward for row in names(page)] == want  # none skipped or repeated
    assert all(len(page.rows) == 3 for page in forward[:-1])
    assert forward[0].at_start and forward[0].previous_cursor is None
    assert forward[-1].next_cursor is None
    assert [names(page) for page in backward] == [names(page) for page in reversed(forward)]
    assert backward[-1].at_start
    assert forward[0].total == len(want)  # every memory store counts


def test_a_provider_that_runs_out_early_repeats_nothing(clock: MutableClock) -> None:
    stores = fill(clock)
    listing = MergedListing(list(stores), LockQuery(limit=3), stores.__getitem__)
    forward, _ = walk(listing)
    # "c" has echo and india; after india it contributes nothing, yet nothing repeats.
    from_c = [name for page in forward for alias, name in names(page) if alias == "c"]
    assert from_c == ["echo", "india"]
    assert forward[-1].next_cursor is None


def test_new_locks_between_pages_are_not_repeated_and_old_ones_not_skipped(clock: MutableClock) -> None:
    stores = fill(clock)
    listing = MergedListing(list(stores), LockQuery(limit=3), stores.__getitem__)
    first = listing.page(None)
    assert [n for _, n in names(first)] == ["alpha", "bravo", "charlie"]
    assert stores["b"].lock(LockConfiguration("aardvark", "10m")) is not None  # before the cursor
    assert stores["c"].lock(LockConfiguration("zulu", "10m")) is not None  # after it
    rest: list[str] = []
    page = first
    while page.next_cursor:
        page = listing.page(page.next_cursor)
        rest += [n for _, n in names(page)]
    now_listed = [name for _, name in expected(stores, LockQuery())]
    # "aardvark" sorts before the first page's end, so it is not on a later page;
    # "zulu" sorts after, so it is; everything else exactly once.
    assert rest == [n for n in now_listed if n not in ("aardvark", "alpha", "bravo", "charlie")]
    assert rest[-1] == "zulu"


def test_a_failing_provider_is_reported_and_the_others_listed(clock: MutableClock) -> None:
    stores: dict[str, LockProvider] = {
        "ok": MemoryLockProvider("ok", clock=clock),
        "flaky": FlakyMemoryProvider("flaky", clock=clock),
    }
    for name in ("a", "b", "c", "d"):
        assert stores["ok"].lock(LockConfiguration(name, "5m")) is not None
        assert stores["flaky"].lock(LockConfiguration(f"f-{name}", "5m")) is not None
    listing = MergedListing(list(stores), LockQuery(limit=3), stores.__getitem__)
    FlakyMemoryProvider.broken = True
    try:
        first = listing.page(None)
    finally:
        FlakyMemoryProvider.broken = False
    assert names(first) == [("ok", "a"), ("ok", "b"), ("ok", "c")]
    assert first.errors == ["Lock provider 'flaky' could not be read: HTTP 503 from the store"]
    assert first.total is None  # one store did not say
    assert first.totals == {"ok": 4}
    # Back again, the failed store resumes where it stood: its first page.
    second = listing.page(first.next_cursor)
    assert [n for _, n in names(second)] == ["d", "f-a", "f-b"]
    assert second.errors == []


def test_a_provider_that_cannot_be_built_is_an_error(clock: MutableClock) -> None:
    ok = MemoryLockProvider("ok", clock=clock)
    assert ok.lock(LockConfiguration("x", "5m")) is not None

    def lookup(alias: str) -> LockProvider:
        if alias == "bad":
            raise RuntimeError("cannot build")
        return ok

    page = MergedListing(["bad", "ok"], LockQuery(limit=3), lookup).page(None)
    assert names(page) == [("ok", "x")]
    assert page.errors[0].startswith("Lock provider 'bad' could not be read: unexpected RuntimeError")


@pytest.mark.parametrize(("order", "descending"), EVERY_ORDER)
def test_a_kv_like_store_is_left_out_of_orders_it_cannot_sort(
    clock: MutableClock, order: str, descending: bool
) -> None:
    stores: dict[str, LockProvider] = {
        "db": MemoryLockProvider("db", clock=clock),
        "kv": KVLikeMemoryProvider("kv", clock=clock),
    }
    for name in ("a", "b"):
        assert stores["db"].lock(LockConfiguration(f"db-{name}", "5m")) is not None
        assert stores["kv"].lock(LockConfiguration(f"kv-{name}", "5m")) is not None
    query = LockQuery(order=order, descending=descending, limit=3)
    page = MergedListing(list(stores), query, stores.__getitem__).page(None)
    shown = {alias for alias, _ in names(page)}
    if order == "name" and not descending:
        assert shown == {"db", "kv"}
        assert not any("cannot sort" in note for note in page.notes)
    else:
        assert shown == {"db"}
        expected_note = (
            f"Lock provider 'kv' cannot sort by {order.replace('_', ' ')}; its locks are not in this order."
            if order != "name"
            else "Lock provider 'kv' cannot sort in reverse; its locks are not in this order."
        )
        assert expected_note in page.notes


def test_a_store_that_cannot_page_backwards_offers_the_first_page(clock: MutableClock) -> None:
    stores: dict[str, LockProvider] = {
        "db": MemoryLockProvider("db", clock=clock),
        "kv": KVLikeMemoryProvider("kv", clock=clock),
    }
    for i in range(4):
        assert stores["db"].lock(LockConfiguration(f"n{i}-db", "5m")) is not None
        assert stores["kv"].lock(LockConfiguration(f"n{i}-kv", "5m")) is not None
    listing = MergedListing(list(stores), LockQuery(limit=3), stores.__getitem__)
    first = listing.page(None)
    second = listing.page(first.next_cursor)
    assert [n for _, n in names(second)] == ["n1-kv", "n2-db", "n2-kv"]
    assert second.previous_cursor is None and not second.at_start
    assert second.backward_blocked == [
        "Lock provider 'kv' cannot page backwards; start again from the first page."
    ]
    assert first.backward_blocked == []  # on the first page there is nothing to go back to
    assert first.total is None and first.totals == {"db": 4, "kv": None}


def test_search_and_limitations_are_said(clock: MutableClock) -> None:
    stores: dict[str, LockProvider] = {
        "db": MemoryLockProvider("db", clock=clock),
        "kv": KVLikeMemoryProvider("kv", clock=clock),
    }
    for name in ("Invoice-1", "report", "old_invoices"):
        assert stores["db"].lock(LockConfiguration(name, "5m")) is not None
        assert stores["kv"].lock(LockConfiguration(name, "5m")) is not None
    page = MergedListing(list(stores), LockQuery(search="INVOICE", limit=10), stores.__getitem__).page(None)
    assert names(page) == [
        ("db", "Invoice-1"),
        ("kv", "Invoice-1"),
        ("db", "old_invoices"),
        ("kv", "old_invoices"),
    ]
    assert any(
        note.startswith("Lock provider 'kv' searches only the keys it reads per page") for note in page.notes
    )
    assert not any("'db'" in note for note in page.notes)


def tampered(cursor: str) -> str:
    head, _, signature = cursor.rpartition(":")
    return head + ":" + ("A" if signature[0] != "A" else "B") + signature[1:]


def test_cursors_from_elsewhere_are_refused(clock: MutableClock) -> None:
    stores = fill(clock)
    listing = MergedListing(list(stores), LockQuery(limit=3), stores.__getitem__)
    second = listing.page(listing.page(None).next_cursor)
    assert second.next_cursor and second.previous_cursor
    others = [
        MergedListing(list(stores), LockQuery(limit=3, search="a"), stores.__getitem__),  # another filter
        MergedListing(list(stores), LockQuery(limit=3, descending=True), stores.__getitem__),
        MergedListing(list(stores), LockQuery(limit=4), stores.__getitem__),  # another page size
        MergedListing(["a", "b"], LockQuery(limit=3), stores.__getitem__),  # another provider set
    ]
    for other in others:
        for cursor in (second.next_cursor, second.previous_cursor):
            with pytest.raises(InvalidCursor, match="another listing"):
                other.page(cursor)
    assert listing.page(listing.page(None).next_cursor).next_cursor == second.next_cursor  # stable links
    for bad in (tampered(second.next_cursor), "garbage", second.next_cursor[:-5]):
        with pytest.raises(InvalidCursor, match="not one this site gave out"):
            listing.page(bad)


def test_a_provider_cursor_swapped_inside_a_valid_envelope_is_refused(clock: MutableClock) -> None:
    # Even with our signature (e.g. a leaked SECRET_KEY), each provider's own cursor is
    # checked by the core: "a"'s cursor handed to "b" is refused, not answered.
    stores = fill(clock)
    listing = MergedListing(list(stores), LockQuery(limit=3), stores.__getitem__)
    second = listing.page(listing.page(None).next_cursor)
    signer = signing.Signer(salt="tslock_django.listing.merged-cursor")
    payload = signer.unsign_object(second.next_cursor or "")
    payload["p"]["b"] = payload["p"]["a"]
    forged = signer.sign_object(payload, compress=True)
    with pytest.raises(InvalidCursor, match="belongs to lock provider 'a'"):
        listing.page(forged)
