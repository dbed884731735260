"""The listing query in the core: validation, signed cursors, paging, and what the base
class does for stores that cannot answer everything (on the in-process provider)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.test import override_settings

from tslock_django import (
    InvalidCursor,
    ListingSupport,
    LockConfiguration,
    LockProviderError,
    LockQuery,
    MutableClock,
    UnsupportedQuery,
)
from tslock_django.core.query import (
    ALL_STATES,
    CURRENT_STATES,
    MAX_LIMIT,
    StorePage,
    backward_from,
    fold,
)
from tslock_django.providers.memory import MemoryLockProvider


@pytest.fixture
def clock() -> MutableClock:
    return MutableClock()


@pytest.fixture
def memory(clock: MutableClock) -> MemoryLockProvider:
    provider = MemoryLockProvider("memory", clock=clock)
    for name in ("job-a", "job-b", "job-c", "job-d", "other"):
        assert provider.lock(LockConfiguration(name, "1h")) is not None
    return provider


# -- LockQuery ---------------------------------------------------------------------------


def test_defaults_are_current_locks_by_name() -> None:
    query = LockQuery()
    assert query.states == CURRENT_STATES == frozenset({"held", "at_least"})
    assert (query.order, query.descending, query.limit, query.cursor) == ("name", False, 100, None)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"states": {"held", "gone"}}, "unknown lock state(s) 'gone'; choose from held, at_least, expired"),
        ({"states": set()}, "at least one state"),
        ({"states": "held"}, "must be a set"),
        ({"order": "remaining"}, "unknown order 'remaining'; choose from name, lock_until, locked_at"),
        ({"limit": 0}, f"from 1 to {MAX_LIMIT}"),
        ({"limit": MAX_LIMIT + 1}, f"from 1 to {MAX_LIMIT}"),
        ({"limit": True}, "whole number"),
        ({"descending": "yes"}, "True or False"),
        ({"prefix": None}, "must be strings"),
        ({"cursor": 5}, "cursor must be a string"),
    ],
)
def test_bad_queries_say_what_is_allowed(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        LockQuery(**kwargs)
    assert says in str(caught.value)


def test_states_accept_any_iterable_and_become_a_frozenset() -> None:
    assert LockQuery(states=["expired", "held"]).states == frozenset({"expired", "held"})


def test_search_folds_ascii_letters_only() -> None:
    assert fold("ÉcoLE-Ü") == "École-Ü"


def test_the_shape_ignores_limit_and_cursor_but_not_the_rest() -> None:
    base = LockQuery(prefix="a")
    assert base.shape == replace(base, limit=5, cursor="x").shape
    for changed in (
        replace(base, prefix="b"),
        replace(base, search="x"),
        replace(base, states=ALL_STATES),
        replace(base, order="lock_until"),
        replace(base, descending=True),
    ):
        assert changed.shape != base.shape


# -- cursors -----------------------------------------------------------------------------


def test_pages_follow_cursors_and_report_totals(memory: MemoryLockProvider) -> None:
    query = LockQuery(prefix="job-", limit=3)
    first = memory.query(query)
    assert [r.name for r in first.records] == ["job-a", "job-b", "job-c"]
    assert first.total == 4 and first.previous_cursor is None and first.next_cursor
    second = memory.query(replace(query, cursor=first.next_cursor))
    assert [r.name for r in second.records] == ["job-d"]
    assert second.next_cursor is None
    assert second.previous_cursor
    assert [r.name for r in memory.query(replace(query, cursor=second.previous_cursor)).records] == [
        "job-a",
        "job-b",
        "job-c",
    ]


def test_cursor_after_any_record_continues_right_after_it(memory: MemoryLockProvider) -> None:
    query = LockQuery(limit=5)
    page = memory.query(query)
    assert [r.name for r in memory.query(replace(query, cursor=page.cursor_after(1))).records] == [
        "job-c",
        "job-d",
        "other",
    ]
    with pytest.raises(IndexError):
        page.cursor_after(5)


def test_backward_from_a_forward_cursor_reads_the_records_up_to_it(memory: MemoryLockProvider) -> None:
    query = LockQuery(limit=2)
    after_c = memory.query(LockQuery(limit=5)).cursor_after(2)
    page = memory.query(replace(query, cursor=backward_from(after_c)))
    assert [r.name for r in page.records] == ["job-b", "job-c"]
    assert page.previous_cursor, "job-a comes before"
    assert [r.name for r in memory.query(replace(query, cursor=page.next_cursor)).records] == [
        "job-d",
        "other",
    ]


def test_backward_from_a_record_that_ended_meanwhile_stops_just_before_its_place(
    memory: MemoryLockProvider,
) -> None:
    after_c = memory.query(LockQuery(limit=5)).cursor_after(2)
    assert memory.force_unlock("job-c", expected=None) is True
    page = memory.query(LockQuery(limit=2, cursor=backward_from(after_c)))
    assert [r.name for r in page.records] == ["job-a", "job-b"]
    one = memory.query(LockQuery(limit=1, cursor=backward_from(memory.query(LockQuery()).cursor_after(1))))
    assert [r.name for r in one.records] == ["job-b"], "a page of one is the record itself"


def test_a_cursor_of_another_provider_is_refused(memory: MemoryLockProvider, clock: MutableClock) -> None:
    cursor = memory.query(LockQuery(limit=1)).next_cursor
    other = MemoryLockProvider("elsewhere", clock=clock)
    with pytest.raises(InvalidCursor, match="belongs to lock provider 'memory', not 'elsewhere'"):
        other.query(LockQuery(limit=1, cursor=cursor))


def test_a_cursor_signed_with_another_secret_key_is_refused(memory: MemoryLockProvider) -> None:
    cursor = memory.query(LockQuery(limit=1)).next_cursor
    with (
        override_settings(SECRET_KEY="another-secret-key-" + "x" * 40),
        pytest.raises(InvalidCursor, match="start again from the first page"),
    ):
        memory.query(LockQuery(limit=1, cursor=cursor))


def test_a_signed_cursor_whose_position_does_not_fit_the_order_is_refused(memory: MemoryLockProvider) -> None:
    by_time = LockQuery(order="lock_until", limit=1)
    cursor = memory.query(by_time).next_cursor
    assert cursor
    # Same shape is impossible across orders, so forge one through the encoder itself.
    from tslock_django.core.query import encode_cursor

    forged = encode_cursor("memory", by_time, ["job-a", "job-a"])
    with pytest.raises(InvalidCursor, match="does not fit"):
        memory.query(replace(by_time, cursor=forged))


def test_an_empty_cursor_means_the_first_page(memory: MemoryLockProvider) -> None:
    assert [r.name for r in memory.query(LockQuery(limit=1, cursor="")).records] == ["job-a"]


def test_query_takes_a_lock_query_only(memory: MemoryLockProvider) -> None:
    with pytest.raises(TypeError, match="takes a LockQuery"):
        memory.query({"prefix": "job-"})  # type: ignore[arg-type]


# -- what the base class does for stores that answer less ----------------------------


class NameOrderOnly(MemoryLockProvider):
    listing: ClassVar = ListingSupport(
        orders=frozenset({"name"}), descending=False, expired=False, backward=False, total=False
    )


def test_orders_and_directions_a_store_cannot_sort_by_are_refused(clock: MutableClock) -> None:
    provider = NameOrderOnly("kvlike", clock=clock)
    with pytest.raises(UnsupportedQuery, match=r"cannot sort by lock_until .* it sorts by name"):
        provider.query(LockQuery(order="lock_until"))
    with pytest.raises(UnsupportedQuery, match="reverse"):
        provider.query(LockQuery(descending=True))
    assert provider.listing.limitations() == [
        "cannot sort by lock until, locked at",
        "cannot sort in reverse",
        "keeps no expired records",
        "cannot page backwards",
    ]


def test_a_store_without_expired_records_says_so_instead_of_listing_them(clock: MutableClock) -> None:
    provider = NameOrderOnly("kvlike", clock=clock)
    assert provider.lock(LockConfiguration("short", "1s")) is not None
    assert provider.lock(LockConfiguration("long", "1h")) is not None
    clock.advance(2)
    only_expired = provider.query(LockQuery(states={"expired"}))
    assert only_expired.records == [] and only_expired.next_cursor is None
    assert "keeps no expired records" in only_expired.notes[0]
    everything = provider.query(LockQuery(states=ALL_STATES))
    assert [r.name for r in everything.records] == ["long"]
    assert everything.notes
    assert [r.name for r in provider.list_locks()] == ["long"]


def test_a_store_that_cannot_page_backwards_gives_no_previous_cursor(clock: MutableClock) -> None:
    provider = NameOrderOnly("kvlike", clock=clock)
    for name in "abc":
        provider.lock(LockConfiguration(name, "1h"))
    first = provider.query(LockQuery(limit=1))
    second = provider.query(LockQuery(limit=1, cursor=first.next_cursor))
    assert second.previous_cursor is None
    assert first.next_cursor
    with pytest.raises(InvalidCursor, match="cannot page backwards"):
        provider.query(LockQuery(limit=1, cursor=backward_from(first.next_cursor)))


class RepeatingStore(MemoryLockProvider):
    """A store that answers the same page and position forever."""

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        page = super()._query(query, None)
        return replace(page, more=True)


def test_walking_pages_stops_when_a_store_repeats_its_cursor(clock: MutableClock) -> None:
    provider = RepeatingStore("loop", clock=clock)
    for name in "abc":
        provider.lock(LockConfiguration(name, "1h"))
    with pytest.raises(LockProviderError, match="repeated a page cursor"):
        provider.list_locks()


# -- retention on the reference store ----------------------------------------------------


def test_memory_purge_keeps_current_locks_and_the_fencing_counter(
    memory: MemoryLockProvider, clock: MutableClock
) -> None:
    old = memory.lock(LockConfiguration("old", "1s"))
    assert old is not None
    clock.advance(3600 * 2)
    assert memory.purge(timedelta(hours=1), dry_run=True) == 6
    assert memory.purge(timedelta(days=1)) == 0
    assert memory.purge(timedelta(hours=1)) == 6
    assert memory.list_locks() == []
    again = memory.lock(LockConfiguration("old", "1h"))
    assert again is not None and old.fencing_token is not None
    assert again.fencing_token == old.fencing_token + 1


def test_an_unreadable_record_matches_every_state_but_not_other_names() -> None:
    from datetime import datetime, timezone

    from tslock_django.core.records import UnreadableRecord

    row = UnreadableRecord("job-x", "kv", "not JSON")
    now = datetime.now(timezone.utc)
    for states in ({"held"}, {"at_least"}, {"expired"}):
        assert LockQuery(states=states).matches(row, now)
    assert not LockQuery(prefix="other").matches(row, now)
    assert not LockQuery(search="zzz").matches(row, now)
    assert LockQuery(order="lock_until").sort_key(row) == (-1, "job-x")


class EndlessEmptyStore(MemoryLockProvider):
    """A store that answers an empty page and a fresh place to go on, forever."""

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        step = 0 if after is None else int(after[0]) + 1  # type: ignore[index]
        return StorePage([], more=True, resume=[step, "x"], positions=[])


def test_walking_pages_stops_after_many_empty_pages_in_a_row(clock: MutableClock) -> None:
    provider = EndlessEmptyStore("endless", clock=clock)
    walked = 0
    with pytest.raises(LockProviderError, match="5 pages in a row without a record"):
        for _ in provider.pages(LockQuery(), max_empty_pages=5):
            walked += 1
    assert walked == 5


def test_previous_of_an_empty_page_ends_with_the_record_shown_last(memory: MemoryLockProvider) -> None:
    query = LockQuery(prefix="job-", limit=2)
    first = memory.query(query)
    after_b = first.next_cursor
    assert [r.name for r in first.records] == ["job-a", "job-b"]
    for name in ("job-c", "job-d"):
        assert memory.force_unlock(name, expected=None) is True
    empty = memory.query(replace(query, cursor=after_b))
    assert empty.records == [] and empty.next_cursor is None and empty.previous_cursor
    back = memory.query(replace(query, cursor=empty.previous_cursor))
    assert [r.name for r in back.records] == ["job-a", "job-b"], "job-b, shown last before, is not skipped"


def test_next_of_an_empty_backward_page_is_the_first_page(memory: MemoryLockProvider) -> None:
    query = LockQuery(prefix="job-", limit=2)
    second = memory.query(replace(query, cursor=memory.query(query).next_cursor))
    for name in ("job-a", "job-b"):
        assert memory.force_unlock(name, expected=None) is True
    back = memory.query(replace(query, cursor=second.previous_cursor))
    assert back.records == [] and back.previous_cursor is None
    again = memory.query(replace(query, cursor=back.next_cursor))
    assert [r.name for r in again.records] == ["job-c", "job-d"], "job-c is not skipped"
    assert again.previous_cursor is None, "that is the first page"


def test_a_backward_page_of_one_knows_whether_anything_comes_before(memory: MemoryLockProvider) -> None:
    everything = memory.query(LockQuery(limit=5))
    at_a = memory.query(LockQuery(limit=1, cursor=backward_from(everything.cursor_after(0))))
    assert [r.name for r in at_a.records] == ["job-a"] and at_a.previous_cursor is None
    at_b = memory.query(LockQuery(limit=1, cursor=backward_from(everything.cursor_after(1))))
    assert [r.name for r in at_b.records] == ["job-b"] and at_b.previous_cursor


def test_an_unreadable_record_has_unknown_state_no_times_and_a_bounded_escaped_reason() -> None:
    from datetime import datetime, timezone

    from tslock_django.core.records import ListedRecord, LockRecord, UnreadableRecord

    row = UnreadableRecord("job", "kv", "bad \x1b[2J\u202e" + "x" * 10_000)
    assert row.state(datetime.now(timezone.utc)) == "unknown"
    assert (row.lock_until, row.locked_at, row.fencing_token, row.token_fingerprint, row.released) == (
        None,
        None,
        None,
        "",
        False,
    )
    assert row.reason.startswith("bad \\x1b[2J\\u202e") and row.reason.isprintable()
    assert len(row.reason) < UnreadableRecord.max_reason_chars + 40 and row.reason.endswith(
        "more characters)"
    )
    assert row.unreadable == row.reason and row.locked_by == f"unreadable: {row.reason}"
    assert not hasattr(row, "is_held"), "whether it is held is not known"
    assert isinstance(row, ListedRecord) and not isinstance(row, LockRecord)
    assert LockRecord.unreadable == ""
