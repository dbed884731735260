"""Running one statement on a cursor kept on the connection.

Django makes a new DB-API cursor for every ``connection.cursor()``, and on psycopg a
fresh cursor's first statement costs about 15 µs more than a statement on one already
used (on PyMySQL about 8 µs): some 30 µs of a lock+unlock, a few percent of the whole
cycle. The provider runs one statement at a time and reads its whole answer before the
next, so one cursor can serve them all. It is kept on Django's connection object (one
per thread, as Django keeps connections) and forgotten when that object connects
again (a new DB-API connection). A cursor is taken for one statement and given back
afterwards, so a statement that starts while another is in flight (an
``execute_wrapper`` hook that takes a lock) gets a cursor of its own.

The statement still goes through Django's cursor wrapper, made as Django makes its own
(the health check where ``CONN_HEALTH_CHECKS`` asks for one, the thread check, the
query log when ``DEBUG`` is on), so error translation, ``execute_wrapper`` hooks and
``connection.queries`` see the provider's statements like any other. Only reading the
answer skips the wrapper's attribute forwarding (its errors are translated all the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

#: Makes a DB-API cursor on a connected Django connection.
Maker = Callable[[BaseDatabaseWrapper], Any]

#: The attribute of Django's connection object that holds what this module keeps there:
#: ``{maker: (DB-API connection, [idle cursors])}``.
_KEPT = "_tslock_cursors"


def plain(conn: BaseDatabaseWrapper) -> Any:
    """A cursor as ``connection.cursor()`` makes it, before Django wraps it."""
    return conn.create_cursor(None)


def run(
    conn: BaseDatabaseWrapper,
    sql: str,
    params: list[Any],
    *,
    fetch: bool = False,
    carried: bool = False,
    maker: Maker = plain,
) -> tuple[int, list[Any]]:
    """Execute ``sql`` on a kept cursor of ``maker``'s kind on ``conn``; returns
    (rowcount, rows): the rows when ``fetch``, the cursor's ``lastrowid`` as one row when
    ``carried``, else none. Database errors arrive as Django's, as from any cursor."""
    conn.close_if_health_check_failed()
    session = conn.connection
    if session is None:
        conn.ensure_connection()
        session = conn.connection
    kept: dict[Maker, tuple[Any, list[Any]]] | None = getattr(conn, _KEPT, None)
    if kept is None:
        kept = {}
        setattr(conn, _KEPT, kept)
    entry = kept.get(maker)
    if entry is None or entry[0] is not session:
        # A new session: the cursors of the one before died with it.
        entry = kept[maker] = (session, [])
    idle = entry[1]
    if idle:
        cursor = idle.pop()
    else:
        with conn.wrap_database_errors:
            cursor = maker(conn)
    try:
        conn.validate_thread_sharing()
        if conn.execute_wrappers or conn.queries_logged:
            # Someone watches statements: through Django's wrapper, as any statement.
            wrapped = conn.make_debug_cursor(cursor) if conn.queries_logged else conn.make_cursor(cursor)
            wrapped.execute(sql, params)
        else:
            # Nobody does: what the wrapper would do, without building it and its three
            # calls deep per statement (about a tenth of the Python of a lock+unlock).
            conn.validate_no_broken_transaction()
            with conn.wrap_database_errors:
                cursor.execute(sql, params)
                rows = cursor.fetchall() if fetch else [(cursor.lastrowid,)] if carried else []
                return cursor.rowcount, rows
        with conn.wrap_database_errors:
            rows = cursor.fetchall() if fetch else [(cursor.lastrowid,)] if carried else []
            return cursor.rowcount, rows
    finally:
        if conn.connection is session:
            idle.append(cursor)
        else:  # the statement's failure ended the session: the cursor goes with it
            _close_quietly(cursor)


def _close_quietly(cursor: Any) -> None:
    try:
        cursor.close()
    except Exception:  # noqa: BLE001  (a cursor of a dead session; nothing to tell)
        return
