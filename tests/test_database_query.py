"""The database provider's listing queries and purge, on SQLite, PostgreSQL and MariaDB:
what the SQL must get exactly right beyond the contract (name collation, ties in the time
orders, LIKE metacharacters, cursors over a thousand rows, reading inside the caller's
transaction) and retention (purge in batches, fencing tokens across a purge)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connections, transaction

from tests.conftest import database_marks
from tslock_django import LockConfiguration, LockProviderError, MutableClock
from tslock_django.core.query import ALL_STATES, CURRENT_STATES, ORDERS, LockQuery, record_state
from tslock_django.core.records import LockRecord
from tslock_django.models import FencingMark
from tslock_django.providers.database import MAX_PURGE_BATCH, DatabaseLockProvider
from tslock_django.providers.database import tables as database
from tslock_django.providers.database.listing import prefix_end as _prefix_end
from tslock_django.providers.epoch import to_epoch_us

# A whole millisecond, so SQLite (which keeps milliseconds) stores every time exactly.
T0 = datetime(2031, 5, 17, 9, 30, 0, tzinfo=timezone.utc)

# Names whose order differs between a locale collation (en_US: case and punctuation
# nearly ignored at first) and code point order, plus characters beyond the BMP, where
# UTF-16 order (U+10000 as surrogates D800 DC00) would put them before U+FF61.
COLLATION_NAMES = [
    "a_b", "aB", "a-b", "ab", "AB", "Ab", "a b", "a.b", "a~b", "a\u00a0b", "a!b",
    "e", "\u00e9", "\u00c9", "E", "f", "z", "Z", "\u00e4", "\u00df", "ss", "\u03a9",
    "\uff61", "\U00010000", "\U0001f512", "10", "9", "-", "_",
]  # fmt: skip


@dataclass(frozen=True)
class Expected:
    """A row as the test wrote it, to compare listings with."""

    name: str
    lock_until: datetime
    locked_at: datetime
    released: bool

    def record(self) -> LockRecord:
        return LockRecord(self.name, self.lock_until, self.locked_at, "", released=self.released)


class QueryBehaviour:
    using = "default"
    one_writer = False

    @pytest.fixture
    def clock(self) -> MutableClock:
        return MutableClock(T0)

    @pytest.fixture
    def provider(self, clock: MutableClock) -> Iterator[DatabaseLockProvider]:
        """Expiry on a MutableClock: rows get exactly the times the test chooses."""
        provider = DatabaseLockProvider("dbq", using=self.using, use_db_time=False, clock=clock)
        yield provider
        provider.close()

    def lock(self, provider: DatabaseLockProvider, name: str, at_most: Any = "1h", at_least: Any = 0) -> Any:
        held = provider.lock(LockConfiguration(name, at_most, at_least))
        assert held is not None, f"{name!r} should have been free"
        return held

    def walk(self, provider: DatabaseLockProvider, query: LockQuery) -> list[LockRecord]:
        return [r for page in provider.pages(query) for r in page.records]

    # -- names in code point order ---------------------------------------------------

    def test_names_sort_in_code_point_order(self, provider: DatabaseLockProvider) -> None:
        for name in COLLATION_NAMES:
            self.lock(provider, "c/" + name)
        expected = sorted("c/" + n for n in COLLATION_NAMES)
        for limit in (1000, 4):
            for descending in (False, True):
                query = LockQuery(prefix="c/", descending=descending, limit=limit)
                listed = [r.name for r in self.walk(provider, query)]
                assert listed == sorted(expected, reverse=descending), (limit, descending)

    def test_prefix_ranges_are_exact_at_the_edges_of_unicode(self, provider: DatabaseLockProvider) -> None:
        names = ["x\U0010ffff", "x\U0010ffffy", "x\U0010fffe", "y", "\ud7ffa", "\ue000", "\ud7fe"]
        for name in names:
            self.lock(provider, name)
        for prefix in ("x\U0010ffff", "x", "\ud7ff", "\ud7fe", "\ue000", "x\U0010fffe", "y", "z"):
            found = [r.name for r in provider.query(LockQuery(prefix=prefix)).records]
            assert found == sorted(n for n in names if n.startswith(prefix)), prefix
        everything = [r.name for r in provider.query(LockQuery(prefix="", limit=100)).records]
        assert everything == sorted(names)

    def test_text_no_name_can_hold_matches_nothing_without_an_error(
        self, provider: DatabaseLockProvider
    ) -> None:
        self.lock(provider, "plain")
        for odd in ("\x00", "pl\x00", "\ud800", "\x7f", "\n"):
            assert provider.query(LockQuery(prefix=odd)).records == []
            assert provider.query(LockQuery(search=odd)).records == []

    def test_prefix_end_is_the_least_string_above_the_prefix(self) -> None:
        assert _prefix_end("ab") == "ac"
        assert _prefix_end("a\U0010ffff") == "b"
        assert _prefix_end("\U0010ffff\U0010ffff") is None
        assert _prefix_end("a\ud7ff") == "a\ue000", "surrogates are skipped: no name holds one"

    # -- search -----------------------------------------------------------------------

    def test_search_takes_like_metacharacters_and_the_escape_character_literally(
        self, provider: DatabaseLockProvider
    ) -> None:
        suffixes = [
            "a!b", "a!!b", "a!%b", "a%b", "a_b", "a\\b", "a\\%b", "axb", "a'b", 'a"b',
            "A_B", "\u00e9t\u00e9", "\u00c9T\u00c9", "\u212a", "k", "K", "\u0130", "i", "I", "\u00df",
        ]  # fmt: skip
        for suffix in suffixes:
            self.lock(provider, "s/" + suffix)
        for search in (
            "!", "!!", "!%", "%", "_", "\\", "\\%", "'", '"', "a_b", "A_b", "a!b", "x", "!b",
            "\u00e9", "\u00c9", "T", "k", "K", "\u212a", "i", "I", "\u0130", "ss", "\u00df", "S/A",
        ):  # fmt: skip
            query = LockQuery(prefix="s/", search=search, limit=100)
            found = sorted(r.name for r in provider.query(query).records)
            # The reference semantics: ASCII letters either case, the rest exactly.
            expected = sorted(
                "s/" + s
                for s in suffixes
                if query.matches(Expected("s/" + s, T0 + timedelta(hours=1), T0, False).record(), T0)
            )
            assert found == expected, f"search {search!r}"

    # -- ties in the time orders -------------------------------------------------------

    def test_time_orders_page_through_ties_by_name(self, provider: DatabaseLockProvider) -> None:
        # Eleven locks taken at one instant for one duration share lock_until and
        # locked_at; the cursor must continue inside the tie by name.
        names = [f"t/{c}" for c in "kcjadbighfe"]
        for name in names:
            self.lock(provider, name, "10m")
        provider.clock.advance("1ms")  # type: ignore[attr-defined]
        self.lock(provider, "t/0-later", "10m")
        for order in ("lock_until", "locked_at"):
            for descending in (False, True):
                for limit in (1, 2, 3, 5):
                    query = LockQuery(prefix="t/", order=order, descending=descending, limit=limit)
                    listed = [r.name for r in self.walk(provider, query)]
                    expected = [*sorted(names), "t/0-later"]
                    if descending:
                        expected.reverse()
                    assert listed == expected, (order, descending, limit)

    def test_instants_round_trip_exactly(self, provider: DatabaseLockProvider) -> None:
        """A time order's cursor holds epoch microseconds read back from a row; turned
        into the database's own type again it must equal the row's value, or a page
        would skip or repeat the rows of a tie."""
        dialect, step = provider._dialect, (1000 if self.using == "default" else 1)
        rng = random.Random(7)
        samples = [0, step, to_epoch_us(T0), to_epoch_us(datetime(2126, 1, 1, tzinfo=timezone.utc)) - step]
        samples += [rng.randrange(0, 5_000_000_000_000_000 // step) * step for _ in range(300)]
        select = ", ".join(f"{dialect.epoch_us(dialect.instant())}" for _ in samples)
        with connections[self.using].cursor() as cursor:
            cursor.execute(f"SELECT {select}", samples)
            back = [int(v) for v in cursor.fetchone()]
        assert back == samples

    # -- a thousand rows, every order both ways ------------------------------------------

    def fill(self, provider: DatabaseLockProvider, clock: MutableClock) -> list[Expected]:
        """1,000 rows: groups of ten taken at one instant (ties), four durations, a
        third released with lock_at_least_for; then time moves so that some expire."""
        rng = random.Random(1000)
        alphabet = "aAbB_-.%!\\ z\u00e9\u00c9\u03a9\U0001f512"
        names: set[str] = set()
        while len(names) < 1000:
            names.add("k/" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))))
        rows = []
        for i, name in enumerate(sorted(names, key=lambda _: rng.random())):
            if i % 10 == 0:
                clock.advance("1ms")
            at_most = [timedelta(seconds=1), timedelta(seconds=5), timedelta(minutes=1), timedelta(hours=1)][
                i // 10 % 4
            ]
            now = clock.now()
            if i % 3 == 0:
                held = self.lock(provider, name, at_most, at_most / 2)
                assert held.unlock() is True
                rows.append(Expected(name, now + at_most / 2, now, True))
            else:
                self.lock(provider, name, at_most)
                rows.append(Expected(name, now + at_most, now, False))
        clock.set(T0 + timedelta(seconds=3))
        return rows

    def test_cursors_walk_a_thousand_rows_in_every_order(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        rows = self.fill(provider, clock)
        now = clock.now()
        counts = {s: sum(record_state(r.record(), now) == s for r in rows) for s in ALL_STATES}
        assert all(count > 100 for count in counts.values()), counts
        for order in ORDERS:
            for descending in (False, True):
                for states in (CURRENT_STATES, ALL_STATES, frozenset({"expired"}), frozenset({"held"})):
                    query = LockQuery(prefix="k/", states=states, order=order, descending=descending, limit=7)
                    wanted = [r.record() for r in rows if query.matches(r.record(), now)]
                    wanted.sort(key=query.sort_key, reverse=descending)
                    pages = list(provider.pages(query))
                    walked = [(r.name, r.lock_until, r.locked_at) for p in pages for r in p.records]
                    assert walked == [(r.name, r.lock_until, r.locked_at) for r in wanted], (
                        order,
                        descending,
                        sorted(states),
                    )
                    # And back again from the last page with the previous cursors.
                    back, cursor = [], pages[-1].previous_cursor
                    while cursor is not None:
                        page = provider.query(replace(query, cursor=cursor))
                        back[:0] = page.records
                        cursor = page.previous_cursor
                    assert [r.name for r in back] == [r.name for p in pages[:-1] for r in p.records]

    # -- totals ----------------------------------------------------------------------------

    def test_totals_are_exact_up_to_the_cap(
        self, provider: DatabaseLockProvider, clock: MutableClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(database, "COUNT_CAP", 5)
        for i in range(7):
            self.lock(provider, f"n/{i}", "1s" if i < 2 else "1h")
        clock.advance("10s")  # n/0 and n/1 expire

        def total(**asked: Any) -> int | None:
            first = provider.query(LockQuery(limit=2, **asked))
            later = provider.query(LockQuery(limit=2, cursor=first.next_cursor, **asked))
            assert later.total == first.total, "every page of a query gives the same total"
            return first.total

        assert total(prefix="n/") == 5, "the current locks"
        assert total(prefix="n/", states=ALL_STATES) is None, "7 records: over the cap of 5"
        assert total(prefix="n/", states=frozenset({"expired"})) == 2
        assert total(prefix="n/", search="N/") == 5, "a search among current locks is counted"
        assert total(prefix="n/", search="/", states=ALL_STATES) is None, "a search over expired ones is not"
        whole = provider.query(LockQuery(prefix="n/1", search="1", states=ALL_STATES))
        assert whole.total == 1, "a first page that holds the whole answer counts it anyway"

    # -- inside the caller's transaction ----------------------------------------------------

    def test_queries_read_inside_the_callers_transaction(self, provider: DatabaseLockProvider) -> None:
        for name in ("r/a", "r/b", "r/c"):
            self.lock(provider, name)
        with transaction.atomic(using=self.using):
            first = provider.query(LockQuery(prefix="r/", limit=2))
            rest = provider.query(LockQuery(prefix="r/", limit=2, cursor=first.next_cursor))
            with connections[self.using].cursor() as cursor:
                cursor.execute("SELECT 1")  # the transaction is still usable
        assert [r.name for r in first.records + rest.records] == ["r/a", "r/b", "r/c"]

    def test_queries_read_with_autocommit_off(self, provider: DatabaseLockProvider) -> None:
        self.lock(provider, "off/a")
        transaction.set_autocommit(False, using=self.using)
        try:
            records = provider.query(LockQuery(prefix="off/")).records
            transaction.rollback(using=self.using)
        finally:
            transaction.set_autocommit(True, using=self.using)
        assert [r.name for r in records] == ["off/a"]

    def test_a_failed_query_with_autocommit_off_keeps_the_callers_work(
        self, provider: DatabaseLockProvider, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(
            provider._pages, "page", lambda query, after, now: ("SELECT nothing FROM nowhere", [])
        )
        connection = connections[self.using]
        transaction.set_autocommit(False, using=self.using)
        try:
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO tslock_fence (id, mark) VALUES (7, 7)")
            with pytest.raises(LockProviderError, match="list locks"):
                provider.query(LockQuery())
            transaction.commit(using=self.using)
        finally:
            transaction.set_autocommit(True, using=self.using)
        assert FencingMark.objects.using(self.using).filter(id=7, mark=7).exists()

    def test_a_failed_query_leaves_the_callers_transaction_usable(
        self, provider: DatabaseLockProvider
    ) -> None:
        connection = connections[self.using]

        class Rollback(Exception):
            pass

        with pytest.raises(Rollback), transaction.atomic(using=self.using):
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE tslock_lock RENAME TO tslock_lock_gone")
            with pytest.raises(LockProviderError, match="list locks"):
                provider.query(LockQuery(order="lock_until", search="x"))
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                assert cursor.fetchone()[0] == 1
            raise Rollback
        if "tslock_lock_gone" in connection.introspection.table_names():
            with connection.cursor() as cursor:  # MySQL/MariaDB: DDL commits at once
                cursor.execute("ALTER TABLE tslock_lock_gone RENAME TO tslock_lock")

    # -- purge ------------------------------------------------------------------------------

    def names(self, provider: DatabaseLockProvider, prefix: str = "") -> list[str]:
        return [r.name for r in provider.list_locks(prefix)]

    def test_a_purged_name_locked_again_gets_a_higher_fencing_token(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        tokens = []
        for _ in range(3):
            held = self.lock(provider, "p/job", "1s")
            tokens.append(held.fencing_token)
            assert held.unlock() is True
        other = self.lock(provider, "p/other", "1s")
        clock.advance("2s")
        assert provider.purge(timedelta(0)) == 2
        assert self.names(provider, "p/") == []
        again = self.lock(provider, "p/job", "1s")
        assert again.fencing_token > max(tokens), (tokens, again.fencing_token)
        assert self.lock(provider, "p/other", "1s").fencing_token > other.fencing_token
        # A name never seen before starts above every purged token too (the mark is shared).
        assert self.lock(provider, "p/new", "1s").fencing_token > max(tokens)

    def test_held_and_at_least_rows_survive_every_purge(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        held = self.lock(provider, "p/held", "1h")
        at_least = self.lock(provider, "p/at-least", "1h", "30m")
        assert at_least.unlock() is True
        self.lock(provider, "p/expired", "1s")
        clock.advance("10s")
        assert provider.purge(timedelta(days=1)) == 0, "nothing expired a day ago"
        assert provider.purge(timedelta(seconds=5)) == 1
        assert provider.purge(timedelta(0), batch_size=1) == 0
        assert self.names(provider, "p/") == ["p/at-least", "p/held"]
        assert held.unlock() is True, "the held lock is still its holder's"

    def test_dry_run_counts_and_deletes_nothing(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        for name in ("p/a", "p/b", "p/c"):
            self.lock(provider, name, "1s")
        self.lock(provider, "p/held", "1h")
        clock.advance("1m")
        assert provider.purge(timedelta(seconds=30), dry_run=True) == 3
        assert provider.purge(timedelta(minutes=5), dry_run=True) == 0
        assert self.names(provider, "p/") == ["p/a", "p/b", "p/c", "p/held"]
        assert not FencingMark.objects.using(self.using).filter(mark__gt=0).exists()

    def test_batches_of_two_delete_all_five(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        for i in range(5):
            self.lock(provider, f"p/{i}", "1s")
            clock.advance("1ms")
        clock.advance("1m")
        assert provider.purge(timedelta(0), batch_size=2) == 5
        assert self.names(provider, "p/") == []

    def test_a_batch_with_more_names_than_one_statement_takes(
        self, provider: DatabaseLockProvider, clock: MutableClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(database, "NAMES_PER_STATEMENT", 2)
        tokens = {}
        for i in range(5):
            tokens[f"p/{i}"] = self.lock(provider, f"p/{i}", "1s").fencing_token
        self.lock(provider, "p/z-held", "1h")
        clock.advance("1m")
        assert provider.purge(timedelta(0), batch_size=5) == 5
        assert self.names(provider, "p/") == ["p/z-held"]
        assert self.lock(provider, "p/0", "1s").fencing_token > max(tokens.values())

    def test_a_row_taken_between_select_and_delete_survives(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        for name in ("p/a", "p/b", "p/c"):
            for _ in range(2):
                held = self.lock(provider, name, "1s")
                held.unlock()
        clock.advance("1m")
        connection = connections[self.using]
        cutoff = to_epoch_us(clock.now())
        chosen = provider._retention._purge_candidates(connection, "purge", cutoff, 10)
        assert chosen == ["p/a", "p/b", "p/c"]
        retaken = self.lock(provider, "p/b", "1h")  # between the two steps
        assert provider._retention._purge_batch(connection, "purge", chosen, cutoff) == 2
        assert self.names(provider, "p/") == ["p/b"]
        assert retaken.unlock() is True
        assert FencingMark.objects.using(self.using).get(id=1).mark == 2, "only deleted rows raise the mark"
        assert self.lock(provider, "p/a", "1s").fencing_token == 3

    def test_purge_puts_back_a_flushed_mark(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        FencingMark.objects.using(self.using).all().delete()  # what `manage.py flush` does
        assert self.lock(provider, "p/fresh", "1s").fencing_token == 1, "no mark: nothing was purged"
        clock.advance("1m")
        assert provider.purge(timedelta(0)) == 1
        assert FencingMark.objects.using(self.using).get(id=1).mark == 1
        assert self.lock(provider, "p/fresh", "1s").fencing_token == 2

    def test_purge_validates_its_arguments(self, provider: DatabaseLockProvider) -> None:
        for bad in (timedelta(seconds=-1), 30, "30d", None):
            with pytest.raises(ValueError, match="expired_for must be a timedelta of zero or more"):
                provider.purge(bad)  # type: ignore[arg-type]
        for size in (0, MAX_PURGE_BATCH + 1, True, 2.0):
            with pytest.raises(
                ValueError, match=f"batch_size must be a whole number from 1 to {MAX_PURGE_BATCH}"
            ):
                provider.purge(timedelta(0), batch_size=size)  # type: ignore[arg-type]

    def test_purging_further_back_than_1970_deletes_nothing(
        self, provider: DatabaseLockProvider, clock: MutableClock
    ) -> None:
        self.lock(provider, "p/old", "1s")
        clock.advance("1m")
        assert provider.purge(timedelta(days=365 * 200)) == 0
        assert provider.purge(timedelta(days=365 * 200), dry_run=True) == 0
        assert self.names(provider, "p/") == ["p/old"]

    def test_purge_on_the_database_clock(self) -> None:
        provider = DatabaseLockProvider("dbq", using=self.using)
        expired = provider.lock(LockConfiguration("p/short", "200ms"))
        held = provider.lock(LockConfiguration("p/long", "1h"))
        assert expired is not None and held is not None
        threading.Event().wait(0.4)
        assert provider.purge(timedelta(hours=1), dry_run=True) == 0
        assert provider.purge(timedelta(0), dry_run=True) == 1
        assert provider.purge(timedelta(0)) == 1
        assert self.names(provider, "p/") == ["p/long"]
        again = provider.lock(LockConfiguration("p/short", "1s"))
        assert again is not None and again.fencing_token > (expired.fencing_token or 0)

    def test_purge_inside_a_transaction(self, provider: DatabaseLockProvider, clock: MutableClock) -> None:
        self.lock(provider, "p/gone", "1s")
        clock.advance("1m")
        if self.one_writer:
            with transaction.atomic(using=self.using), pytest.raises(LockProviderError, match="one writer"):
                provider.purge(timedelta(0))
            return

        class Rollback(Exception):
            pass

        with pytest.raises(Rollback), transaction.atomic(using=self.using):
            assert provider.purge(timedelta(0)) == 1
            raise Rollback
        assert self.names(provider, "p/") == [], "the purge committed on its own connection"


@pytest.mark.django_db(transaction=True)
class TestSQLite(QueryBehaviour):
    using = "default"
    one_writer = True


class WaitsForThePurge:
    """A fresh name's INSERT waits for a purge batch in progress and starts above the
    mark that batch commits (a snapshot read that did not wait would see the old mark,
    so the token would be 1): on MariaDB it reads the mark with a shared lock; on
    PostgreSQL it waits for the batch's table lock before taking its snapshot. SQLite
    has one writer: the INSERT cannot run during a purge transaction at all."""

    using: str
    blocked_sql: str

    def test_a_fresh_name_waits_for_a_purge_batch_and_starts_above_its_mark(self) -> None:
        provider = DatabaseLockProvider("dbq", using=self.using)
        FencingMark.objects.using(self.using).get_or_create(id=1, defaults={"mark": 0})
        outcome: dict[str, Any] = {}

        def acquire() -> None:
            try:
                outcome["held"] = provider.lock(LockConfiguration("w/fresh", "1m"))
            finally:
                connections.close_all()

        observer = connections.create_connection(self.using)
        thread = threading.Thread(target=acquire)
        try:
            with transaction.atomic(using=self.using):
                with connections[self.using].cursor() as cursor:
                    # What a purge batch does first: lock the table (PostgreSQL), then
                    # take the mark's row.
                    if provider._dialect.purge_lock:
                        cursor.execute(provider._dialect.purge_lock)
                    cursor.execute("UPDATE tslock_fence SET mark = mark WHERE id = 1")
                thread.start()
                deadline = threading.Event()
                for _ in range(1000):
                    with observer.cursor() as watch:
                        watch.execute(self.blocked_sql)
                        if watch.fetchone()[0]:
                            break
                    deadline.wait(0.01)
                else:
                    pytest.fail(
                        f"the fresh name's INSERT never waited for the purge's transaction: {outcome}"
                    )
                with connections[self.using].cursor() as cursor:
                    cursor.execute("UPDATE tslock_fence SET mark = 41 WHERE id = 1")
            thread.join(30)
        finally:
            observer.close()
        assert not thread.is_alive()
        assert outcome["held"] is not None and outcome["held"].fencing_token == 42


class TestPostgreSQL(WaitsForThePurge, QueryBehaviour):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")
    blocked_sql = (
        "SELECT COUNT(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )

    def test_names_have_the_c_collation(self) -> None:
        with connections[self.using].cursor() as cursor:
            cursor.execute(
                "SELECT collation_name FROM information_schema.columns "
                "WHERE table_name = 'tslock_lock' AND column_name = 'name'"
            )
            assert cursor.fetchone()[0] == "C"

    def test_a_locale_collation_would_order_these_names_otherwise(
        self, provider: DatabaseLockProvider
    ) -> None:
        """Shows that COLLATION_NAMES tell the orders apart: an English collation (ICU,
        as a database created with en_US.UTF-8 would sort) puts them in another order
        than code point order, which the listing follows."""
        for name in COLLATION_NAMES:
            self.lock(provider, "c/" + name)
        with connections[self.using].cursor() as cursor:
            cursor.execute(
                "SELECT collname FROM pg_collation WHERE collname IN ('en-x-icu', 'en_US.utf8', 'en_US')"
            )
            english = [row[0] for row in cursor.fetchall()]
            assert english, "this PostgreSQL has no English collation to compare with"
            cursor.execute(
                f'SELECT name FROM tslock_lock WHERE name LIKE %s ORDER BY name COLLATE "{english[0]}"',
                ["c/%"],
            )
            in_english = [row[0] for row in cursor.fetchall()]
        listed = [r.name for r in provider.query(LockQuery(prefix="c/", limit=100)).records]
        assert sorted(in_english) == listed
        assert in_english != listed


class TestMariaDB(WaitsForThePurge, QueryBehaviour):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")
    # The wait happens while the optimizer reads the mark's row (a constant), before
    # InnoDB lists the INSERT's transaction; a running INSERT is what can be seen.
    blocked_sql = (
        "SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE 'INSERT INTO tslock_lock%%'"
    )
