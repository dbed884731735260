"""MySQL's and MariaDB's dialect of the database provider."""

from __future__ import annotations

from typing import Any

from .dialect import Dialect, Proposal

_EPOCH = "'1970-01-01 00:00:00'"


class MySQL(Dialect):
    vendor = "mysql"
    # Columns are DATETIME(6) holding UTC wall time; UTC_TIMESTAMP ignores the session
    # time zone, and all arithmetic below is on UTC wall time.
    update_returning = False
    # MariaDB 10.5 and later return rows from an INSERT, an upsert too; MySQL never does.
    one_statement = None
    names_holder = True  # a held row is written back as it is and returned
    extend_sets_last_insert_id = True
    share_lock = " LOCK IN SHARE MODE"  # MariaDB has no FOR SHARE
    update_lock = " FOR UPDATE"

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

    def acquire(self, row: Proposal) -> str:
        # ON DUPLICATE KEY UPDATE has no WHERE: each column is taken over only where the
        # row has expired by the proposed "now", else written back as it is (MariaDB
        # then writes nothing), and RETURNING gives the row as it now stands: ours, or
        # the holder's, read under the row lock. lock_until goes last: MariaDB assigns
        # in order and would see its new value in the conditions after it.
        expired = "lock_until <= VALUES(locked_at)"
        takeover = {
            "fencing_token": "fencing_token + 1",
            "locked_at": "VALUES(locked_at)",
            "locked_by": "VALUES(locked_by)",
            "token": "VALUES(token)",
            "lock_until": "VALUES(lock_until)",
        }
        assignments = ", ".join(
            f"{column} = IF({expired}, {value}, {column})" for column, value in takeover.items()
        )
        return (
            f"INSERT INTO {row.table} ({row.fields}) VALUES ({row.values}) "
            f"ON DUPLICATE KEY UPDATE {assignments} RETURNING {row.columns}"
        )

    def acquire_params(
        self, name: str, until: list[Any], now: list[Any], locked_by: str, token: str
    ) -> list[Any]:
        return [name, *until, *now, locked_by, token]

    def extend_deadline(self, until: str) -> str:
        # No UPDATE ... RETURNING: LAST_INSERT_ID(expr) hands the new deadline (in
        # epoch microseconds) back in the statement's own reply (the cursor's
        # lastrowid), so extend needs no second statement to read it.
        return f"TIMESTAMPADD(MICROSECOND, LAST_INSERT_ID({self.epoch_us(until)}), {_EPOCH})"
