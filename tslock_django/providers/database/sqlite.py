"""SQLite's dialect of the database provider."""

from __future__ import annotations

import sqlite3

from .dialect import Dialect

_TIME = "'%%Y-%%m-%%d %%H:%%M:%%f'"


class SQLite(Dialect):
    vendor = "sqlite"
    # Text in UTC, as Django stores it; SQLite's clock has millisecond resolution.
    # RETURNING came with SQLite 3.35; Django 4.2 allows SQLite from 3.21, and Python
    # uses the system's library on Linux (3.34 on Debian 11 and RHEL 9).
    update_returning = one_statement = sqlite3.sqlite_version_info >= (3, 35)

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
