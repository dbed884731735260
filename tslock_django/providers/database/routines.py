"""The server-side routines of acquire and unlock (migration 0007): installing and
removing them on a database, whichever vendor it is. Each vendor's module writes its
own (``Dialect.create_routines``); a vendor without routines gets nothing."""

from __future__ import annotations

from typing import Any

from .dialect import Dialect
from .mysql import MySQL
from .postgresql import PostgreSQL
from .sqlite import SQLite

#: The dialect of each ``connection.vendor`` the provider speaks to.
DIALECTS: dict[str, type[Dialect]] = {d.vendor: d for d in (PostgreSQL, MySQL, SQLite)}


def install(schema_editor: Any) -> None:
    """Create or replace the routines on ``schema_editor``'s database."""
    _execute(schema_editor, "create_routines")


def remove(schema_editor: Any) -> None:
    """Drop the routines from ``schema_editor``'s database, if they are there."""
    _execute(schema_editor, "drop_routines")


def _execute(schema_editor: Any, which: str) -> None:
    connection = schema_editor.connection
    dialect = DIALECTS.get(connection.vendor)
    if dialect is None:
        return
    with connection.cursor() as cursor:
        statements = getattr(dialect(), which)(cursor)
    for sql in statements:
        # No parameters: the bodies are SQL text, whose % signs stay as written.
        schema_editor.execute(sql, params=None)
