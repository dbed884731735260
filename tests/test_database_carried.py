"""Take first: a name this process last won is taken by a plain ``UPDATE`` (on MariaDB,
one whose reply carries the grant in ``LAST_INSERT_ID``), and what the handle says
must be exactly what the row holds; every other attempt is the one-statement upsert.
On SQLite and MariaDB.

The decoding is tested alone first (no server): the low 32 bits of the database's
"now" name one instant within 35 minutes either side of the estimate, whatever the
offset between the two clocks, and an offset that can no longer be trusted is not used.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from tests.conftest import database_marks
from tests.test_database_routines import statements
from tslock_django import LockConfiguration, MutableClock
from tslock_django.providers.database import DatabaseLockProvider, carried, take_first
from tslock_django.providers.database.carried import MAX_CARRIED_FENCING, ClockOffset
from tslock_django.providers.database.take_first import TakeFirst
from tslock_django.providers.epoch import to_epoch_us

MINUTE_US = 60_000_000


def pack(fencing: int, now_us: int) -> int:
    """What the server's expression carries (written here from its definition)."""
    return (fencing << 32) | (now_us & 0xFFFFFFFF)


class TestDecoding:
    def learned(self, offset_us: int) -> ClockOffset:
        takes = ClockOffset()
        local = carried.wall_clock_us()
        takes.learn(local + offset_us, local, local)
        return takes

    @pytest.mark.parametrize("offset_min", [0, 1, -1, 34, -34, 24 * 60, -9 * 60])
    @pytest.mark.parametrize("error_us", [0, 2_000_000, -2_000_000, 30 * MINUTE_US, -30 * MINUTE_US])
    def test_the_low_bits_name_the_one_instant_near_the_estimate(
        self, offset_min: int, error_us: int
    ) -> None:
        """Whatever the offset between the clocks (learned), and within 35 minutes of
        error in the estimate, the instant decoded is the database's to the µs."""
        offset = offset_min * MINUTE_US
        takes = self.learned(offset)
        sent = carried.wall_clock_us()
        db_now = sent + offset + error_us + 123
        taken = takes.decode(pack(77, db_now), sent, 5 * MINUTE_US)
        assert taken == (db_now, db_now + 5 * MINUTE_US, 77)

    @pytest.mark.parametrize("low", [0, 1, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF])
    def test_instants_on_the_edges_of_the_low_bits_decode(self, low: int) -> None:
        """The low bits wrap every 71.6 minutes: an instant just past a wrap, with an
        estimate just before it (and the reverse), still decodes exactly."""
        takes = self.learned(0)
        sent = carried.wall_clock_us()
        base = sent & ~0xFFFFFFFF
        for db_now in (base + low, base + low + (1 << 32), base + low - (1 << 32)):
            if abs(db_now - sent) < (1 << 31) - 1_000_000:
                assert takes.decode(pack(3, db_now), sent, 0) == (db_now, db_now, 3)

    def test_nothing_carried_or_nothing_learned_means_read_it(self) -> None:
        takes = ClockOffset()
        sent = carried.wall_clock_us()
        assert takes.decode(pack(5, sent), sent, 0) is None, "no offset learned yet"
        takes = self.learned(0)
        assert takes.decode(0, sent, 0) is None, "a fencing token too large carries 0"

    def test_a_stale_offset_or_a_stepped_clock_is_not_trusted(self, monkeypatch: pytest.MonkeyPatch) -> None:
        takes = self.learned(0)
        assert takes.trusted
        wall = carried.wall_clock_us()
        takes._offset = (0, wall - 3_601_000_000, time.monotonic() - 3601)
        assert not takes.trusted, "an hour-old offset is dropped"
        takes = self.learned(0)
        stepped = carried.wall_clock_us
        monkeypatch.setattr(carried, "wall_clock_us", lambda: stepped() + 5_000_000)
        assert not takes.trusted, "the caller's clock stepped 5 s: the offset changed"


def test_only_names_last_won_here_are_tried_first_and_the_memory_is_bounded() -> None:
    first = TakeFirst()
    assert "a" not in first
    first.granted("a")
    assert "a" in first
    first.refused("a")
    assert "a" not in first
    for i in range(take_first.REMEMBERED + 10):
        first.granted(f"n{i}")
    assert "n0" not in first, "the oldest names are forgotten first"
    assert f"n{take_first.REMEMBERED + 9}" in first


