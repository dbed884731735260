"""PostgreSQL's dialect of the database provider."""

from __future__ import annotations

from .dialect import UPSERT_SLOTS, Dialect, Upsert
from .tables import TABLE


class PostgreSQL(Dialect):
    vendor = "postgresql"
    # A statement takes its table locks before its snapshot: while a purge holds this
    # one, an acquire waits and then reads the mark the purge committed, with no row
    # lock on the mark. A row lock there would be taken by every acquire, and on
    # PostgreSQL, shared by several sessions, it becomes a MultiXact written to disk.
    purge_lock = f"LOCK TABLE {TABLE} IN SHARE ROW EXCLUSIVE MODE"
    update_lock = " FOR UPDATE"

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

    def acquire(self, upsert: Upsert) -> tuple[str, tuple[str, ...]]:
        # A refusal that writes back the holder's row costs a row lock, a WAL record
        # and a flushed commit, and queues behind the holder's unlock; with many
        # processes on one name that is most of the traffic. So first look at the
        # row as this statement's snapshot has it: if it is held there, that row is
        # the answer and nothing is written. Only a row that looks free (or none)
        # goes on to the upsert, which settles any race under the row lock.
        values = ", ".join(upsert.values)
        sql = (
            f"WITH taken AS ({upsert.head} SELECT {values} "
            f"WHERE NOT EXISTS (SELECT FROM {TABLE} WHERE name = %s AND lock_until > {upsert.now}) "
            f"{upsert.conflict}) "
            f"SELECT * FROM taken UNION ALL "
            f"SELECT {upsert.columns} FROM {TABLE} WHERE name = %s AND NOT EXISTS (SELECT FROM taken)"
        )
        return sql, (*UPSERT_SLOTS, "name", "now", "name")
