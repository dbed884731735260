"""Prepared statements on PostgreSQL (``prepared_statements``): which provider prepares,
that its statements are prepared on the server once per connection while every other
query stays as Django configured it, and that they still go through Django's cursor
wrapper (statement hooks, errors)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections

from tests.conftest import database_marks
from tslock_django import InvalidLockProvider, LockConfiguration, LockProviderError, MutableClock
from tslock_django.providers.database import DatabaseLockProvider

pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")


def server_prepared(using: str = "postgres") -> list[str]:
    """The statements prepared on the server in this connection's session."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def fresh_connection() -> Iterator[None]:
    """Each test starts on a new session: no statement prepared yet."""
    connections["postgres"].close()
    yield
    connections["postgres"].close()


def test_the_option_follows_the_database_unless_told() -> None:
    options = dict(connections["postgres"].settings_dict.get("OPTIONS", {}))
    assert DatabaseLockProvider("a", using="postgres").prepares is ("prepare_threshold" in options)
    assert DatabaseLockProvider("b", using="postgres", prepared_statements=True).prepares is True
    assert DatabaseLockProvider("c", using="postgres", prepared_statements=False).prepares is False
    # Only PostgreSQL through psycopg 3 offers them: elsewhere the option changes nothing.
    assert DatabaseLockProvider("d", using="default", prepared_statements=True).prepares is False
    # As a settings URL's query string gives it.
    assert DatabaseLockProvider("e", using="postgres", prepared_statements="true").prepares is True
    assert DatabaseLockProvider("f", using="postgres", prepared_statements="off").prepares is False


def test_a_database_that_sets_prepare_threshold_turns_them_on(monkeypatch: pytest.MonkeyPatch) -> None:
    settings_dict = connections["postgres"].settings_dict
    monkeypatch.setitem(
        settings_dict, "OPTIONS", {**settings_dict.get("OPTIONS", {}), "prepare_threshold": 5}
    )
    assert DatabaseLockProvider("a", using="postgres").prepares is True
    assert DatabaseLockProvider("b", using="postgres", prepared_statements=False).prepares is False


@pytest.mark.parametrize("bad", ["maybe", 1, 0])
def test_a_value_other_than_none_true_or_false_is_refused(bad: Any) -> None:
    with pytest.raises(
        InvalidLockProvider,
        match=r"OPTIONS\['prepared_statements'\] must be None \(follow the database\), True or False",
    ):
        DatabaseLockProvider("db", using="postgres", prepared_statements=bad)


def test_the_fixed_statements_are_prepared_once_and_nothing_else_is(fresh_connection: None) -> None:
    import psycopg

    provider = DatabaseLockProvider("db", using="postgres", prepared_statements=True)
    for _ in range(3):
        held = provider.lock(LockConfiguration("prepared", "1m"))
        assert held is not None
        extended = held.extend("2m")
        assert extended is not None and extended.unlock() is True
    assert provider.force_unlock("prepared", expected=None) is False  # already released
    prepared = server_prepared()
    assert len(prepared) == 4, prepared  # acquire, extend, unlock, force release: once each
    # Acquire and unlock are the calls of migration 0007's functions.
    assert any(text.startswith("SELECT * FROM tslock_acquire(") for text in prepared)
    assert any(text.startswith("SELECT tslock_unlock(") for text in prepared)
    assert any(
        text.startswith("UPDATE tslock_lock SET lock_until") and "RETURNING" in text for text in prepared
    )
    # The connection is left as Django configured it: psycopg prepares none of the
    # project's queries, not even server-side bound ones run more often than psycopg's
    # usual threshold (5), and keeps no count of them.
    raw = connections["postgres"].connection
    assert raw.prepare_threshold is None
    with psycopg.Cursor(raw) as cursor:
        for _ in range(10):
            cursor.execute("SELECT count(*) FROM tslock_lock WHERE name = %s", ["prepared"])
            assert cursor.fetchone() == (1,)
    assert len(server_prepared()) == 4


def test_without_the_option_nothing_is_prepared(fresh_connection: None) -> None:
    provider = DatabaseLockProvider("db", using="postgres", prepared_statements=False)
    held = provider.lock(LockConfiguration("unprepared", "1m"))
    assert held is not None and held.unlock() is True
    assert server_prepared() == []


def test_prepared_statements_pass_through_django_hooks(fresh_connection: None) -> None:
    provider = DatabaseLockProvider("db", using="postgres", prepared_statements=True)
    seen: list[str] = []

    def hook(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connections["postgres"].execute_wrapper(hook):
        held = provider.lock(LockConfiguration("hooked", "1m"))
        assert held is not None and held.unlock() is True
    assert len(seen) == 2 and seen[0].startswith("SELECT * FROM tslock_acquire(")
    assert len(server_prepared()) == 2  # and they ran prepared


def test_inside_a_transaction_the_private_connection_prepares_nothing(
    fresh_connection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import transaction

    from tslock_django.providers.database import provider as database

    made = []
    real = database.preparing
    monkeypatch.setattr(database, "preparing", lambda conn: made.append(conn) or real(conn))
    provider = DatabaseLockProvider("db", using="postgres", prepared_statements=True)
    with transaction.atomic(using="postgres"):
        held = provider.lock(LockConfiguration("in-atomic-prepared", "1m"))
        assert held is not None and held.unlock() is True
    assert made == []  # a connection that serves one operation gains nothing from it
    held = provider.lock(LockConfiguration("in-atomic-prepared", "1m"))
    assert held is not None and held.unlock() is True
    # One preparing cursor, made for the first statement and kept for the second.
    assert made == [connections["postgres"]]


def test_statements_dropped_behind_psycopgs_back_are_prepared_again(
    fresh_connection: None, caplog: pytest.LogCaptureFixture
) -> None:
    provider = DatabaseLockProvider("db", using="postgres", prepared_statements=True)
    held = provider.lock(LockConfiguration("discarded", "1m"))
    assert held is not None and held.unlock() is True
    # What DISCARD ALL or a pooler handing over another session does: the server forgets
    # the statements while psycopg still believes they exist.
    with connections["postgres"].cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert server_prepared() == []
    held = provider.lock(LockConfiguration("discarded", "1m"))
    assert held is not None and held.unlock() is True
    assert "no longer had tslock's prepared statements" in caplog.text
    assert len(server_prepared()) == 2


def test_a_killed_session_is_a_store_failure_then_recovers(fresh_connection: None) -> None:
    provider = DatabaseLockProvider("db", using="postgres", prepared_statements=True)
    held = provider.lock(LockConfiguration("killed", "1m"))
    assert held is not None and held.unlock() is True
    with connections["postgres"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    other = connections.create_connection("postgres")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    with pytest.raises(LockProviderError, match="database 'postgres' failed"):
        provider.lock(LockConfiguration("killed", "1m"))
    held = provider.lock(LockConfiguration("killed", "1m"))  # a new session, prepared anew
    assert held is not None and held.unlock() is True
    assert len(server_prepared()) == 2


def test_the_callers_clock_runs_prepared_too(fresh_connection: None) -> None:
    clock = MutableClock()
    provider = DatabaseLockProvider(
        "db", using="postgres", prepared_statements=True, use_db_time=False, clock=clock
    )
    held = provider.lock(LockConfiguration("clocked-prepared", "10s"))
    assert held is not None
    assert provider.lock(LockConfiguration("clocked-prepared", "10s")) is None
    clock.advance("11s")
    again = provider.lock(LockConfiguration("clocked-prepared", "10s"))
    assert again is not None and again.fencing_token == held.fencing_token + 1
    assert len(server_prepared()) == 1
