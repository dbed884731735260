"""The provider contract on the database provider: SQLite, PostgreSQL and MariaDB, each
with the database's own clock (so expiry is waited for, not simulated)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import database_marks
from tslock_django.providers.database import DatabaseLockProvider
from tslock_django.providers.database.statements import Statements as _Statements
from tslock_django.testing import StrongProviderContract


class DatabaseContract(StrongProviderContract):
    using = "default"

    @pytest.fixture
    def provider(self) -> Iterator[DatabaseLockProvider]:
        provider = DatabaseLockProvider(f"db-{self.using}", using=self.using)
        yield provider
        provider.close()


@pytest.mark.django_db(transaction=True)
class TestSQLite(DatabaseContract):
    using = "default"


class TestPostgreSQL(DatabaseContract):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")


class TestMariaDB(DatabaseContract):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")


def without_returning(provider: DatabaseLockProvider) -> DatabaseLockProvider:
    """``provider`` as it runs where the server returns no rows from an UPDATE or an
    upsert (SQLite before 3.35; MySQL, which also has no RETURNING): acquire in steps,
    extend read back (SQLite) or carried in LAST_INSERT_ID (MySQL)."""
    dialect = type(provider._dialect)()
    dialect.update_returning = False
    dialect.one_statement = False
    provider._dialect = dialect
    provider._sql = _Statements.build(dialect, provider.use_db_time)
    provider._single = False
    return provider


class InSteps(DatabaseContract):
    @pytest.fixture
    def provider(self) -> Iterator[DatabaseLockProvider]:
        provider = without_returning(DatabaseLockProvider(f"db-{self.using}", using=self.using))
        yield provider
        provider.close()


@pytest.mark.django_db(transaction=True)
class TestSQLiteWithoutReturning(InSteps):
    using = "default"


class TestMySQLPathOnMariaDB(InSteps):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")
