"""PostgreSQL's dialect of the database provider."""

from __future__ import annotations

from typing import Any

from .dialect import Dialect, Proposal
from .tables import TABLE


class PostgreSQL(Dialect):
    vendor = "postgresql"
    # A statement takes its table locks before its snapshot: while a purge holds this
    # one, an acquire waits and then reads the mark the purge committed, with no row
    # lock on the mark. A row lock there would be taken by every acquire, and on
    # PostgreSQL, shared by several sessions, it becomes a MultiXact written to disk.
    purge_lock = f"LOCK TABLE {TABLE} IN SHARE ROW EXCLUSIVE MODE"
    update_lock = " FOR UPDATE"
    names_holder = True

    def now(self) -> str:
        return "statement_timestamp()"  # constant within a statement (clock_timestamp() is not)

    def plus(self, base: str) -> str:
        return f"({base} + %s * INTERVAL '1 microsecond')"

    def instant(self) -> str:
        return self.plus("TIMESTAMPTZ 'epoch'")

    def epoch_us(self, column: str) -> str:
        return f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"

    def fold(self, column: str, letters: str) -> str:
        # Under the "C" collation lower() changes ASCII letters only.
        return f'lower({column} COLLATE "C")'

    def acquire(self, row: Proposal) -> str:
        # The upsert in a WITH query, and the holder's row where it wrote nothing: a
        # refusal names its holder in the same round trip, still only reading. The
        # holder is read from the statement's snapshot; a row inserted since is held
        # but unseen, and the refusal then names no one.
        return (
            f"WITH taken AS ({super().acquire(row)}) SELECT * FROM taken UNION ALL "
            f"SELECT {row.columns} FROM {row.table} WHERE name = %s AND NOT EXISTS (SELECT FROM taken)"
        )

    def acquire_params(
        self, name: str, until: list[Any], now: list[Any], locked_by: str, token: str
    ) -> list[Any]:
        return [*super().acquire_params(name, until, now, locked_by, token), name]
