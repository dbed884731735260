"""The server-side routines of migration 0007 (PostgreSQL's ``tslock_acquire`` and
``tslock_unlock``): acquire and unlock are one call each; the migration goes forward
and back on every database; without the routines (the migration not run yet, or
reversed) the provider warns once and locks with the plain statements; and the
functions in the database are the ones the code writes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import database_marks
from tslock_django import LockConfiguration, MutableClock
from tslock_django.providers.database import DatabaseLockProvider
from tslock_django.providers.database import provider as provider_module
from tslock_django.providers.database.routines import DIALECTS

BEFORE = ("tslock_django", "0006_journal")
WITH_ROUTINES = ("tslock_django", "0007_lock_routines")


def migrate(using: str, target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connections[using])
    executor.migrate([target])


def migrate_to_the_latest(using: str) -> None:
    executor = MigrationExecutor(connections[using])
    executor.migrate(executor.loader.graph.leaf_nodes("tslock_django"))


@contextmanager
def before_the_routines(using: str) -> Iterator[None]:
    """The database as it was before migration 0007; migrated forward again after."""
    migrate(using, BEFORE)
    try:
        yield
    finally:
        migrate_to_the_latest(using)


def routines_in(using: str) -> list[str]:
    """The names of tslock's routines in the database (functions or procedures)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'tslock\\_%%' ORDER BY 1")
        elif connection.vendor == "mysql":
            cursor.execute(
                "SELECT routine_name FROM information_schema.routines "
                "WHERE routine_schema = DATABASE() AND routine_name LIKE 'tslock\\_%%' ORDER BY 1"
            )
        else:
            return []
        return [row[0] for row in cursor.fetchall()]


@contextmanager
def statements(using: str) -> Iterator[list[str]]:
    sent: list[str] = []

    def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connections[using].execute_wrapper(count):
        yield sent


def lock_cycle(provider: DatabaseLockProvider, name: str) -> None:
    """Granted, refused (naming the holder), released, granted again with the next token."""
    held = provider.lock(LockConfiguration(name, "1m"))
    assert held is not None
    other = DatabaseLockProvider("other", using=provider.using)
    attempt = other.attempt(LockConfiguration(name, "1m"))
    assert attempt.held is None and attempt.holder is not None
    assert attempt.holder.fencing_token == held.fencing_token
    assert held.unlock() is True
    again = provider.lock(LockConfiguration(name, "1m"))
    assert again is not None and again.fencing_token == (held.fencing_token or 0) + 1
    assert again.unlock() is True


class MigrationRoundTrip:
    using = "default"
    routines: list[str] = []

    def test_the_migration_goes_back_and_forward(self, caplog: pytest.LogCaptureFixture) -> None:
        assert routines_in(self.using) == self.routines
        with before_the_routines(self.using):
            assert routines_in(self.using) == []
            # The provider still locks, on the plain statements, and says so once.
            provider = DatabaseLockProvider("db", using=self.using)
            provider_module._WARNED_NO_ROUTINES.discard(self.using)
            with caplog.at_level(logging.WARNING, logger="tslock_django"):
                lock_cycle(provider, "routines/before")
                lock_cycle(provider, "routines/before-2")
            warned = [r.getMessage() for r in caplog.records if "no tslock routines" in r.getMessage()]
            assert len(warned) == (1 if self.routines else 0), warned
        assert routines_in(self.using) == self.routines
        # A name locked without the routines goes on from its token with them.
        provider = DatabaseLockProvider("db", using=self.using)
        held = provider.lock(LockConfiguration("routines/before", "1m"))
        assert held is not None and held.fencing_token == 3
        assert held.unlock() is True

    def test_the_migration_replayed_replaces_the_routines(self) -> None:
        migrate_to_the_latest(self.using)  # 0007 already applied: nothing to do
        executor = MigrationExecutor(connections[self.using])
        migration = executor.loader.get_migration(*WITH_ROUTINES)
        state = executor.loader.project_state(WITH_ROUTINES)
        with connections[self.using].schema_editor() as editor:
            migration.apply(state, editor)  # as a replay after check tslock.E007's recovery
        assert routines_in(self.using) == self.routines
        lock_cycle(DatabaseLockProvider("db", using=self.using), "routines/replayed")


@pytest.mark.django_db(transaction=True)
class TestSQLite(MigrationRoundTrip):
    using = "default"


class TestPostgreSQL(MigrationRoundTrip):
    using = "postgres"
    routines = ["tslock_acquire", "tslock_unlock"]
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")

    def test_acquire_and_unlock_are_one_call_each(self) -> None:
        provider = DatabaseLockProvider("db", using=self.using)
        with statements(self.using) as sent:
            held = provider.lock(LockConfiguration("routines/calls", "1m"))
            assert held is not None
            assert provider.lock(LockConfiguration("routines/calls", "1m")) is None
            assert held.unlock() is True
        assert [sql.split("(")[0] for sql in sent] == [
            "SELECT * FROM tslock_acquire",
            "SELECT * FROM tslock_acquire",
            "SELECT tslock_unlock",
        ]

    def test_the_callers_clock_keeps_the_plain_statements(self) -> None:
        provider = DatabaseLockProvider("db", using=self.using, use_db_time=False, clock=MutableClock())
        with statements(self.using) as sent:
            held = provider.lock(LockConfiguration("routines/clock", "1m"))
            assert held is not None and held.unlock() is True
        assert not any("tslock_acquire" in sql or "tslock_unlock" in sql for sql in sent), sent

    def test_the_functions_in_the_database_are_the_ones_the_code_writes(self) -> None:
        """A change to the statements the functions are written from needs a migration
        that replaces them: this fails until there is one."""
        connection = connections[self.using]
        with connection.cursor() as cursor:
            wanted = DIALECTS["postgresql"]().create_routines(cursor)
            cursor.execute(
                "SELECT prosrc FROM pg_proc WHERE proname IN ('tslock_acquire', 'tslock_unlock') "
                "ORDER BY proname"
            )
            installed = [row[0] for row in cursor.fetchall()]
        assert installed == [sql.split("$tslock$")[1] for sql in wanted]

    def test_the_functions_ignore_the_callers_search_path(self) -> None:
        """The bodies name their tables with the schema: a table of the same name
        earlier on the caller's search_path is not the one locked."""
        provider = DatabaseLockProvider("db", using=self.using)
        with connections[self.using].cursor() as cursor:
            cursor.execute("CREATE SCHEMA IF NOT EXISTS tslock_decoy")
            cursor.execute("CREATE TABLE tslock_decoy.tslock_lock (LIKE public.tslock_lock INCLUDING ALL)")
            try:
                cursor.execute("SET search_path = tslock_decoy, public")
                held = provider.lock(LockConfiguration("routines/path", "1m"))
                assert held is not None
                cursor.execute("SELECT count(*) FROM public.tslock_lock WHERE name = 'routines/path'")
                assert cursor.fetchone() == (1,)
                assert held.unlock() is True
            finally:
                cursor.execute("RESET search_path")
                cursor.execute("DROP SCHEMA tslock_decoy CASCADE")


class TestMariaDB(MigrationRoundTrip):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")
