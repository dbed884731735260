"""Server-side prepared statements for the provider's fixed statements: PostgreSQL
through psycopg 3 only (psycopg2, pymysql and mysqlclient do not offer them; Python's
sqlite3 keeps a statement cache of its own)."""

from __future__ import annotations

import functools
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper


def prepares(connection: BaseDatabaseWrapper, wanted: bool | None) -> bool:
    """Whether the provider's fixed statements run as server-side prepared statements
    on ``connection``: ``wanted`` (the ``prepared_statements`` option) where it says,
    else whatever the database's own ``prepare_threshold`` asks for."""
    if connection.vendor != "postgresql" or wanted is False:
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return False
    return wanted or connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold") is not None


#: psycopg prepares nothing on a connection whose ``prepare_threshold`` is ``None``
#: (Django's default), even when asked to. The provider's cursor sets a threshold that
#: no statement reaches for the length of its own call and puts ``None`` back after it,
#: so psycopg neither counts nor prepares anybody else's queries on that connection.
_ONLY_WHEN_ASKED = 2**62
#: The SQLSTATE of "prepared statement does not exist": the server dropped the
#: provider's statements behind psycopg's back (``DISCARD ALL``, ``DEALLOCATE`` by other
#: code, a pooler that changed the session).
_STATEMENT_GONE = "26000"


@functools.cache
def _preparing_cursor_class() -> type:
    """A psycopg 3 cursor that prepares every statement it executes."""
    import psycopg

    class PreparingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            raw = self.connection
            unset = raw.prepare_threshold is None
            if unset:
                raw.prepare_threshold = _ONLY_WHEN_ASKED
            try:
                return super().execute(query, params, **{**kwargs, "prepare": True})
            finally:
                if unset:
                    raw.prepare_threshold = None

    return PreparingCursor


def preparing(conn: BaseDatabaseWrapper) -> Any:
    """A cursor on ``conn`` (connected) that runs its statements prepared: psycopg parses
    and plans each once per connection and afterwards sends only its parameters. The
    provider keeps it on the connection like its plain cursor (see ``cursors``), so
    database errors, ``execute_wrapper`` hooks and the query log see these statements
    like any other."""
    return _preparing_cursor_class()(conn.connection)


def statement_gone(err: BaseException) -> bool:
    """Whether ``err`` says a prepared statement no longer exists on the server."""
    return getattr(err.__cause__, "sqlstate", None) == _STATEMENT_GONE
