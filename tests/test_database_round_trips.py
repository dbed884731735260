"""How many statements each outcome of the database provider costs, counted on the
connection as the server receives them: acquire is one statement whether it is granted
(a new name, an expired row, a released one) or refused (and the refusal still names the
holder, which SQLite reads with a second statement in the process); unlock and extend are
one each. On SQLite, PostgreSQL and MariaDB, with the
database's clock and with the caller's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections

from tests.conftest import database_marks
from tslock_django import LockConfiguration, MutableClock
from tslock_django.core.provider import SimpleLock
from tslock_django.core.records import fingerprint
from tslock_django.providers.database import DatabaseLockProvider


class RoundTrips:
    using = "default"

    @pytest.fixture(params=[True, False], ids=["db-clock", "caller-clock"])
    def provider(self, request: pytest.FixtureRequest) -> Iterator[DatabaseLockProvider]:
        use_db_time = request.param
        clock = None if use_db_time else MutableClock()
        provider = DatabaseLockProvider("db", using=self.using, use_db_time=use_db_time, clock=clock)
        # The first write learns the server's version (MariaDB's RETURNING); a connection
        # is made then too. Neither belongs to the outcomes counted below.
        warm = provider.lock(LockConfiguration("warm-up", "1m"))
        assert warm is not None and warm.unlock() is True
        yield provider
        provider.close()

    @contextmanager
    def counting(self) -> Iterator[list[str]]:
        """The statements sent on the provider's connection inside the block."""
        sent: list[str] = []

        def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            sent.append(sql)
            return execute(sql, params, many, context)

        with connections[self.using].execute_wrapper(count):
            yield sent

    def expire(self, provider: DatabaseLockProvider, config: LockConfiguration) -> None:
        """Wait out ``config.lock_at_most_for`` on whichever clock decides."""
        if provider.use_db_time:
            time.sleep(config.lock_at_most_for.total_seconds() + 0.05)
        else:
            assert isinstance(provider.clock, MutableClock)
            provider.clock.advance(config.lock_at_most_for)

    def test_a_new_name_is_granted_in_one_statement(self, provider: DatabaseLockProvider) -> None:
        with self.counting() as sent:
            held = provider.lock(LockConfiguration("count/new", "1m"))
        assert held is not None and held.fencing_token == 1
        assert len(sent) == 1, sent

    #: Statements of a refusal: one; SQLite's upsert cannot return the holder's row,
    #: which it then reads (in the process: SQLite has no round trips).
    refusal_statements = 1

    def test_a_refusal_is_one_statement_and_names_the_holder(self, provider: DatabaseLockProvider) -> None:
        held = provider.lock(LockConfiguration("count/held", "1m", "10s"))
        assert held is not None
        other = DatabaseLockProvider("other", using=self.using, use_db_time=provider.use_db_time)
        other.clock, other.locked_by = provider.clock, "elsewhere:1"
        with self.counting() as sent:
            attempt = other.attempt(LockConfiguration("count/held", "1m"))
        assert attempt.held is None
        assert len(sent) == self.refusal_statements, sent
        holder = attempt.holder
        assert holder is not None, "the refusal names the holder"
        assert holder.locked_by == held.record.locked_by != "elsewhere:1"
        assert holder.fencing_token == held.fencing_token
        assert holder.lock_until == held.record.lock_until
        assert holder.locked_at == held.record.locked_at
        assert holder.token == "" and not holder.released, "a holder's record never carries its token"
        assert holder.token_fingerprint == fingerprint(held.token)

    def test_a_refusal_leaves_the_holders_row_as_it_was(self, provider: DatabaseLockProvider) -> None:
        held = provider.lock(LockConfiguration("count/untouched", "1m"))
        assert held is not None
        (before,) = provider.list_locks("count/untouched")
        assert provider.lock(LockConfiguration("count/untouched", "1h")) is None
        (after,) = provider.list_locks("count/untouched")
        assert after == before
        assert held.unlock() is True, "the holder still owns its lock"

    def test_an_expired_row_is_taken_over_in_one_statement(self, provider: DatabaseLockProvider) -> None:
        config = LockConfiguration("count/expired", "200ms")
        first = provider.lock(config)
        assert first is not None
        self.expire(provider, config)
        with self.counting() as sent:
            second = provider.lock(LockConfiguration("count/expired", "1m"))
        assert second is not None
        assert len(sent) == 1, sent
        assert second.fencing_token == (first.fencing_token or 0) + 1
        assert second.record.locked_at >= first.record.lock_until
        assert first.unlock() is False, "the expired holder no longer owns the lock"

    def test_a_released_row_is_taken_again_in_one_statement(self, provider: DatabaseLockProvider) -> None:
        first = provider.lock(LockConfiguration("count/released", "1m"))
        assert first is not None and first.unlock() is True
        with self.counting() as sent:
            second = provider.lock(LockConfiguration("count/released", "1m"))
        assert second is not None and second.fencing_token == (first.fencing_token or 0) + 1
        assert len(sent) == 1, sent

    def test_unlock_and_extend_are_one_statement_each(self, provider: DatabaseLockProvider) -> None:
        held = provider.lock(LockConfiguration("count/extend", "1m"))
        assert held is not None
        with self.counting() as sent:
            extended = held.extend("2m")
        assert isinstance(extended, SimpleLock)
        assert len(sent) == 1, sent
        (row,) = provider.list_locks("count/extend")
        assert extended.record.lock_until == row.lock_until, "the deadline returned is the one stored"
        assert extended.record.lock_until > held.record.lock_until
        with self.counting() as sent:
            assert extended.unlock() is True
        assert len(sent) == 1, sent

    def test_a_failed_extend_is_one_statement(self, provider: DatabaseLockProvider) -> None:
        held = provider.lock(LockConfiguration("count/lost", "1m"))
        assert held is not None
        assert provider.force_unlock("count/lost", expected=None) is True
        with self.counting() as sent:
            assert held.extend("1m") is None
        assert len(sent) == 1, sent


@pytest.mark.django_db(transaction=True)
class TestSQLite(RoundTrips):
    using = "default"
    refusal_statements = 2


class TestPostgreSQL(RoundTrips):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")

    def test_a_refusal_writes_nothing(self, provider: DatabaseLockProvider) -> None:
        """Many processes on one name are mostly refused: a refusal must not write the
        holder's row (a new row version, a flushed commit) nor lock it."""
        held = provider.lock(LockConfiguration("count/read-only", "1m"))
        assert held is not None

        def version() -> Any:
            with connections[self.using].cursor() as cursor:
                cursor.execute("SELECT xmin, xmax FROM tslock_lock WHERE name = %s", ["count/read-only"])
                return cursor.fetchone()

        before = version()
        assert provider.lock(LockConfiguration("count/read-only", "1m")) is None
        assert version() == before, "the refusal wrote or locked the holder's row"


class TestMariaDB(RoundTrips):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")
