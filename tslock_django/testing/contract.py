"""The provider contract, as pytest test classes to subclass.

Ported in our own words from the shared contracts of ShedLock and tslock. Subclass and
provide fixtures::

    class TestMyProvider(StrongProviderContract):
        @pytest.fixture
        def provider(self):
            yield MyProvider("mine", ...)

        # Optional: how to let time pass (default: time.sleep). Providers whose expiry
        # is decided on a MutableClock return its advance method instead.
        @pytest.fixture
        def advance(self, clock):
            return clock.advance

        # Optional: called between two writes to one name (Workers KV accepts one write
        # per key per second; its fake advances the clock here). Default: nothing.
        @pytest.fixture
        def settle(self, clock):
            return lambda: clock.advance(1.1)

``ProviderContract`` holds what any single caller may rely on, advisory stores included.
``StrongProviderContract`` adds what only a store with one holder at a time can promise:
no lost update under contention and strictly increasing fencing tokens.

``short`` (seconds) is the lock_at_most_for used where expiry is waited for; raise it
for stores with a coarse clock.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest

from ..core.configuration import LockConfiguration
from ..core.executor import LockingTaskExecutor
from ..core.provider import LockProvider, SimpleLock
from ..core.query import ORDERS, LockPage, LockQuery
from ..core.records import LockRecord, fingerprint
from ..exceptions import InvalidCursor, StaleLockHandle, UnsupportedQuery
from .acontract import AsyncProviderCases, AsyncStrongCases

Advance = Callable[[float], object]


class ProviderContract(AsyncProviderCases):
    """Single-caller behaviour every provider must show (the async cases come from
    :class:`~tslock_django.testing.acontract.AsyncProviderCases`)."""

    short: float = 0.4
    long: str = "5m"

    @pytest.fixture
    def advance(self) -> Advance:
        return time.sleep

    @pytest.fixture
    def settle(self) -> Callable[[], object]:
        return lambda: None

    @pytest.fixture
    def name(self) -> str:
        # Unique per test so tests never see each other's rows in a shared store.
        return f"contract-{uuid.uuid4().hex[:12]}"

    def config(
        self, name: str, at_most: float | str | None = None, at_least: float | str = 0
    ) -> LockConfiguration:
        return LockConfiguration(name, self.long if at_most is None else at_most, at_least)

    def acquire(self, provider: LockProvider, config: LockConfiguration) -> SimpleLock:
        held = provider.lock(config)
        assert held is not None, f"{config.name!r} should have been acquired"
        return held

    def past_short(self, advance: Advance) -> None:
        advance(self.short * 1.5)

    # -- acquiring -------------------------------------------------------------------

    def test_lock_once(self, provider: LockProvider, name: str) -> None:
        held = self.acquire(provider, self.config(name))
        assert held.name == name
        assert held.record.lock_until > held.record.locked_at
        assert held.record.token, "the holder must get its ownership token"
        assert held.record.provider == provider.alias

    def test_second_lock_is_refused(self, provider: LockProvider, name: str) -> None:
        self.acquire(provider, self.config(name))
        assert provider.lock(self.config(name)) is None

    def test_two_names_are_independent(self, provider: LockProvider, name: str) -> None:
        self.acquire(provider, self.config(name))
        self.acquire(provider, self.config(name + "-other"))

    def test_names_compare_exactly(self, provider: LockProvider, name: str) -> None:
        # Case, trailing spaces and accents are different names in every store.
        for variant in (name, name.upper(), name + " ", name + "\u00e9"):
            self.acquire(provider, self.config(variant))

    def test_lock_twice_in_a_row(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        first = self.acquire(provider, self.config(name))
        settle()
        assert first.unlock() is True
        settle()
        self.acquire(provider, self.config(name))

    def test_lock_right_after_unlock_ten_times(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        for round_ in range(10):
            held = provider.lock(self.config(name))
            assert held is not None, f"round {round_}: the lock released just before should be free"
            settle()
            assert held.unlock() is True
            settle()

    def test_expires_after_lock_at_most_for(
        self, provider: LockProvider, name: str, advance: Advance
    ) -> None:
        self.acquire(provider, self.config(name, at_most=self.short))
        assert provider.lock(self.config(name)) is None
        self.past_short(advance)
        self.acquire(provider, self.config(name))

    def test_unicode_and_reserved_characters_round_trip(self, provider: LockProvider, name: str) -> None:
        odd = f"{name}/reports?x=1&y=%2F ünïcødé ✓"
        held = self.acquire(provider, self.config(odd))
        assert held.name == odd
        listed = {r.name: r for r in provider.list_locks(prefix=name)}
        assert odd in listed
        assert provider.lock(self.config(odd)) is None

    def test_name_over_the_limit_is_rejected(self, provider: LockProvider) -> None:
        with pytest.raises(ValueError, match="too long"):
            provider.lock(self.config("x" * (provider.max_key_bytes + 1)))

    # -- lock_at_least_for ------------------------------------------------------------

    def test_at_least_keeps_it_held_after_unlock(
        self, provider: LockProvider, name: str, advance: Advance, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name, at_least=self.short))
        settle()
        assert held.unlock() is True
        settle()
        assert provider.lock(self.config(name)) is None, "released before lock_at_least_for passed"
        self.past_short(advance)
        self.acquire(provider, self.config(name))

    # -- extend ----------------------------------------------------------------------

    def test_extend_once(
        self, provider: LockProvider, name: str, advance: Advance, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name, at_most=self.short))
        settle()
        extended = held.extend(self.long)
        assert extended is not None
        assert extended.record.lock_until > held.record.lock_until
        assert extended.fencing_token == held.fencing_token
        self.past_short(advance)
        assert provider.lock(self.config(name)) is None, "the extension did not keep the lock"

    def test_extend_several_times(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name, at_most=self.short))
        for _ in range(3):
            settle()
            successor = held.extend(self.short * 4)
            assert successor is not None
            held = successor
        settle()
        assert held.unlock() is True
        settle()
        self.acquire(provider, self.config(name))

    def test_extend_after_unlock_raises(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name))
        settle()
        held.unlock()
        with pytest.raises(StaleLockHandle):
            held.extend(self.long)

    def test_unlock_after_expiry_reports_nothing_released(
        self, provider: LockProvider, name: str, advance: Advance
    ) -> None:
        held = self.acquire(provider, self.config(name, at_most=self.short))
        self.past_short(advance)
        assert held.unlock() is False, "an expired lock was no longer held, so nothing was released"

    def test_no_extend_after_expiry(self, provider: LockProvider, name: str, advance: Advance) -> None:
        held = self.acquire(provider, self.config(name, at_most=self.short))
        self.past_short(advance)
        assert held.extend(self.long) is None

    def test_extend_honours_at_least(
        self, provider: LockProvider, name: str, advance: Advance, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name))
        settle()
        extended = held.extend(self.long, self.short)
        assert extended is not None
        settle()
        assert extended.unlock() is True
        settle()
        assert provider.lock(self.config(name)) is None, "at-least of the extension was ignored"
        self.past_short(advance)
        self.acquire(provider, self.config(name))

    # -- single-use handles and ownership -------------------------------------------

    def test_handle_is_single_use_after_unlock(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name))
        settle()
        held.unlock()
        with pytest.raises(StaleLockHandle):
            held.unlock()

    def test_handle_is_single_use_after_extend(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name))
        settle()
        assert held.extend(self.long) is not None
        with pytest.raises(StaleLockHandle):
            held.unlock()
        with pytest.raises(StaleLockHandle):
            held.extend(self.long)

    def test_stale_holder_cannot_unlock_a_newer_holder(
        self, provider: LockProvider, name: str, advance: Advance, settle: Callable[[], object]
    ) -> None:
        stale = self.acquire(provider, self.config(name, at_most=self.short))
        self.past_short(advance)
        newer = self.acquire(provider, self.config(name))
        settle()
        assert stale.unlock() is False
        assert provider.lock(self.config(name)) is None, "the stale unlock freed the newer holder"
        assert newer.extend(self.long) is not None

    # -- listing and force release -------------------------------------------------

    def test_list_locks_shows_holder_without_token(self, provider: LockProvider, name: str) -> None:
        held = self.acquire(provider, self.config(name))
        self.acquire(provider, self.config(name + "-b"))
        listed = provider.list_locks(prefix=name)
        assert [r.name for r in listed] == [name, name + "-b"]
        mine = listed[0]
        assert mine.token == "", "listings must not reveal ownership tokens"
        assert mine.token_fingerprint == fingerprint(held.token)
        assert mine.locked_by == held.record.locked_by
        assert mine.state(held.record.locked_at) == "held"
        assert mine.provider == provider.alias
        assert provider.list_locks(prefix=name + "-nothing") == []

    def test_force_unlock_by_token(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        held = self.acquire(provider, self.config(name))
        settle()
        assert provider.force_unlock(name, expected="not-the-token") is False
        assert provider.lock(self.config(name)) is None
        assert provider.force_unlock(name, expected=held.token) is True
        settle()
        self.acquire(provider, self.config(name))

    def test_force_unlock_of_a_free_name(self, provider: LockProvider, name: str) -> None:
        assert provider.force_unlock(name, expected=None) is False

    # -- listing queries -------------------------------------------------------------

    def walk(self, provider: LockProvider, query: LockQuery) -> list[LockRecord]:
        """Every record of ``query``, page after page (all readable: the provider wrote
        them itself)."""
        records = [record for page in provider.pages(query) for record in page.records]
        unreadable = [r for r in records if not isinstance(r, LockRecord)]
        assert not unreadable, f"the provider could not read records it wrote: {unreadable}"
        return [r for r in records if isinstance(r, LockRecord)]

    def test_query_answers_each_order_both_ways_across_pages(self, provider: LockProvider, name: str) -> None:
        names = [f"{name}/{suffix}" for suffix in ("c", "a", "e", "b", "d")]
        for i, each in enumerate(names):
            # Different lengths, so lock_until and name orders differ.
            self.acquire(provider, self.config(each, at_most=f"{(7 * i) % 5 + 1}m"))
        for order in ORDERS:
            for descending in (False, True):
                query = LockQuery(prefix=name + "/", order=order, descending=descending, limit=2)
                if order not in provider.listing.orders or (descending and not provider.listing.descending):
                    with pytest.raises(UnsupportedQuery):
                        provider.query(query)
                    continue
                walked = self.walk(provider, query)
                assert sorted(r.name for r in walked) == sorted(names), (order, descending)
                keys = [query.sort_key(r) for r in walked]
                assert keys == sorted(keys, reverse=descending), f"{order} descending={descending}: {keys}"
                whole = provider.query(LockQuery(prefix=name + "/", order=order, descending=descending))
                assert [r.name for r in whole.records] == [r.name for r in walked]
                assert whole.next_cursor is None
                assert all(r.token == "" for r in walked), "listings must not reveal ownership tokens"
                if provider.listing.total:
                    assert whole.total == len(names)

    def test_query_cursor_neither_skips_nor_repeats_while_locks_change(
        self, provider: LockProvider, name: str, settle: Callable[[], object]
    ) -> None:
        held = {
            f"{name}/{i:02}": self.acquire(provider, self.config(f"{name}/{i:02}")) for i in range(0, 16, 2)
        }
        for order in [o for o in ("name", "lock_until") if o in provider.listing.orders]:
            query = LockQuery(prefix=name + "/", order=order, limit=3)
            first = provider.query(query)
            assert len(first.records) == 3 and first.next_cursor
            seen = [r.name for r in first.records]
            # Between pages: a listed lock and a not yet listed one end, new ones start
            # before and after the cursor's place.
            listed_gone, unlisted_gone = seen[0], sorted(set(held) - set(seen))[-1]
            settle()
            for gone in (listed_gone, unlisted_gone):
                assert held.pop(gone).unlock() is True
            for new in (f"{name}/{order}-01", f"{name}/{order}-13"):
                held[new] = self.acquire(provider, self.config(new))
            settle()
            rest = self.walk(
                provider, LockQuery(prefix=name + "/", order=order, limit=3, cursor=first.next_cursor)
            )
            seen += [r.name for r in rest]
            assert len(seen) == len(set(seen)), f"{order}: a record was listed twice: {seen}"
            stable = set(held) - {f"{name}/{order}-01", f"{name}/{order}-13"}
            assert stable <= set(seen), f"{order}: skipped {sorted(stable - set(seen))}"

    def test_query_filters_states(
        self, provider: LockProvider, name: str, advance: Advance, settle: Callable[[], object]
    ) -> None:
        self.acquire(provider, self.config(f"{name}/expired", at_most=self.short))
        self.acquire(provider, self.config(f"{name}/held"))
        at_least = self.acquire(provider, self.config(f"{name}/at-least", at_least=self.long))
        settle()
        assert at_least.unlock() is True
        self.past_short(advance)

        def names(*states: str) -> list[str]:
            page = provider.query(LockQuery(prefix=name + "/", states=frozenset(states)))
            return [r.name[len(name) + 1 :] for r in page.records]

        assert names("held") == ["held"]
        assert names("at_least") == ["at-least"]
        assert names("held", "at_least") == ["at-least", "held"]
        default = provider.query(LockQuery(prefix=name + "/"))
        assert [r.name for r in default.records] == [f"{name}/at-least", f"{name}/held"], (
            "current locks by default"
        )
        if provider.listing.expired:
            assert names("expired") == ["expired"]
            assert names("held", "at_least", "expired") == ["at-least", "expired", "held"]
        else:
            page = provider.query(LockQuery(prefix=name + "/", states=frozenset({"expired"})))
            assert page.records == [] and page.notes, "a store without expired records must say so"

    def test_query_prefix_and_search_take_like_metacharacters_literally(
        self, provider: LockProvider, name: str
    ) -> None:
        for suffix in ("a_b", "axb", "a%b", "a%%b", "a\\b", "a\\xb", "zz"):
            self.acquire(provider, self.config(f"{name}/{suffix}"))

        def found(prefix: str = "", search: str = "") -> list[str]:
            records = self.walk(provider, LockQuery(prefix=f"{name}/{prefix}", search=search, limit=2))
            return sorted(r.name[len(name) + 1 :] for r in records)

        assert found(search="a_b") == ["a_b"]
        assert found(search="%") == ["a%%b", "a%b"]
        assert found(search="%%") == ["a%%b"]
        assert found(search="\\") == ["a\\b", "a\\xb"]
        assert found(search="\\x") == ["a\\xb"]
        assert found(search="A_B") == ["a_b"], "search ignores the case of ASCII letters"
        assert found(search="nothing") == []
        assert found(prefix="a_") == ["a_b"]
        assert found(prefix="a%") == ["a%%b", "a%b"]
        assert found(prefix="a\\") == ["a\\b", "a\\xb"]
        assert found(prefix="A") == [], "prefixes compare exactly"
        assert found(prefix="a", search="x") == ["a\\xb", "axb"]

    def test_query_refuses_cursors_of_other_queries_and_altered_ones(
        self, provider: LockProvider, name: str
    ) -> None:
        for suffix in ("a", "b", "c"):
            self.acquire(provider, self.config(f"{name}/{suffix}"))
        query = LockQuery(prefix=name + "/", limit=1)
        cursor = provider.query(query).next_cursor
        assert cursor
        second = provider.query(LockQuery(prefix=name + "/", limit=2, cursor=cursor))
        assert [r.name for r in second.records] == [f"{name}/b", f"{name}/c"], (
            "the limit may change between pages"
        )
        for other in (
            LockQuery(prefix=name + "/a", cursor=cursor),
            LockQuery(prefix=name + "/", search="b", cursor=cursor),
            LockQuery(prefix=name + "/", descending=True, cursor=cursor),
            LockQuery(prefix=name + "/", states=frozenset({"held"}), cursor=cursor),
        ):
            with pytest.raises(InvalidCursor):
                provider.query(other)
        middle = len(cursor) // 2
        altered = cursor[:middle] + ("A" if cursor[middle] != "A" else "B") + cursor[middle + 1 :]
        for bad in (altered, cursor[:-3], "not-a-cursor", cursor + "x"):
            with pytest.raises(InvalidCursor):
                provider.query(LockQuery(prefix=name + "/", limit=1, cursor=bad))

    def test_query_pages_backwards(self, provider: LockProvider, name: str) -> None:
        for suffix in ("a", "b", "c", "d", "e"):
            self.acquire(provider, self.config(f"{name}/{suffix}"))
        query = LockQuery(prefix=name + "/", limit=2)
        forward: list[LockPage] = list(provider.pages(query))
        assert [[r.name[-1] for r in p.records] for p in forward] == [["a", "b"], ["c", "d"], ["e"]]
        assert forward[0].previous_cursor is None, "the first page has no previous page"
        if not provider.listing.backward:
            assert all(p.previous_cursor is None for p in forward)
            return
        back = provider.query(LockQuery(prefix=name + "/", limit=2, cursor=forward[2].previous_cursor))
        assert [r.name[-1] for r in back.records] == ["c", "d"]
        back = provider.query(LockQuery(prefix=name + "/", limit=2, cursor=back.previous_cursor))
        assert [r.name[-1] for r in back.records] == ["a", "b"]
        assert back.previous_cursor is None
        again = provider.query(LockQuery(prefix=name + "/", limit=2, cursor=back.next_cursor))
        assert [r.name[-1] for r in again.records] == ["c", "d"], "forward again from a page read backwards"


class StrongProviderContract(ProviderContract, AsyncStrongCases):
    """What only a store with one holder at a time promises."""

    threads = 8
    rounds = 25

    def thread_finished(self) -> None:
        """Called at the end of each contention thread: close its database connections,
        which Django opens per thread and would otherwise leak."""
        from django.db import connections

        connections.close_all()

    def test_fencing_tokens_strictly_increase(
        self, provider: LockProvider, name: str, advance: Advance
    ) -> None:
        seen = []
        held = self.acquire(provider, self.config(name))
        seen.append(held.fencing_token)
        held.unlock()
        held = self.acquire(provider, self.config(name, at_most=self.short))
        seen.append(held.fencing_token)
        self.past_short(advance)  # the next holder takes over an expired lock
        held = self.acquire(provider, self.config(name))
        seen.append(held.fencing_token)
        assert provider.force_unlock(name, expected=held.fencing_token) is True
        seen.append(self.acquire(provider, self.config(name)).fencing_token)
        tokens = [t for t in seen if isinstance(t, int)]
        assert tokens == seen, f"every holder of a strong lock gets a fencing token: {seen}"
        assert tokens == sorted(set(tokens)), f"fencing tokens must strictly increase: {seen}"

    def test_force_unlock_by_fencing_token(self, provider: LockProvider, name: str) -> None:
        held = self.acquire(provider, self.config(name))
        assert held.fencing_token is not None
        assert provider.force_unlock(name, expected=held.fencing_token - 1) is False
        assert provider.lock(self.config(name)) is None
        assert provider.force_unlock(name, expected=held.fencing_token) is True
        assert held.unlock() is False, "the released holder no longer owns the lock"
        self.acquire(provider, self.config(name))

    def test_no_lost_update_under_contention(self, provider: LockProvider, name: str) -> None:
        executor = LockingTaskExecutor(provider)
        config = self.config(name)
        state = {"counter": 0, "inside": 0, "overlaps": 0}
        executed = []
        errors: list[Exception] = []
        start = threading.Barrier(self.threads)

        def task() -> None:
            # A read-modify-write with a yield in the middle: without mutual exclusion
            # increments get lost and the overlap counter shows it.
            state["inside"] += 1
            if state["inside"] > 1:
                state["overlaps"] += 1
            value = state["counter"]
            time.sleep(0)
            state["counter"] = value + 1
            state["inside"] -= 1

        def worker() -> None:
            try:
                start.wait()
                for _ in range(self.rounds):
                    result = executor.execute_with_lock(task, config)
                    executed.append(result.executed)
            except Exception as err:  # noqa: BLE001  (re-raised below, in the test's own thread)
                errors.append(err)
            finally:
                self.thread_finished()

        pool = [threading.Thread(target=worker) for _ in range(self.threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in pool), "a worker hung"
        assert not errors, errors
        assert len(executed) == self.threads * self.rounds
        assert sum(executed) >= 1
        assert state["overlaps"] == 0
        assert state["counter"] == sum(executed), "an increment was lost: two holders overlapped"


__all__ = ["ProviderContract", "StrongProviderContract"]