class TakeFirstCases:
    using = "default"

    @pytest.fixture(params=[True, False], ids=["db-clock", "caller-clock"])
    def provider(self, request: pytest.FixtureRequest) -> Iterator[DatabaseLockProvider]:
        use_db_time = request.param
        clock = None if use_db_time else MutableClock()
        provider = DatabaseLockProvider("db", using=self.using, use_db_time=use_db_time, clock=clock)
        yield provider
        provider.close()

    def won(self, provider: DatabaseLockProvider, name: str) -> None:
        """A first grant of ``name`` here (the upsert), released."""
        held = provider.lock(LockConfiguration(name, "1m"))
        assert held is not None and held.unlock() is True

    def row(self, provider: DatabaseLockProvider, name: str) -> Any:
        (row,) = provider.list_locks(name)
        return row

    def test_a_name_won_here_is_taken_by_the_carried_update_and_the_handle_is_the_row(
        self, provider: DatabaseLockProvider
    ) -> None:
        self.won(provider, "carried/again")
        with statements(self.using) as sent:
            held = provider.lock(LockConfiguration("carried/again", "90s", "10s"))
        assert held is not None
        assert len(sent) == 1 and sent[0].startswith("UPDATE"), sent
        row = self.row(provider, "carried/again")
        assert (held.record.locked_at, held.record.lock_until, held.fencing_token) == (
            row.locked_at,
            row.lock_until,
            row.fencing_token,
        )
        assert held.fencing_token == 2
        assert (held.record.lock_until - held.record.locked_at).total_seconds() == 90
        assert held.lock_at_least_until == held.record.locked_at + held.lock_at_least_for
        assert held.unlock() is True
        assert self.row(provider, "carried/again").lock_until == held.lock_at_least_until

    def test_a_name_won_here_and_now_held_elsewhere_is_refused_with_its_holder(
        self, provider: DatabaseLockProvider
    ) -> None:
        self.won(provider, "carried/lost")
        other = DatabaseLockProvider("other", using=self.using, use_db_time=provider.use_db_time)
        other.clock, other.locked_by = provider.clock, "elsewhere:1"
        theirs = other.lock(LockConfiguration("carried/lost", "1m"))
        assert theirs is not None
        with statements(self.using) as sent:
            attempt = provider.attempt(LockConfiguration("carried/lost", "1m"))
        assert attempt.held is None
        assert len(sent) == 2, "the carried UPDATE took nothing; the upsert then named the holder"
        assert attempt.holder is not None and attempt.holder.locked_by == "elsewhere:1"
        assert attempt.holder.fencing_token == theirs.fencing_token
        with statements(self.using) as sent:
            assert provider.lock(LockConfiguration("carried/lost", "1m")) is None
        assert len(sent) == 1 and sent[0].startswith("INSERT"), "refused here last: the upsert alone"
        assert theirs.unlock() is True


@pytest.mark.django_db(transaction=True)
class TestSQLite(TakeFirstCases):
    using = "default"


class TestMariaDB(TakeFirstCases):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")

    def test_the_taking_update_carries_its_grant_in_the_reply(self, provider: DatabaseLockProvider) -> None:
        self.won(provider, "carried/reply")
        with statements(self.using) as sent:
            held = provider.lock(LockConfiguration("carried/reply", "1m"))
        assert held is not None and len(sent) == 1 and "LAST_INSERT_ID" in sent[0], sent
        assert held.unlock() is True

    def test_a_fencing_token_too_large_to_carry_is_read_back_exactly(
        self, provider: DatabaseLockProvider
    ) -> None:
        self.won(provider, "carried/large")
        with connections[self.using].cursor() as cursor:
            cursor.execute(
                "UPDATE tslock_lock SET fencing_token = %s WHERE name = %s",
                [MAX_CARRIED_FENCING + 5, "carried/large"],
            )
        with statements(self.using) as sent:
            held = provider.lock(LockConfiguration("carried/large", "1m"))
        assert held is not None and held.fencing_token == MAX_CARRIED_FENCING + 6
        row = self.row(provider, "carried/large")
        assert (held.record.locked_at, held.record.lock_until) == (row.locked_at, row.lock_until)
        # With the caller's clock the reply carries the whole token; with the database's
        # it carries nothing and the row is read.
        assert len(sent) == (2 if provider.use_db_time else 1), sent
        assert held.unlock() is True

    def test_the_database_clock_far_from_the_callers_still_decodes_exactly(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The caller's clock 50 minutes behind the database's (more than the low
        bits' half window): the learned offset brings the estimate back."""
        provider = DatabaseLockProvider("db", using=self.using)
        real = carried.wall_clock_us
        monkeypatch.setattr(carried, "wall_clock_us", lambda: real() - 50 * MINUTE_US)
        from tslock_django.providers.database import provider as module

        monkeypatch.setattr(module, "wall_clock_us", carried.wall_clock_us)
        self.won(provider, "carried/skew")
        with statements(self.using) as sent:
            held = provider.lock(LockConfiguration("carried/skew", "1m"))
        assert held is not None and len(sent) == 1 and "LAST_INSERT_ID" in sent[0]
        row = self.row(provider, "carried/skew")
        assert (held.record.locked_at, held.record.lock_until) == (row.locked_at, row.lock_until)
        assert abs(to_epoch_us(held.record.locked_at) - real()) < MINUTE_US
        assert held.unlock() is True
        provider.close()
