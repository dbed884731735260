"""What every SQL dialect of the database provider answers: how a vendor writes "now",
"now + d", an instant from epoch microseconds, an upsert, a keyset term. The vendors'
own answers live in ``postgresql``, ``mysql`` and ``sqlite`` beside this module, so a
reader of one vendor's path never reads another's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .cursors import plain

#: The parameters of the plain upsert, in order, by name (see ``Statements``).
UPSERT_SLOTS: tuple[str, ...] = ("name", "until", "now", "locked_by", "token")


@dataclass(frozen=True)
class Routines:
    """The calls of server-side routines that a migration creates (0007), where a
    vendor has them: each is one statement whose plans the server keeps per session,
    with no named client-side statement that a pooler could hand to another session."""

    #: Parameters [name, lock_at_most_for in microseconds, locked_by, token digest];
    #: returns the row as ``Statements.columns`` reads it (ours when granted).
    acquire: str
    #: Parameters [name, token digest, lock_at_least_until in epoch microseconds];
    #: returns one row whose one column is true (1) when the lock was released.
    unlock: str
    #: What the server answers when a routine is not there (the migration has not
    #: run): SQLSTATEs on PostgreSQL, error numbers on MySQL.
    missing: tuple[str | int, ...]


@dataclass(frozen=True)
class Upsert:
    """The pieces of the acquire upsert that every vendor shares, for a dialect to put
    together in its own shape (``Dialect.acquire``)."""

    #: ``INSERT INTO <target> (<fields>)``
    head: str
    #: The lock table as this statement names it (schema-qualified inside a routine).
    table: str
    #: The proposed row's values: the SQL of name, until, now, locked_by, token, fencing.
    values: tuple[str, ...]
    #: ``<on conflict clause> <assignments> RETURNING <columns>``
    conflict: str
    #: The SQL of "now" (for a dialect that first looks at the row).
    now: str
    #: The columns a read returns (``Statements.columns``).
    columns: str


class Dialect:
    """How one vendor writes the provider's SQL. Subclasses override what differs."""

    #: ``connection.vendor`` of the databases this dialect speaks to.
    vendor = ""
    #: Whether an ``UPDATE`` can return the row it wrote.
    update_returning: bool = True
    #: Whether an upsert can return the row as it ends up (``None``: ask the server).
    upsert_returning: bool | None = True
    #: Whether extend hands its new deadline back in the statement's own reply (the
    #: cursor's ``lastrowid``) rather than by ``RETURNING``.
    extend_carries_deadline = False
    #: Whether to try a plain ``UPDATE`` before the upsert for names last won here
    #: (see ``take_first``), where the server returns rows from both.
    takes_first = False
    #: Whether the taking ``UPDATE`` carries its grant in its reply instead of
    #: returning a row (see ``carried``).
    carries_take = False
    #: How the upsert names its table, so the conflict clause can tell the row that
    #: exists (``current``) from the one proposed (``proposed``).
    upsert_alias = " AS held"
    on_conflict_update = "ON CONFLICT (name) DO UPDATE SET"
    #: How a read takes a shared row lock (a fresh INSERT reads the fencing mark so,
    #: where ``purge_lock`` does not keep it current instead).
    share_lock = ""
    #: What a purge transaction runs first, where that, rather than the mark's row
    #: lock, keeps an INSERT from reading an old mark (see ``Retention``).
    purge_lock: str | None = None
    #: How a read takes an exclusive row lock (purge locks the rows it deletes).
    update_lock = ""
    #: The server-side routines of acquire and unlock (with the database's clock),
    #: where this vendor has them and they pay (see ``Routines``).
    routines: Routines | None = None
    #: Makes the DB-API cursor the provider keeps on a connection (see ``cursors``):
    #: by default the one ``connection.cursor()`` wraps.
    cursor = staticmethod(plain)

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

    def current(self, column: str) -> str:
        """In an upsert's conflict clause: ``column`` of the row that exists."""
        return f"held.{column}"

    def proposed(self, column: str) -> str:
        """In an upsert's conflict clause: ``column`` of the row the INSERT proposed."""
        return f"EXCLUDED.{column}"

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

    def acquire(self, upsert: Upsert) -> tuple[str, tuple[str, ...]]:
        """The one statement of acquire and the names of its parameters in order: by
        default the upsert as it is."""
        values = ", ".join(upsert.values)
        return f"{upsert.head} VALUES ({values}) {upsert.conflict}", UPSERT_SLOTS

    def extend_deadline(self, until: str) -> str:
        """The new ``lock_until`` that extend writes, given the SQL of "now + d"."""
        return until

    def missing_routine(self, err: BaseException) -> bool:
        """Whether the driver's error ``err`` says a routine of ``routines`` is not there."""
        return False

    def create_routines(self, cursor: Any) -> list[str]:
        """The statements that create (or replace) ``routines`` on the database that
        ``cursor`` reads (migration 0007); none where the vendor has none."""
        return []

    def drop_routines(self, cursor: Any) -> list[str]:
        """The statements that drop what ``create_routines`` made."""
        return []
