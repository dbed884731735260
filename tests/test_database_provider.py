"""Database provider specifics: callers' transactions, store failures, the clock option."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connections, transaction

from tests.conftest import database_marks
from tslock_django import LockConfiguration, LockProviderError, MutableClock
from tslock_django.models import Lock
from tslock_django.providers.database import DatabaseLockProvider


class Rollback(Exception):
    pass


class DatabaseBehaviour:
    using = "default"
    one_writer = False  # SQLite: a lock inside the caller's transaction is refused

    @pytest.fixture
    def provider(self) -> Iterator[DatabaseLockProvider]:
        provider = DatabaseLockProvider("db", using=self.using)
        yield provider
        provider.close()

    def other_process_gets(self, config: LockConfiguration) -> bool:
        """Whether a separate connection (another thread) can acquire right now."""
        outcome = []

        def attempt() -> None:
            try:
                outcome.append(DatabaseLockProvider("other", using=self.using).lock(config) is not None)
            finally:
                connections.close_all()

        thread = threading.Thread(target=attempt)
        thread.start()
        thread.join(30)
        return outcome[0]

    def test_lock_inside_a_transaction_is_visible_at_once_and_survives_rollback(
        self, provider: DatabaseLockProvider
    ) -> None:
        config = LockConfiguration("in-atomic", "1m")
        if self.one_writer:
            with transaction.atomic(using=self.using), pytest.raises(LockProviderError, match="one writer"):
                provider.lock(config)
            return
        with pytest.raises(Rollback), transaction.atomic(using=self.using):
            held = provider.lock(config)
            assert held is not None
            assert self.other_process_gets(config) is False, "the lock must be visible before the commit"
            raise Rollback
        assert self.other_process_gets(config) is False, "the caller's rollback must not undo the lock"
        assert held.unlock() is True
        assert self.other_process_gets(config) is True

    def test_unlock_inside_a_transaction_is_visible_at_once(self, provider: DatabaseLockProvider) -> None:
        config = LockConfiguration("unlock-in-atomic", "1m")
        held = provider.lock(config)
        assert held is not None
        if self.one_writer:
            return
        with transaction.atomic(using=self.using):
            assert held.unlock() is True
            assert self.other_process_gets(config) is True

    def test_listing_works_inside_a_transaction(self, provider: DatabaseLockProvider) -> None:
        """The admin page may run under ATOMIC_REQUESTS: reading needs no connection of its own."""
        held = provider.lock(LockConfiguration("listed", "1m"))
        assert held is not None
        with transaction.atomic(using=self.using):
            (record,) = provider.list_locks("listed")
        assert record.fencing_token == held.fencing_token and record.state(record.locked_at) == "held"

    def test_a_failed_listing_leaves_the_callers_transaction_usable(
        self, provider: DatabaseLockProvider
    ) -> None:
        connection = connections[self.using]
        with pytest.raises(Rollback), transaction.atomic(using=self.using):
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE tslock_lock RENAME TO tslock_lock_moved")
            with pytest.raises(LockProviderError, match="list locks"):
                provider.list_locks()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                assert cursor.fetchone()[0] == 1, "the caller's transaction must survive the failure"
            raise Rollback  # puts the table back where DDL is transactional
        if "tslock_lock_moved" in connection.introspection.table_names():
            with connection.cursor() as cursor:  # MySQL/MariaDB: DDL commits at once
                cursor.execute("ALTER TABLE tslock_lock_moved RENAME TO tslock_lock")
        assert provider.list_locks() == []

    def test_with_autocommit_off_the_lock_is_still_its_own_transaction(
        self, provider: DatabaseLockProvider
    ) -> None:
        config = LockConfiguration("no-autocommit", "1m")
        transaction.set_autocommit(False, using=self.using)
        try:
            if self.one_writer:
                with pytest.raises(LockProviderError, match="autocommit off"):
                    provider.lock(config)
                return
            held = provider.lock(config)
            assert held is not None
            assert self.other_process_gets(config) is False, "visible before the caller commits"
            transaction.rollback(using=self.using)
        finally:
            transaction.set_autocommit(True, using=self.using)
        assert self.other_process_gets(config) is False, "the caller's rollback must not undo the lock"
        assert held.unlock() is True
        second = provider.lock(config)
        assert second is not None and second.fencing_token == 2

    @pytest.mark.parametrize(("use_tz", "zone"), [(False, "Asia/Tokyo"), (True, "America/New_York")])
    def test_times_mean_the_same_instant_whatever_the_time_zone_settings(
        self, settings: Any, provider: DatabaseLockProvider, use_tz: bool, zone: str
    ) -> None:
        settings.USE_TZ = use_tz
        settings.TIME_ZONE = zone
        connections[self.using].close()  # reconnect with the new session time zone
        try:
            before = datetime.now(timezone.utc)
            held = provider.lock(LockConfiguration("zoned", "1m", "1s"))
            assert held is not None
            after = datetime.now(timezone.utc)
            # The database's clock is this machine's; a skew of a second covers rounding.
            slack = timedelta(seconds=1)
            assert before - slack <= held.record.locked_at <= after + slack
            assert held.record.lock_until - held.record.locked_at == timedelta(minutes=1)
            assert held.unlock() is True
            (record,) = provider.list_locks("zoned")
            assert record.lock_until - record.locked_at == timedelta(seconds=1)
            assert record.lock_until <= after + timedelta(seconds=2), (
                "the at-least hold was shifted by an offset"
            )
        finally:
            connections[self.using].close()

    def test_a_duration_the_database_cannot_store_is_a_store_failure_not_held(
        self, provider: DatabaseLockProvider
    ) -> None:
        # 90 years is inside LockConfiguration's range; adding it to "now" still fits
        # every database, so the lock is granted rather than misreported.
        held = provider.lock(LockConfiguration("long-haul", "32850d"))
        assert held is not None
        assert held.record.lock_until.year >= 2100

    def test_records_keep_history_and_states(self, provider: DatabaseLockProvider) -> None:
        held = provider.lock(LockConfiguration("hist", "1m", "30s"))
        assert held is not None
        assert held.unlock() is True
        (record,) = provider.list_locks("hist")
        assert record.released and record.token == "" and record.token_fingerprint == ""
        assert record.state(record.locked_at) == "held_for_at_least"
        assert record.state(record.lock_until) == "expired"
        assert record.lock_until - record.locked_at == timedelta(seconds=30)
        assert Lock.objects.using(self.using).get(name="hist").fencing_token == 1

    def test_caller_clock_when_asked(self) -> None:
        clock = MutableClock()
        provider = DatabaseLockProvider("db", using=self.using, use_db_time=False, clock=clock)
        held = provider.lock(LockConfiguration("clocked", "10s"))
        assert held is not None
        # SQLite keeps milliseconds; the others keep microseconds.
        assert abs(held.record.locked_at - clock.now()) <= timedelta(milliseconds=1)
        assert provider.lock(LockConfiguration("clocked", "10s")) is None
        clock.advance("11s")
        assert provider.lock(LockConfiguration("clocked", "10s")) is not None


@pytest.mark.django_db(transaction=True)
class TestSQLite(DatabaseBehaviour):
    using = "default"
    one_writer = True


class TestPostgreSQL(DatabaseBehaviour):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")


class TestMariaDB(DatabaseBehaviour):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")


def test_unsupported_vendors_are_refused_by_name() -> None:
    from unittest import mock

    from tslock_django import InvalidLockProvider

    with (
        mock.patch.object(connections["default"], "vendor", "oracle"),
        pytest.raises(
            InvalidLockProvider, match="is a oracle database; the database provider supports mysql"
        ),
    ):
        DatabaseLockProvider("db")


def test_an_unreachable_database_is_a_store_failure_for_every_operation(django_db_blocker: Any) -> None:
    provider = DatabaseLockProvider("down", using="unreachable")
    config = LockConfiguration("job", "1m")
    with django_db_blocker.unblock():
        try:
            for call in (
                lambda: provider.lock(config),
                lambda: provider.force_unlock("job", expected=None),
                provider.list_locks,
            ):
                with pytest.raises(LockProviderError) as caught:
                    call()
                assert str(caught.value).startswith("lock provider 'down': ")
                assert "database 'unreachable' failed" in str(caught.value)
        finally:
            connections["unreachable"].close()
