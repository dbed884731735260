"""Database provider specifics: callers' transactions, store failures, the clock option."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

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
        with transaction.atomic(using=self.using):
            assert held.unlock() is True
            assert self.other_process_gets(config) is True

    def test_missing_table_is_a_store_failure_not_held(self, provider: DatabaseLockProvider) -> None:
        connection = connections[self.using]
        with connection.schema_editor() as editor:
            editor.delete_model(Lock)
        try:
            with pytest.raises(LockProviderError) as caught:
                provider.lock(LockConfiguration("job", "1m"))
            assert "lock provider 'db': acquire 'job': database" in str(caught.value)
            assert caught.value.alias == "db" and caught.value.__cause__ is not None
            with pytest.raises(LockProviderError):
                provider.list_locks()
        finally:
            with connection.schema_editor() as editor:
                editor.create_model(Lock)
        assert provider.lock(LockConfiguration("job", "1m")) is not None, "the provider recovers"

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
        assert held.record.locked_at == clock.now()
        assert provider.lock(LockConfiguration("clocked", "10s")) is None
        clock.advance("11s")
        assert provider.lock(LockConfiguration("clocked", "10s")) is not None


@pytest.mark.django_db(transaction=True)
class TestSQLite(DatabaseBehaviour):
    using = "default"


class TestPostgreSQL(DatabaseBehaviour):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")


class TestMariaDB(DatabaseBehaviour):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")


def test_unsupported_vendor_needs_the_caller_clock(settings: object) -> None:
    from unittest import mock

    with mock.patch.object(connections["default"], "vendor", "oracle"):
        with pytest.raises(
            Exception, match="cannot read; use postgresql, mysql, sqlite or set use_db_time to False"
        ):
            DatabaseLockProvider("db")
        assert DatabaseLockProvider("db", use_db_time=False).options["use_db_time"] is False
