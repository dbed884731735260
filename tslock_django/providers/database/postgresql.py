"""PostgreSQL's dialect of the database provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .dialect import UPSERT_SLOTS, Dialect, Routines, Upsert
from .statements import Statements
from .tables import FENCE_TABLE, TABLE

#: What the routines' parameters are called in their bodies, by the statements' slots.
#: "now" has none: on the database's clock it is ``statement_timestamp()``, the start of
#: the caller's ``SELECT``, the same for every statement of the routine.
_PARAMETERS = {"name": "p_name", "until": "p_for", "locked_by": "p_locked_by", "token": "p_token"}
_UNLOCK_PARAMETERS = {"name": "p_name", "token": "p_token", "at_least": "p_at_least"}
#: undefined_function: the migration that creates the routines has not run.
_UNDEFINED_FUNCTION = "42883"


def _bind(sql: str, slots: Sequence[str], parameters: Mapping[str, str]) -> str:
    """``sql`` with each placeholder replaced by the routine's parameter of its slot."""
    return sql % tuple(parameters[slot] for slot in slots if slot in parameters)


class PostgreSQL(Dialect):
    vendor = "postgresql"
    # A statement takes its table locks before its snapshot: while a purge holds this
    # one, an acquire waits and then reads the mark the purge committed, with no row
    # lock on the mark. A row lock there would be taken by every acquire, and on
    # PostgreSQL, shared by several sessions, it becomes a MultiXact written to disk.
    purge_lock = f"LOCK TABLE {TABLE} IN SHARE ROW EXCLUSIVE MODE"
    update_lock = " FOR UPDATE"
    # Sent as plain SQL, the upsert is parsed and planned on every call (about 100 µs
    # of planning against 20 µs for a bare UPDATE); PL/pgSQL keeps the plans of a
    # function's statements for the session, and the call itself plans in a few µs.
    routines = Routines(
        acquire="SELECT * FROM tslock_acquire(%s, %s, %s, %s)",
        unlock="SELECT tslock_unlock(%s, %s, %s)",
        missing=(_UNDEFINED_FUNCTION,),
    )

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
            f"WHERE NOT EXISTS (SELECT FROM {upsert.table} WHERE name = %s AND lock_until > {upsert.now}) "
            f"{upsert.conflict}) "
            f"SELECT * FROM taken UNION ALL "
            f"SELECT {upsert.columns} FROM {upsert.table} WHERE name = %s AND NOT EXISTS (SELECT FROM taken)"
        )
        return sql, (*UPSERT_SLOTS, "name", "now", "name")

    def missing_routine(self, err: BaseException) -> bool:
        # psycopg 3 names it sqlstate, psycopg2 pgcode.
        code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        return code in (self.routines.missing if self.routines else ())

    def create_routines(self, cursor: Any) -> list[str]:
        """``CREATE OR REPLACE FUNCTION`` of ``tslock_acquire`` and ``tslock_unlock`` in
        the schema of the lock table, their bodies written from the provider's own
        statements (so the fencing mark works as in the plain upsert) with both tables
        schema-qualified: a caller's ``search_path`` cannot point them at other
        tables, and no ``SET search_path`` clause is needed (one costs about a
        quarter of the call). ``pg_catalog`` comes first in every ``search_path``
        unless it is named later, so the built-ins are the catalog's."""
        schema = self._schema(cursor)
        lock, fence = f"{schema}.{TABLE}", f"{schema}.{FENCE_TABLE}"
        sql = Statements.build(self, True, table=lock, fence=fence)
        # The common case, a name that exists and is free, is the floor's UPDATE; a
        # held row is left untouched (the UPDATE neither writes nor locks it) and the
        # upsert, which reads the holder or inserts a new name above the fencing
        # mark, runs only when the UPDATE took nothing.
        take = _bind(sql.take, sql.take_slots, _PARAMETERS)
        upsert = _bind(sql.acquire, sql.acquire_slots, _PARAMETERS)
        unlock = _bind(sql.unlock, sql.unlock_slots, _UNLOCK_PARAMETERS)
        return [
            f"CREATE OR REPLACE FUNCTION {schema}.tslock_acquire("
            "p_name varchar, p_for bigint, p_locked_by varchar, p_token varchar) "
            "RETURNS TABLE (lock_name varchar, lock_until_us bigint, locked_at_us bigint, "
            "holder varchar, token_digest varchar, fence bigint) "
            "LANGUAGE plpgsql VOLATILE AS $tslock$\n"
            "BEGIN\n"
            f"    RETURN QUERY {take} RETURNING {sql.columns};\n"
            "    IF FOUND THEN\n"
            "        RETURN;\n"
            "    END IF;\n"
            f"    RETURN QUERY {upsert};\n"
            "END\n"
            "$tslock$",
            f"CREATE OR REPLACE FUNCTION {schema}.tslock_unlock("
            "p_name varchar, p_token varchar, p_at_least bigint) "
            "RETURNS boolean LANGUAGE plpgsql VOLATILE AS $tslock$\n"
            "BEGIN\n"
            f"    {unlock};\n"
            "    RETURN FOUND;\n"
            "END\n"
            "$tslock$",
        ]

    def drop_routines(self, cursor: Any) -> list[str]:
        schema = self._schema(cursor)
        return [
            f"DROP FUNCTION IF EXISTS {schema}.tslock_acquire(varchar, bigint, varchar, varchar)",
            f"DROP FUNCTION IF EXISTS {schema}.tslock_unlock(varchar, varchar, bigint)",
        ]

    @staticmethod
    def _schema(cursor: Any) -> str:
        """The schema of the lock table, quoted: where the migrations created it."""
        cursor.execute(
            "SELECT quote_ident(n.nspname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = %s::regclass",
            [TABLE],
        )
        return str(cursor.fetchone()[0])
