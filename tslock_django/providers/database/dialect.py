"""What every SQL dialect of the database provider answers: how a vendor writes "now",
"now + d", an instant from epoch microseconds, the acquire statement, a keyset term. The
vendors' own answers live in ``postgresql``, ``mysql`` and ``sqlite`` beside this
module, so a reader of one vendor's path never reads another's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Proposal:
    """The row an acquire proposes, for a dialect to write its one statement with."""

    #: The lock table as the statement names it.
    table: str
    #: ``name, lock_until, locked_at, locked_by, token, fencing_token``
    fields: str
    #: The SQL of those fields' values for a new name (parameters: name, until, now,
    #: locked_by, token, in that order).
    values: str
    #: The columns a read returns (``Statements.columns``).
    columns: str
    #: The SQL of "now" (a parameter with the caller's clock).
    now: str


class Dialect:
    """How one vendor writes the provider's SQL. Subclasses override what differs."""

    #: ``connection.vendor`` of the databases this dialect speaks to.
    vendor = ""
    #: Whether an ``UPDATE`` can return the row it wrote.
    update_returning: bool = True
    #: Whether acquire is one statement (``acquire``) here; ``None``: ask the server.
    #: Where it is not, acquire is ShedLock's steps (``DatabaseLockProvider``).
    one_statement: bool | None = True
    #: Whether a refused ``acquire`` returns the holder's row; where it does not, the
    #: provider reads it (SQLite: a lookup in the process, no round trip).
    names_holder = False
    #: Whether extend hands its new deadline back in the statement's own reply (the
    #: cursor's ``lastrowid``) rather than by ``RETURNING``.
    extend_sets_last_insert_id = False
    #: How a read takes a shared row lock (a fresh INSERT reads the fencing mark so,
    #: where ``purge_lock`` does not keep it current instead).
    share_lock = ""
    #: What a purge transaction runs first, where that, rather than the mark's row
    #: lock, keeps an INSERT from reading an old mark (see ``Retention``).
    purge_lock: str | None = None
    #: How a read takes an exclusive row lock (purge locks the rows it deletes).
    update_lock = ""

    def now(self) -> str:
        raise NotImplementedError

    def plus(self, base: str) -> str:
        """``base`` + a parameter of microseconds."""
        raise NotImplementedError

    def instant(self) -> str:
        """An instant from a parameter of epoch microseconds."""
        raise NotImplementedError

    def epoch_us(self, column: str) -> str:
        raise NotImplementedError

    def later(self, first: str, second: str) -> str:
        """The later of two instants."""
        return f"GREATEST({first}, {second})"

    def few(self, term: str) -> str:
        """``term``, marked for the planner as true for few rows where it needs that."""
        return term

    def beyond(self, column: str, direction: str) -> tuple[str, int]:
        """The keyset term ``(column, name) <direction> (instant, name)`` with
        parameters of epoch microseconds and a name, and how many times the instant's
        parameter occurs. A row value: PostgreSQL and SQLite read it as one range of
        the ``(column, name)`` index."""
        return f"({column}, name) {direction} ({self.instant()}, %s)", 1

    def insert_if_missing(self, table: str, columns: str, values: str) -> str:
        """An INSERT of constant ``values`` that does nothing when the key exists."""
        return f"INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT DO NOTHING"

    def fold(self, column: str, letters: str) -> str:
        """``column`` with ASCII letters lower-cased (only ``letters`` need to be: the
        lower-case ASCII letters of the search) and every other character as it is:
        the store's side of :func:`~tslock_django.core.query.fold`."""
        raise NotImplementedError

    def acquire(self, row: Proposal) -> str:
        """The one statement of acquire: insert the row of a new name, or take over the
        existing row where it has expired by the proposed "now" (its ``locked_at``),
        with the next fencing token. Returns ``row.columns`` of the row it wrote; a
        held row is neither written nor returned (no row: held). Its parameters are
        ``acquire_params``.

        PostgreSQL and SQLite (3.35+) write it alike. The row is proposed only where
        the statement's snapshot shows the name free (or new), so a refusal is a read:
        the upsert's ``WHERE`` alone would still lock the holder's row, and on
        PostgreSQL that costs each refusal a transaction id and a flushed commit. The
        ``WHERE`` settles the race with a holder that took the row since the snapshot,
        under the row lock."""
        takeover = ", ".join(
            f"{column} = EXCLUDED.{column}" for column in ("lock_until", "locked_at", "locked_by", "token")
        )
        return (
            f"INSERT INTO {row.table} AS held ({row.fields}) SELECT {row.values} "
            f"WHERE NOT EXISTS (SELECT 1 FROM {row.table} WHERE name = %s AND lock_until > {row.now}) "
            f"ON CONFLICT (name) DO UPDATE SET {takeover}, fencing_token = held.fencing_token + 1 "
            f"WHERE held.lock_until <= EXCLUDED.locked_at RETURNING {row.columns}"
        )

    def acquire_params(
        self, name: str, until: list[Any], now: list[Any], locked_by: str, token: str
    ) -> list[Any]:
        """The parameters of ``acquire`` in order (``until`` and ``now``: the SQL's
        parameters of "now + d" and "now", none or one each)."""
        return [name, *until, *now, locked_by, token, name, *now]

    def extend_deadline(self, until: str) -> str:
        """The new ``lock_until`` that extend writes, given the SQL of "now + d"."""
        return until
