"""The database provider keeps one cursor on each connection for its statements: the
cursor goes with the session it belongs to, a statement that starts while another is in
flight gets a cursor of its own, and Django still sees every statement (its query log,
its ``execute_wrapper`` hooks). On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from tests.conftest import database_marks
from tslock_django import LockConfiguration
from tslock_django.providers.database import DatabaseLockProvider


class KeptCursors:
    using = "default"

    @pytest.fixture
    def provider(self) -> Iterator[DatabaseLockProvider]:
        provider = DatabaseLockProvider("db", using=self.using)
        yield provider
        provider.close()

    def cycle(self, provider: DatabaseLockProvider, name: str) -> None:
        held = provider.lock(LockConfiguration(name, "1m"))
        assert held is not None and held.unlock() is True

    def test_a_new_session_gets_a_new_cursor(self, provider: DatabaseLockProvider) -> None:
        self.cycle(provider, "kept/reconnect")
        connections[self.using].close()  # the kept cursor dies with its session
        self.cycle(provider, "kept/reconnect")

    def test_a_lock_taken_inside_a_statement_hook_gets_a_cursor_of_its_own(
        self, provider: DatabaseLockProvider
    ) -> None:
        inner: list[bool] = []

        def hook(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            if not inner:  # once, around the outer acquire
                inner.append(True)
                nested = provider.lock(LockConfiguration("kept/inner", "1m"))
                assert nested is not None
                inner.append(nested.unlock())
            return execute(sql, params, many, context)

        with connections[self.using].execute_wrapper(hook):
            outer = provider.lock(LockConfiguration("kept/outer", "1m"))
        assert inner == [True, True]
        assert outer is not None and outer.record.name == "kept/outer"
        assert outer.unlock() is True

    def test_the_query_log_sees_every_statement(self, provider: DatabaseLockProvider) -> None:
        self.cycle(provider, "kept/logged")  # a cursor is kept from here on
        with CaptureQueriesContext(connections[self.using]) as logged:
            self.cycle(provider, "kept/logged")
        assert len(logged.captured_queries) == 2
        assert all("kept/logged" in query["sql"] for query in logged.captured_queries)


@pytest.mark.django_db(transaction=True)
class TestSQLite(KeptCursors):
    using = "default"


class TestPostgreSQL(KeptCursors):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")


class TestMariaDB(KeptCursors):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")
