"""SQLite's dialect of the database provider."""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .dialect import Dialect

_TIME = "'%%Y-%%m-%%d %%H:%%M:%%f'"


#: Statements whose placeholders were converted, by their text as the provider writes it.
_CONVERTED: dict[str, str] = {}
#: Enough for every fixed statement and the listing's shapes; beyond it, convert each time.
_MAX_CONVERTED = 256


@functools.cache
def _cursor_class() -> type:
    """Django's SQLite cursor, converting each of the provider's statements from "%s"
    placeholders to sqlite3's "?" once per process instead of on every execution:
    Django does it with a regular expression over the whole text, which takes about
    14 µs for the acquire upsert (as long as the raw floor's two statements together)."""
    from django.db.backends.sqlite3.base import SQLiteCursorWrapper

    class ConvertingOnce(SQLiteCursorWrapper):
        def convert_query(self, query: str, *args: Any, **kwargs: Any) -> str:
            if args or kwargs.get("param_names") is not None:
                return str(super().convert_query(query, *args, **kwargs))
            converted = _CONVERTED.get(query)
            if converted is None:
                converted = str(super().convert_query(query))
                if len(_CONVERTED) < _MAX_CONVERTED:
                    _CONVERTED[query] = converted
            return converted

    return ConvertingOnce


def sqlite_cursor(conn: BaseDatabaseWrapper) -> Any:
    """A cursor as Django's SQLite backend makes it, but converting placeholders once."""
    return conn.connection.cursor(factory=_cursor_class())


class SQLite(Dialect):
    vendor = "sqlite"
    cursor = staticmethod(sqlite_cursor)
    # Text in UTC, as Django stores it; SQLite's clock has millisecond resolution.
    # RETURNING came with SQLite 3.35; Django 4.2 allows SQLite from 3.21.
    update_returning = upsert_returning = sqlite3.sqlite_version_info >= (3, 35)
    # The upsert's program is larger than the UPDATE's, and runs cold between two waits
    # for the disk: names won here last try the UPDATE first.
    takes_first = True

    def now(self) -> str:
        return f"strftime({_TIME}, 'now')"

    def plus(self, base: str) -> str:
        # Only ever "now + d": a date modifier such as '+1.500000 seconds'.
        assert base == self.now()
        return f"strftime({_TIME}, 'now', printf('%%+.6f seconds', %s / 1e6))"

    def instant(self) -> str:
        return f"strftime({_TIME}, %s / 1e6, 'unixepoch')"

    def epoch_us(self, column: str) -> str:
        return f"CAST(ROUND((julianday({column}) - 2440587.5) * 86400000.0) AS INTEGER) * 1000"

    def few(self, term: str) -> str:
        # SQLite cannot estimate a range bounded by a function of "now", and would read
        # the primary key in name order (skipping expired rows) to spare a sort. In a
        # large table current locks are few (it is expired names that pile up), so say
        # so: the range on the lock_until index and a sort of its rows then win, as they
        # do on the other databases from their statistics. unlikely() (1 in 16) is not
        # enough to beat a range on the name.
        return f"likelihood({term}, 0.001)"

    def later(self, first: str, second: str) -> str:
        return f"max({first}, {second})"  # text of one format: its order is time order

    def fold(self, column: str, letters: str) -> str:
        # SQLite's own lower() changes ASCII letters only.
        return f"lower({column})"
