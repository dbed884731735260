"""Lock+unlock cycles per second on one database server (run in its own process).

Usage: ``BENCH_DB=postgres python -m bench.dbbench ROUNDS SECONDS`` prints one JSON
object. Contenders, all on the same Django connection in autocommit mode:

- ``tslock``: ``DatabaseLockProvider.lock()`` then ``SimpleLock.unlock()``, as
  configured by default;
- ``raw-sql``: the floor: ShedLock's conditional ``UPDATE`` to acquire (with
  ``RETURNING fencing_token`` where the server has it) and one ``UPDATE`` to release,
  on a row of the same table, through Django's ``connection.cursor()``;
- ``tslock, psycopg prepared`` and ``raw-sql, psycopg prepared`` (PostgreSQL only): the
  same two on a connection whose ``OPTIONS`` turn on psycopg's prepared statements
  (``server_side_binding`` and ``prepare_threshold``), the opt-in the docs describe;
- ``django-db-mutex``: ``with db_mutex(...)`` (its expired-lock sweep, an insert in a
  transaction, an existence check and a delete);
- ``django-pglock``: ``with pglock.advisory(..., timeout=0)`` (PostgreSQL only;
  ``pg_try_advisory_lock`` and ``pg_advisory_unlock``: session locks without expiry).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from typing import Any

import django


def main(rounds: int, seconds: float) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.db import connection

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    from django.db import connections

    if "prepared" in connections:  # the same test database, as Django's mirrors are set up
        connections["prepared"].settings_dict["NAME"] = connection.settings_dict["NAME"]
    try:
        contenders = build(connection)
        from bench.stats import interleave, ratios

        results = interleave(contenders, rounds=rounds, seconds=seconds)
        return {
            "server": connection.vendor,
            "version": server_version(connection),
            "unit": "lock+unlock cycles per second",
            "results": results,
            "tslock_over": ratios(results, "tslock"),
        }
    finally:
        for each in connections.all():
            each.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


def server_version(connection: Any) -> str:
    query = "SELECT sqlite_version()" if connection.vendor == "sqlite" else "SELECT version()"
    with connection.cursor() as cursor:
        cursor.execute(query)
        version = str(cursor.fetchone()[0]).split(" on ")[0]
    if connection.vendor == "mysql":
        # PyMySQL installed as MySQLdb keeps its own module name.
        driver = "PyMySQL" if connection.Database.__name__ == "pymysql" else "mysqlclient"
        version += f", {driver}"
    return version


def build(connection: Any) -> dict[str, Any]:
    from db_mutex.db_mutex import db_mutex

    from tslock_django import LockConfiguration
    from tslock_django.providers.database import DatabaseLockProvider

    provider = DatabaseLockProvider("bench", using="default")
    config = LockConfiguration("bench-tslock", "1m")

    def tslock_cycle() -> None:
        held = provider.lock(config)
        if held is None or not held.unlock():
            raise RuntimeError("tslock: the free lock was not granted or not released")

    # The raw contender's row, written once (as tslock's first acquire does).
    seed = provider.lock(LockConfiguration("bench-raw", "1m"))
    assert seed is not None
    seed.unlock()

    def mutex_cycle() -> None:
        with db_mutex("bench-db-mutex"):
            pass

    contenders = {
        "tslock": tslock_cycle,
        "raw-sql": raw_cycle(connection, provider.locked_by),
        "django-db-mutex": mutex_cycle,
    }
    if connection.vendor == "postgresql":
        from django.db import connections

        prepared = DatabaseLockProvider("bench-prepared", using="prepared")
        prepared_config = LockConfiguration("bench-tslock-prepared", "1m")

        def prepared_cycle() -> None:
            held = prepared.lock(prepared_config)
            if held is None or not held.unlock():
                raise RuntimeError("tslock, psycopg prepared: the free lock was not granted or not released")

        contenders["tslock, psycopg prepared"] = prepared_cycle
        contenders["raw-sql, psycopg prepared"] = raw_cycle(connections["prepared"], prepared.locked_by)
        import pglock

        def pglock_cycle() -> None:
            with pglock.advisory("bench-pglock", timeout=0) as acquired:
                if not acquired:
                    raise RuntimeError("django-pglock: the free lock was not granted")

        contenders["django-pglock"] = pglock_cycle
    return contenders


def raw_cycle(connection: Any, locked_by: str) -> Any:
    """The floor's lock+unlock on ``connection``, through Django's cursor."""
    acquire_sql, release_sql = raw_statements(connection.vendor)

    def cycle() -> None:
        token = secrets.token_hex(16)
        with connection.cursor() as cursor:
            cursor.execute(acquire_sql, [locked_by, token, "bench-raw"])
            # With RETURNING the row is the proof (SQLite sets rowcount only after fetching).
            granted = len(cursor.fetchall()) if cursor.description else cursor.rowcount
            if granted != 1:
                raise RuntimeError("raw-sql: the free lock was not granted")
            cursor.execute(release_sql, ["bench-raw", token])

    return cycle


def raw_statements(vendor: str) -> tuple[str, str]:
    """The two statements of the floor, with the server's own clock as tslock uses it."""
    if vendor == "postgresql":
        now = "statement_timestamp()"
        later = "statement_timestamp() + INTERVAL '60 seconds'"
        returning = " RETURNING fencing_token"
    elif vendor == "mysql":
        now = "UTC_TIMESTAMP(6)"
        later = "TIMESTAMPADD(SECOND, 60, UTC_TIMESTAMP(6))"
        returning = ""
    else:
        now = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
        later = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+60 seconds')"
        returning = " RETURNING fencing_token"
    acquire = (
        f"UPDATE tslock_lock SET lock_until = {later}, locked_at = {now}, locked_by = %s, token = %s, "
        f"fencing_token = fencing_token + 1 WHERE name = %s AND lock_until <= {now}{returning}"
    )
    release = f"UPDATE tslock_lock SET lock_until = {now}, token = '' WHERE name = %s AND token = %s"
    return acquire, release


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), float(sys.argv[2]))))
