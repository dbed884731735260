"""MySQL's and MariaDB's dialect of the database provider."""

from __future__ import annotations

from .dialect import Dialect

_EPOCH = "'1970-01-01 00:00:00'"


class MySQL(Dialect):
    vendor = "mysql"
    # Columns are DATETIME(6) holding UTC wall time; UTC_TIMESTAMP ignores the session
    # time zone, and all arithmetic below is on UTC wall time.
    update_returning = False
    # MariaDB 10.5 and later return rows from an INSERT, an upsert too; MySQL never does.
    upsert_returning = None
    extend_carries_deadline = True
    # An UPDATE returns no rows here: LAST_INSERT_ID(expr) carries its grant in the
    # reply. Tried first where upserts return rows, MariaDB 10.5+ (the fallback).
    takes_first = carries_take = True
    upsert_alias = ""
    on_conflict_update = "ON DUPLICATE KEY UPDATE"
    share_lock = " LOCK IN SHARE MODE"  # MariaDB has no FOR SHARE
    update_lock = " FOR UPDATE"

    def current(self, column: str) -> str:
        return column

    def proposed(self, column: str) -> str:
        return f"VALUES({column})"

    def now(self) -> str:
        return "UTC_TIMESTAMP(6)"

    def plus(self, base: str) -> str:
        return f"TIMESTAMPADD(MICROSECOND, %s, {base})"

    def instant(self) -> str:
        return self.plus(_EPOCH)

    def epoch_us(self, column: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, {_EPOCH}, {column})"

    def beyond(self, column: str, direction: str) -> tuple[str, int]:
        # MySQL and MariaDB scan a row value comparison whole; expanded, their range
        # optimizer makes it two ranges of the index that join into one.
        instant = self.instant()
        return f"({column} {direction} {instant} OR ({column} = {instant} AND name {direction} %s))", 2

    def insert_if_missing(self, table: str, columns: str, values: str) -> str:
        return f"INSERT IGNORE INTO {table} ({columns}) VALUES ({values})"

    def fold(self, column: str, letters: str) -> str:
        # LOWER() here follows Unicode ("É" -> "é", KELVIN SIGN -> "k"), and the binary
        # collation makes REPLACE and LIKE exact, so fold just the letters searched for:
        # other characters cannot take part in a match whatever their case.
        for letter in letters:
            column = f"REPLACE({column}, '{letter.upper()}', '{letter}')"
        return column

    def extend_deadline(self, until: str) -> str:
        # No UPDATE ... RETURNING: LAST_INSERT_ID(expr) hands the new deadline (in
        # epoch microseconds) back in the statement's own reply (the cursor's
        # lastrowid), so extend needs no second statement to read it.
        return f"TIMESTAMPADD(MICROSECOND, LAST_INSERT_ID({self.epoch_us(until)}), {_EPOCH})"
