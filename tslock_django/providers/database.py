"""``DatabaseLockProvider``: ShedLock's table protocol on any Django database.

Acquire is one statement, granted or refused: an upsert that inserts the row of a new
name, or takes over the existing row only where it has expired, and returns the row as
it then is: ours when granted, the holder's when refused. Where the server cannot return
rows from an upsert (MySQL; SQLite before 3.35) acquire is ShedLock's own sequence
instead: a conditional ``UPDATE`` (take an expired row), an ``INSERT`` whose conflict
means "held", and a ``SELECT`` of the holder. On PostgreSQL the upsert runs only when the
statement's snapshot shows the row free, so a refusal there is a read that writes and
locks nothing. Unlock and extend are one statement each (MySQL's extend hands its new
deadline back through ``LAST_INSERT_ID``). Deadlines come from the database's clock by
default, so web nodes with skewed clocks still agree. Locking never deletes rows:
after release they keep the last holder and the fencing counter, which therefore
grows monotonically per name. ``purge()`` deletes rows expired longer than a retention
period, raising the high-water mark in ``tslock_fence`` to their fencing tokens in the
same transaction; a name inserted afresh starts from that mark, so its tokens still
grow across a purge.

A listing is one ``SELECT`` per page: a range on the primary key for a prefix, ``LIKE``
for a substring, the states as comparisons with "now", a keyset on ``(key, name)`` and
``LIMIT limit + 1``, never ``OFFSET``; the indexes of migration 0003 serve the current
locks and the time orders. When that page is not the whole answer, a second ``SELECT``
counts the records up to ``COUNT_CAP`` for ``LockPage.total``. Names compare in code
point order on every database (a binary collation; "C" on PostgreSQL, migration 0002).

Times cross the Python/SQL boundary as integer microseconds since the Unix epoch,
converted in SQL, never through Django's datetime adapters: those depend on
``USE_TZ``, ``TIME_ZONE`` and the connection's time zone, and a lock must mean the same
instant whatever a project sets there.

A lock written on a connection that is inside a transaction would stay invisible to
other processes until that transaction commits (and vanish on rollback), which
defeats the lock. The provider then uses a short-lived connection of its own, so the
lock is visible at once and survives the caller's rollback. SQLite allows one writer
at a time, so there that connection would wait for the caller's own transaction: the
provider refuses instead, with a message that says so.
"""

from __future__ import annotations

import functools
import logging
import secrets
import sqlite3
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..core.configuration import LockConfiguration
from ..core.provider import LockProvider, SimpleLock
from ..core.query import ALL_STATES, ListingSupport, LockQuery, StorePage, fold
from ..core.records import LockRecord, token_digest
from ..exceptions import InvalidCursor, LockProviderError
from .epoch import MAX_EPOCH_US, from_epoch_us, to_epoch_us
from .options import DATABASE, check_database_vendor

logger = logging.getLogger("tslock_django")

T = TypeVar("T")

TABLE = "tslock_lock"
FENCE_TABLE = "tslock_fence"
#: The most rows one purge transaction may delete (``batch_size``); a batch holds
#: row locks until it commits, so it should stay short.
MAX_PURGE_BATCH = 10_000
#: Names per statement within a batch: they are parameters, and SQLite before 3.32
#: takes at most 999 of those.
_NAMES_PER_STATEMENT = 900
#: Listings count their records (``LockPage.total``) up to this many; beyond it, a
#: count would read more rows than a page is worth, and the total is ``None``.
COUNT_CAP = 10_000
#: The character that escapes ``%``, ``_`` and itself in LIKE patterns: not a
#: backslash, which MySQL also reads as an escape inside string literals.
LIKE_ESCAPE = "!"
_MICRO = timedelta(microseconds=1)
_SQLITE_TIME = "'%%Y-%%m-%%d %%H:%%M:%%f'"
_MYSQL_EPOCH = "'1970-01-01 00:00:00'"


class _Dialect:
    """How one vendor writes "now", "now + d", an instant from epoch microseconds, and
    reads a column back as epoch microseconds."""

    #: Whether an ``UPDATE`` can return the row it wrote.
    update_returning: bool = True
    #: Whether an upsert can return the row as it ends up (``None``: ask the server).
    upsert_returning: bool | None = True
    #: The table as the upsert names it, so the conflict clause can tell the row that
    #: exists (``current``) from the one proposed (``proposed``).
    upsert_target = f"{TABLE} AS held"
    on_conflict_update = "ON CONFLICT (name) DO UPDATE SET"
    #: How a read takes a shared row lock (a fresh INSERT reads the fencing mark so,
    #: where ``purge_lock`` does not keep it current instead).
    share_lock = ""
    #: What a purge transaction runs first, where that, rather than the mark's row
    #: lock, keeps an INSERT from reading an old mark (see ``_purge_batch``).
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


class _PostgreSQL(_Dialect):
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


class _MySQL(_Dialect):
    # Columns are DATETIME(6) holding UTC wall time; UTC_TIMESTAMP ignores the session
    # time zone, and all arithmetic below is on UTC wall time.
    update_returning = False
    # MariaDB 10.5 and later return rows from an INSERT, an upsert too; MySQL never does.
    upsert_returning = None
    upsert_target = TABLE
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
        return self.plus(_MYSQL_EPOCH)

    def epoch_us(self, column: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, {_MYSQL_EPOCH}, {column})"

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


class _SQLite(_Dialect):
    # Text in UTC, as Django stores it; SQLite's clock has millisecond resolution.
    # RETURNING came with SQLite 3.35; Django 4.2 allows SQLite from 3.21.
    update_returning = upsert_returning = sqlite3.sqlite_version_info >= (3, 35)

    def now(self) -> str:
        return f"strftime({_SQLITE_TIME}, 'now')"

    def plus(self, base: str) -> str:
        # Only ever "now + d": a date modifier such as '+1.500000 seconds'.
        assert base == self.now()
        return f"strftime({_SQLITE_TIME}, 'now', printf('%%+.6f seconds', %s / 1e6))"

    def instant(self) -> str:
        return f"strftime({_SQLITE_TIME}, %s / 1e6, 'unixepoch')"

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


def _prepares(connection: BaseDatabaseWrapper, wanted: bool | None) -> bool:
    """Whether the provider's fixed statements run as server-side prepared statements
    on ``connection``: only PostgreSQL through psycopg 3 offers them (psycopg2, pymysql
    and mysqlclient do not; Python's sqlite3 keeps a statement cache of its own)."""
    if connection.vendor != "postgresql" or wanted is False:
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return False
    return wanted or connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold") is not None


#: psycopg prepares nothing on a connection whose ``prepare_threshold`` is ``None``
#: (Django's default), even when asked to. The provider's cursor sets a threshold that
#: no statement reaches for the length of its own call and puts ``None`` back after it,
#: so psycopg neither counts nor prepares anybody else's queries on that connection.
_ONLY_WHEN_ASKED = 2**62
#: The SQLSTATE of "prepared statement does not exist": the server dropped the
#: provider's statements behind psycopg's back (``DISCARD ALL``, ``DEALLOCATE`` by other
#: code, a pooler that changed the session).
_STATEMENT_GONE = "26000"


@functools.cache
def _preparing_cursor_class() -> type:
    """A psycopg 3 cursor that prepares every statement it executes."""
    import psycopg

    class PreparingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            raw = self.connection
            unset = raw.prepare_threshold is None
            if unset:
                raw.prepare_threshold = _ONLY_WHEN_ASKED
            try:
                return super().execute(query, params, **{**kwargs, "prepare": True})
            finally:
                if unset:
                    raw.prepare_threshold = None

    return PreparingCursor


def _prepared_cursor(conn: BaseDatabaseWrapper) -> Any:
    """A cursor on ``conn`` that runs its statements prepared: psycopg parses and plans
    each once per connection and afterwards sends only its parameters. Made as Django
    makes its own (a health check where ``CONN_HEALTH_CHECKS`` asks for one, the thread
    check) and wrapped like them, so database errors, ``execute_wrapper`` hooks and the
    query log see these statements like any other."""
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    conn.validate_thread_sharing()
    cursor = _preparing_cursor_class()(conn.connection)
    return conn.make_debug_cursor(cursor) if conn.queries_logged else conn.make_cursor(cursor)


def _statement_gone(err: BaseException) -> bool:
    """Whether ``err`` says a prepared statement no longer exists on the server."""
    return getattr(err.__cause__, "sqlstate", None) == _STATEMENT_GONE


_DIALECTS: dict[str, type[_Dialect]] = {"postgresql": _PostgreSQL, "mysql": _MySQL, "sqlite": _SQLite}


def _unmatchable(text: str) -> bool:
    """Whether ``text`` holds a character no lock name can: a control character
    (refused by ``LockConfiguration``) or a lone surrogate (not encodable as UTF-8).
    Such a prefix or search matches nothing, and PostgreSQL would refuse NUL outright."""
    return any(ord(c) < 0x20 or c == "\x7f" or 0xD800 <= ord(c) <= 0xDFFF for c in text)


def _prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code point
    order: the prefix with its last character raised by one (characters that cannot be
    raised, U+10FFFF, are dropped first), or ``None`` when nothing is above them all.
    ``name >= prefix AND name < end`` then selects exactly the names with that prefix."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            raised = 0xE000 if last + 1 == 0xD800 else last + 1  # surrogates are no characters
            return "".join(chars) + chr(raised)
    return None


def _like_containing(folded: str) -> str:
    """A LIKE pattern (escape character ``LIKE_ESCAPE``) matching names that contain
    ``folded`` literally: ``%``, ``_`` and the escape character stand for themselves."""
    escaped = "".join(LIKE_ESCAPE + c if c in ("%", "_", LIKE_ESCAPE) else c for c in folded)
    return f"%{escaped}%"


def _state_filter(states: frozenset[str], now: str, dialect: _Dialect) -> str | None:
    """The WHERE condition of ``states`` given the SQL of "now", using "now" once (so
    at most one parameter), or ``None`` when every state is wanted. A released record
    has an empty token; the time decides whether it is still kept."""
    if states >= ALL_STATES:
        return None
    if "expired" not in states:
        current = dialect.few(f"lock_until > {now}")
        if states == {"held"}:
            return f"{current} AND token <> ''"
        if states == {"at_least"}:
            return f"{current} AND token = ''"
        return current
    if states == {"expired"}:
        return f"lock_until <= {now}"
    # expired and one of the current states: an expired row satisfies either.
    return f"(lock_until <= {now} OR token {'<>' if 'held' in states else '='} '')"


@dataclass(frozen=True)
class _Statements:
    """Every statement the provider runs, written once per provider: the text depends
    only on the vendor and on whose clock decides. Where "now" is the caller's clock it
    is a parameter, and the parameter lists below follow the placeholders in order."""

    acquire: str
    #: The parameters of ``acquire`` in order, by name (see ``_acquire_on``).
    acquire_slots: tuple[str, ...]
    acquire_update: str
    acquire_insert: str
    read_back: str
    read: str
    unlock: str
    extend: str
    extend_read_back: str
    force_unlock: str
    columns: str

    @classmethod
    def build(cls, dialect: _Dialect, use_db_time: bool) -> _Statements:
        epoch = dialect.epoch_us
        now = dialect.now() if use_db_time else dialect.instant()
        until = dialect.plus(dialect.now()) if use_db_time else dialect.instant()
        instant = dialect.instant()
        columns = f"name, {epoch('lock_until')}, {epoch('locked_at')}, locked_by, token, fencing_token"
        taken = f"{epoch('locked_at')}, {epoch('lock_until')}, fencing_token"
        returning = f" RETURNING {taken}" if dialect.update_returning else ""
        # A name new to the table starts above every fencing token purge() deleted. The
        # mark must be the one a concurrent purge commits, not an older one in this
        # statement's snapshot: on MySQL the read takes a shared lock, which waits for
        # the purge that holds the mark's row from before it deletes a row until it
        # commits the raised mark; PostgreSQL's acquire waits for the purge's table
        # lock before taking its snapshot (_PostgreSQL.purge_lock); SQLite has one
        # writer at a time. No row (a `manage.py flush` empties both tables) means
        # nothing was purged since.
        mark = f"(SELECT mark FROM {FENCE_TABLE} WHERE id = 1{dialect.share_lock})"
        first_token = f"COALESCE({mark}, 0) + 1"
        fields = "name, lock_until, locked_at, locked_by, token, fencing_token"
        values = f"VALUES (%s, {until}, {now}, %s, %s, {first_token})"
        # The upsert: a new name is inserted; an existing row is taken over only where
        # it has expired by the "now" this statement proposed (its locked_at), and is
        # otherwise written back as it is, so RETURNING always gives the row as it now
        # stands (ours, or the holder's, read under the row lock: never an older
        # version). lock_until is assigned last: MySQL evaluates the assignments in
        # order and would see its new value in the conditions after it.
        current, proposed = dialect.current, dialect.proposed
        expired = f"{current('lock_until')} <= {proposed('locked_at')}"
        takeover = {
            "fencing_token": f"{current('fencing_token')} + 1",
            "locked_at": proposed("locked_at"),
            "locked_by": proposed("locked_by"),
            "token": proposed("token"),
            "lock_until": proposed("lock_until"),
        }
        assignments = ", ".join(
            f"{column} = CASE WHEN {expired} THEN {value} ELSE {current(column)} END"
            for column, value in takeover.items()
        )
        acquire_slots: tuple[str, ...] = ("name", "until", "now", "locked_by", "token")
        upsert = (
            f"INSERT INTO {dialect.upsert_target} ({fields}) {values} "
            f"{dialect.on_conflict_update} {assignments} RETURNING {columns}"
        )
        if isinstance(dialect, _PostgreSQL):
            # A refusal that writes back the holder's row costs a row lock, a WAL record
            # and a flushed commit, and queues behind the holder's unlock; with many
            # processes on one name that is most of the traffic. So first look at the
            # row as this statement's snapshot has it: if it is held there, that row is
            # the answer and nothing is written. Only a row that looks free (or none)
            # goes on to the upsert, which settles any race under the row lock.
            upsert = (
                f"WITH taken AS (INSERT INTO {dialect.upsert_target} ({fields}) "
                f"SELECT %s, {until}, {now}, %s, %s, {first_token} "
                f"WHERE NOT EXISTS (SELECT FROM {TABLE} WHERE name = %s AND lock_until > {now}) "
                f"{dialect.on_conflict_update} {assignments} RETURNING {columns}) "
                f"SELECT * FROM taken UNION ALL "
                f"SELECT {columns} FROM {TABLE} WHERE name = %s AND NOT EXISTS (SELECT FROM taken)"
            )
            acquire_slots += ("name", "now", "name")
        insert = f"INSERT INTO {TABLE} ({fields}) {values}"
        if dialect.update_returning:
            insert += " ON CONFLICT (name) DO NOTHING" + returning
        deadline = until
        if isinstance(dialect, _MySQL):
            # No UPDATE ... RETURNING: LAST_INSERT_ID(expr) hands the new deadline (in
            # epoch microseconds) back in the statement's own reply (the cursor's
            # lastrowid), so extend needs no second statement to read it.
            deadline = f"TIMESTAMPADD(MICROSECOND, LAST_INSERT_ID({epoch(until)}), {_MYSQL_EPOCH})"
        extend = (
            f"UPDATE {TABLE} SET lock_until = {deadline} "
            f"WHERE name = %s AND token = %s AND lock_until > {now}"
        )
        if dialect.update_returning:
            extend += f" RETURNING {epoch('lock_until')}"
        return cls(
            # [acquire_slots]; returns `columns`
            acquire=upsert,
            acquire_slots=acquire_slots,
            # [until, now, locked_by, token, name, now]
            acquire_update=(
                f"UPDATE {TABLE} SET lock_until = {until}, locked_at = {now}, locked_by = %s, token = %s, "
                f"fencing_token = fencing_token + 1 WHERE name = %s AND lock_until <= {now}{returning}"
            ),
            # [name, until, now, locked_by, token]
            acquire_insert=insert,
            # [name, token]: where an UPDATE returns nothing
            read_back=f"SELECT {taken} FROM {TABLE} WHERE name = %s AND token = %s",
            # [name]
            read=f"SELECT {columns} FROM {TABLE} WHERE name = %s",
            # [at_least, now, name, token, now]
            unlock=(
                f"UPDATE {TABLE} SET lock_until = {dialect.later(instant, now)}, token = '' "
                f"WHERE name = %s AND token = %s AND lock_until > {now}"
            ),
            # [until, name, token, now]
            extend=extend,
            # [name, token]: SQLite before 3.35
            extend_read_back=f"SELECT {epoch('lock_until')} FROM {TABLE} WHERE name = %s AND token = %s",
            # [now, name, now] + [fencing token or token]
            force_unlock=(
                f"UPDATE {TABLE} SET lock_until = {now}, token = '' WHERE name = %s AND lock_until > {now}"
            ),
            columns=columns,
        )


class DatabaseLockProvider(LockProvider):
    """Locks in the ``tslock_lock`` table of a Django database (PostgreSQL,
    MySQL/MariaDB or SQLite).

    OPTIONS:
        using: the database alias (default ``"default"``).
        use_db_time: decide expiry on the database's clock (default ``True``); with
            ``False`` the provider's ``ClockProvider`` decides (tests with a
            ``MutableClock``).
        prepared_statements: on PostgreSQL with psycopg 3, run acquire, unlock, extend
            and force release as server-side prepared statements, parsed and planned
            once per connection (on other databases and drivers it changes nothing).
            ``None`` (the default) follows the database: on when its ``OPTIONS`` set
            psycopg's ``prepare_threshold``, as Django's documentation has you do where
            prepared statements are safe, off otherwise. ``True`` or ``False`` decides
            for the provider alone. Leave it off behind a transaction-pooling PgBouncer
            older than 1.21, which hands one session's prepared statements to another.
    """

    guarantee: ClassVar = "strong"
    default_options: ClassVar = DATABASE.defaults
    max_key_bytes: ClassVar[int] = 255
    listing: ClassVar[ListingSupport] = ListingSupport(total=True)

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, **kwargs)
        # The checks live in providers.options, where the system checks run them too.
        self.options = DATABASE.check(alias, self.options)
        self.using = self.options["using"]
        connection = connections[self.using]
        self.vendor = vendor = connection.vendor
        check_database_vendor(alias, self.using, vendor)
        #: Whether the fixed statements run prepared (see the option).
        self.prepares = _prepares(connection, self.options["prepared_statements"])
        self.use_db_time = self.options["use_db_time"]
        self._dialect = _DIALECTS[vendor]()
        self._sql = _Statements.build(self._dialect, self.use_db_time)
        # Whether acquire is the one upsert (see _upsert_returns; None: not known yet).
        self._upsert_returning = self._dialect.upsert_returning
        # The SQL of "now" in reads; its parameter (if any) comes from _now().
        self._now_sql = self._dialect.now() if self.use_db_time else self._dialect.instant()

    # -- parameters for "now" ---------------------------------------------------------

    def _now(self) -> list[Any]:
        """The parameter of "now": none on the database's clock, else the caller's."""
        return [] if self.use_db_time else [to_epoch_us(self.clock.now())]

    def _until(self, delta: timedelta) -> list[Any]:
        """The parameter of "now + delta"."""
        if self.use_db_time:
            return [delta // _MICRO]
        return [to_epoch_us(self.clock.now() + delta)]

    # -- connections ---------------------------------------------------------------

    def _on_connection(self, what: str, operation: Callable[[BaseDatabaseWrapper], T]) -> T:
        """Run an operation that writes: on the caller's connection when it commits each
        statement at once; otherwise on a connection of our own for this one operation
        (closed afterwards, so it never outlives the operation)."""
        shared = connections[self.using]
        try:
            # get_autocommit() connects: an unreachable server fails here.
            direct = not shared.in_atomic_block and shared.get_autocommit()
        except DatabaseError as err:
            shared.close_if_unusable_or_obsolete()
            raise self._failure(what, err) from err
        if direct:
            return operation(shared)
        if self.vendor == "sqlite":
            raise LockProviderError(
                f"{what}: database {self.using!r} is SQLite, which allows one writer at a time, and "
                "this call runs inside a transaction (transaction.atomic() or autocommit off), so a "
                "lock would wait for that transaction; take the lock outside the transaction",
                alias=self.alias,
            )
        private = type(shared)(dict(shared.settings_dict), alias=self.using)
        try:
            return operation(private)
        finally:
            try:
                private.close()
            except DatabaseError as err:  # the answer is already in hand; only log this
                logger.warning("closing a private connection to %r failed: %s", self.using, err)

    def _run(
        self,
        conn: BaseDatabaseWrapper,
        what: str,
        sql: str,
        params: list[Any],
        *,
        fetch: bool = False,
        carried: bool = False,
        conflict_means_held: bool = False,
        prepared: bool = False,
    ) -> tuple[int, list[Any]]:
        """Execute one statement on ``conn``; returns (rowcount, rows), rows only when
        ``fetch`` (the statement returns some: we say so rather than ask the cursor,
        whose ``description`` psycopg builds anew on every access) or ``carried`` (on
        MySQL: one row of the value the statement set with ``LAST_INSERT_ID(expr)``,
        which comes back in the statement's own reply).

        ``prepared`` marks the provider's fixed statements (acquire, unlock, extend,
        force release): where the provider prepares (``self.prepares``) they run as
        prepared statements on the caller's connection. Never on a connection of our
        own: it serves one operation, and a statement's first run there would cost a
        second round trip to prepare it.

        Every database error becomes a ``LockProviderError``, except a unique violation
        of an INSERT (``conflict_means_held``), which is re-raised for the caller.
        """
        prepared = prepared and self.prepares and conn is connections[self.using]

        def run() -> tuple[int, list[Any]]:
            with _prepared_cursor(conn) if prepared else conn.cursor() as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall() if fetch else [(cursor.lastrowid,)] if carried else []
                return cursor.rowcount, rows

        try:
            try:
                return run()
            except DatabaseError as err:
                if not (prepared and _statement_gone(err)):
                    raise
                # The statement was refused before it ran (nothing was written), and
                # psycopg still believes it prepared: start a new session, which prepares
                # afresh. The shared connection is outside any transaction here (see
                # _on_connection), so closing it loses nothing of the caller's.
                logger.warning(
                    "database %r no longer had tslock's prepared statements (DISCARD ALL or a "
                    "connection pooler?); reconnecting to prepare them again",
                    self.using,
                )
                conn.close()
                return run()
        except DatabaseError as err:
            if conflict_means_held and isinstance(err, IntegrityError):
                raise
            # A killed connection stays broken until closed; close it so the next call
            # reconnects instead of failing forever in a long-running process. Never
            # inside the caller's transaction: that would end their transaction too.
            if not conn.in_atomic_block:
                conn.close_if_unusable_or_obsolete()
            raise self._failure(what, err) from err

    def _time(self, value: Any) -> datetime:
        """A time column read as epoch microseconds; an unreadable one (NULL, or past
        year 9999, which PostgreSQL can store) is a malformed row, not a crash."""
        try:
            return from_epoch_us(int(value))
        except (TypeError, ValueError) as err:
            raise LockProviderError(
                f"a row of {TABLE} holds an unreadable time ({value!r})", alias=self.alias
            ) from err

    def _failure(self, what: str, err: BaseException) -> LockProviderError:
        return LockProviderError(
            f"{what}: database {self.using!r} failed ({type(err).__name__}: {err})", alias=self.alias
        )

    # -- the protocol -----------------------------------------------------------------

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        what = f"acquire {config.name!r}"
        return self._on_connection(what, lambda conn: self._acquire_on(conn, what, config))

    def _acquire_on(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration
    ) -> SimpleLock | LockRecord:
        name, token = config.name, secrets.token_hex(16)
        # The table keeps the token's digest only: a SQL log line or a dump of the table
        # is then no key to this holding, and hex digests compare exactly on every
        # database (MariaDB's default collation would fold the case of raw tokens).
        digest = token_digest(token)
        if self._upsert_returns(conn):
            values = {
                "name": [name],
                "until": self._until(config.lock_at_most_for),
                "now": self._now(),
                "locked_by": [self.locked_by],
                "token": [digest],
            }
            params = [value for slot in self._sql.acquire_slots for value in values[slot]]
            rows = self._run(conn, what, self._sql.acquire, params, fetch=True, prepared=True)[1]
            if not rows:
                # An upsert always ends with a row; none is a store that misbehaves,
                # never "held".
                raise LockProviderError(f"{what}: the upsert returned no row", alias=self.alias)
            row = rows[0]
            if row[4] != digest:  # the row as the holder left it
                return self._record(row)
            lock_until, locked_at, fencing = row[1], row[2], row[5]
        else:
            taken = self._acquire_in_steps(conn, what, config, digest)
            if isinstance(taken, LockRecord):
                return taken
            locked_at, lock_until, fencing = taken
        record = LockRecord(
            name=name,
            lock_until=self._time(lock_until),
            locked_at=self._time(locked_at),
            locked_by=self.locked_by,
            token=token,
            fencing_token=int(fencing),
            provider=self.alias,
        )
        return self.handle(record, config)

    def _upsert_returns(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether this server returns the row of an upsert, so that acquire is one
        statement. On MySQL and MariaDB that takes the server's version, known once
        connected; it is asked once per provider."""
        able = self._upsert_returning
        if able is None:
            server: Any = conn
            able = bool(server.mysql_is_mariadb and server.mysql_version >= (10, 5))
            self._upsert_returning = able
        return able

    def _acquire_in_steps(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration, digest: str
    ) -> tuple[Any, Any, Any] | LockRecord:
        """ShedLock's acquire, for servers that cannot return an upsert's row: take an
        expired row, else insert the row of a new name, else read the holder. Returns
        ``(locked_at, lock_until, fencing_token)`` when granted, else the holder."""
        name, sql = config.name, self._sql
        now = self._now()
        params = [*self._until(config.lock_at_most_for), *now, self.locked_by, digest, name, *now]
        returning = self._dialect.update_returning
        count, rows = self._run(conn, what, sql.acquire_update, params, fetch=returning)
        if count != 1:
            params = [name, *self._until(config.lock_at_most_for), *self._now(), self.locked_by, digest]
            try:
                count, rows = self._run(
                    conn, what, sql.acquire_insert, params, fetch=returning, conflict_means_held=True
                )
            except IntegrityError:
                count = 0
            if count != 1:
                holder = self._read(conn, name, what)
                if holder is None:
                    # Neither updated nor inserted, yet no row: not "held" but a store
                    # that misbehaves; never report that as held.
                    raise LockProviderError(
                        f"{what}: the row could neither be taken nor created", alias=self.alias
                    )
                return holder
        if not rows:
            rows = self._run(conn, what, sql.read_back, [name, digest], fetch=True)[1]
            if not rows:
                raise LockProviderError(f"{what}: the row written could not be read back", alias=self.alias)
        locked_at, lock_until, fencing = rows[0]
        return locked_at, lock_until, fencing

    def _read(self, conn: BaseDatabaseWrapper, name: str, what: str) -> LockRecord | None:
        rows = self._run(conn, what, self._sql.read, [name], fetch=True)[1]
        return self._record(rows[0]) if rows else None

    def _record(self, row: tuple[Any, ...]) -> LockRecord:
        name, lock_until, locked_at, locked_by, digest, fencing = row
        return LockRecord(
            name=name,
            lock_until=self._time(lock_until),
            locked_at=self._time(locked_at),
            locked_by=locked_by,
            fencing_token=int(fencing),
            provider=self.alias,
            released=not digest,
            # fingerprint(token) is the digest's first 8 hex digits: the same as other stores show.
            token_fingerprint=digest[:8] if digest else "",
        )

    def _unlock(self, held: SimpleLock) -> bool:
        # The at-least deadline came from this database's clock (locked_at, or the
        # extension's "now", plus lock_at_least_for), so it is compared with that clock.
        what = f"unlock {held.name!r}"
        at_least, now = to_epoch_us(held.lock_at_least_until), self._now()
        params = [at_least, *now, held.name, token_digest(held.token), *now]
        return self._on_connection(
            what, lambda conn: self._run(conn, what, self._sql.unlock, params, prepared=True)[0] == 1
        )

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        what = f"extend {held.name!r}"
        digest = token_digest(held.token)
        params = [*self._until(config.lock_at_most_for), held.name, digest, *self._now()]

        returning = self._dialect.update_returning
        carried = self.vendor == "mysql"

        def extend(conn: BaseDatabaseWrapper) -> list[Any] | None:
            count, rows = self._run(
                conn, what, self._sql.extend, params, fetch=returning, carried=carried, prepared=True
            )
            if count != 1:
                return None
            if rows:
                return rows
            read_back = self._sql.extend_read_back
            return self._run(conn, what, read_back, [held.name, digest], fetch=True)[1] or None

        rows = self._on_connection(what, extend)
        if rows is None:
            return None
        lock_until = self._time(rows[0][0])
        # The store's "now" of the extension, recovered from the deadline it wrote.
        extended_at = lock_until - config.lock_at_most_for
        record = LockRecord(
            name=held.name,
            lock_until=lock_until,
            locked_at=held.record.locked_at,
            locked_by=held.record.locked_by,
            token=held.token,
            fencing_token=held.fencing_token,
            provider=self.alias,
        )
        return self.handle(record, config, lock_at_least_until=extended_at + config.lock_at_least_for)

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        what = f"force-release {name!r}"
        now = self._now()
        sql, params = self._sql.force_unlock, [*now, name, *now]
        if isinstance(expected, int):
            sql, params = sql + " AND fencing_token = %s", [*params, expected]
        elif isinstance(expected, str):
            sql, params = sql + " AND token = %s", [*params, token_digest(expected)]
        return self._on_connection(
            what, lambda conn: self._run(conn, what, sql, params, prepared=True)[0] == 1
        )

    # -- listing --------------------------------------------------------------------

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        if _unmatchable(query.prefix) or _unmatchable(query.search):
            return StorePage(records=[], more=False, total=0)
        what = "list locks"
        sql, params = self._page_statement(query, after)

        def read(conn: BaseDatabaseWrapper) -> tuple[list[Any], int | None]:
            rows = self._run(conn, what, sql, params, fetch=True)[1]
            if after is None and len(rows) <= query.limit:
                return rows, len(rows)  # the whole answer is in hand
            count = self._count_statement(query)
            if count is None:
                return rows, None
            counted = int(self._run(conn, what, *count, fetch=True)[1][0][0])
            return rows, counted if counted <= COUNT_CAP else None

        rows, total = self._reading(what, read)
        records = [self._record(row) for row in rows[: query.limit]]
        return StorePage(records=records, more=len(rows) > query.limit, total=total)

    def _count_statement(self, query: LockQuery) -> tuple[str, list[Any]] | None:
        """A count of ``query``'s records that reads at most ``COUNT_CAP + 1`` of
        them (a larger answer is no total), or ``None`` where even that could read
        the whole table: a search over expired records, which no index narrows
        (expired names are nearly all of a large table)."""
        if query.search and "expired" in query.states:
            return None
        where, params = self._filters(query)
        matching = f"SELECT 1 FROM {TABLE}" + (" WHERE " + " AND ".join(where) if where else "")
        return f"SELECT COUNT(*) FROM ({matching} LIMIT {COUNT_CAP + 1}) AS matching", params

    def _page_statement(self, query: LockQuery, after: object | None) -> tuple[str, list[Any]]:
        """The one SELECT of a page: ``query``'s filters, the keyset after ``after``,
        its order and ``LIMIT limit + 1`` (the extra row says whether there is more)."""
        where, params = self._filters(query)
        descending = query.descending
        beyond = "<" if descending else ">"
        column = query.order  # "name", "lock_until" or "locked_at": column names
        if after is not None:
            key, name = query.keyset(after)
            if isinstance(key, str):  # order by name: the key is the name
                where.append(f"name {beyond} %s")
                params.append(name)
            else:
                if not 0 <= key <= MAX_EPOCH_US:
                    raise InvalidCursor(
                        "the listing cursor holds no valid time; start again from the first page"
                    )
                term, times = self._dialect.beyond(column, beyond)
                where.append(term)
                params += [key] * times + [name]
        direction = " DESC" if descending else ""
        keys = f"name{direction}" if column == "name" else f"{column}{direction}, name{direction}"
        sql = f"SELECT {self._sql.columns} FROM {TABLE}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return f"{sql} ORDER BY {keys} LIMIT {query.limit + 1}", params

    def _filters(self, query: LockQuery) -> tuple[list[str], list[Any]]:
        """The WHERE terms (and their parameters, in order) of ``query``'s prefix,
        search and states."""
        where: list[str] = []
        params: list[Any] = []
        if query.prefix:
            # A range on the primary key, not LIKE: exact, and an index range scan.
            where.append("name >= %s")
            params.append(query.prefix)
            end = _prefix_end(query.prefix)
            if end is not None:
                where.append("name < %s")
                params.append(end)
        if query.search:
            folded = fold(query.search)
            letters = "".join(sorted(set(folded) & set(string.ascii_lowercase)))
            where.append(f"{self._dialect.fold('name', letters)} LIKE %s ESCAPE '{LIKE_ESCAPE}'")
            params.append(_like_containing(folded))
        states = _state_filter(query.states, self._now_sql, self._dialect)
        if states is not None:
            where.append(states)
            params += self._now()
        return where, params

    def _reading(self, what: str, operation: Callable[[BaseDatabaseWrapper], T]) -> T:
        """Run a read on the caller's connection. Reading needs no connection of its
        own: inside the caller's transaction it sees what was committed (on MySQL, as
        of the transaction's snapshot), which is what a listing (the admin page under
        ATOMIC_REQUESTS) may show."""
        shared = connections[self.using]
        inside = False
        try:
            # Inside a transaction (atomic, or autocommit off), a savepoint keeps a
            # failed SELECT from poisoning it (PostgreSQL aborts the whole transaction
            # on any error).
            inside = shared.in_atomic_block or not shared.get_autocommit()
            with transaction.atomic(using=self.using) if inside else nullcontext():
                return operation(shared)
        except DatabaseError as err:  # connecting, or the savepoint's own statements
            if not inside:  # never close a connection in the middle of the caller's transaction
                shared.close_if_unusable_or_obsolete()
            raise self._failure(what, err) from err

    # -- retention ------------------------------------------------------------------

    def purge(self, expired_for: timedelta, *, dry_run: bool = False, batch_size: int = 500) -> int:
        """Delete the rows whose ``lock_until`` is at least ``expired_for`` in the past.

        "Now" is the database's clock (the provider's clock with ``use_db_time=False``),
        read once at the start. Rows go in batches of ``batch_size``, each its own short
        transaction: the batch's names are selected first, then deleted only if they
        are still expired that long (a lock taken meanwhile stays). Held locks and
        locks in their ``lock_at_least_for`` are never deleted. In the same transaction
        the highest fencing token deleted raises the mark in ``tslock_fence`` that a
        newly inserted name starts above, so a purged name locked again gets a higher
        fencing token than any it had.

        Args:
            expired_for: how long a record must have been expired (``timedelta(0)``:
                every expired record).
            dry_run: count what would be deleted; change nothing.
            batch_size: rows per transaction, 1 to ``MAX_PURGE_BATCH``.

        Returns:
            How many rows were deleted (with ``dry_run``: would be).

        Raises:
            ValueError: ``expired_for`` is not a timedelta of zero or more, or
                ``batch_size`` is out of range.
            LockProviderError: the database failed; the batches before committed.
        """
        if not isinstance(expired_for, timedelta) or expired_for < timedelta(0):
            raise ValueError(
                "expired_for must be a timedelta of zero or more: how long a lock must have been "
                f"expired to be deleted, e.g. timedelta(days=30); got {expired_for!r}"
            )
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or not 1 <= batch_size <= MAX_PURGE_BATCH
        ):
            raise ValueError(
                f"batch_size must be a whole number from 1 to {MAX_PURGE_BATCH}, got {batch_size!r}"
            )
        what = "purge expired locks"
        if dry_run:
            return self._reading(what, lambda conn: self._purge_count(conn, what, expired_for))
        return self._on_connection(what, lambda conn: self._purge_on(conn, what, expired_for, batch_size))

    def _purge_cutoff(self, conn: BaseDatabaseWrapper, what: str, expired_for: timedelta) -> int | None:
        """Epoch microseconds: rows with ``lock_until`` at or before it are purged;
        ``None`` when nothing can be that old (before 1970)."""
        if self.use_db_time:
            sql = f"SELECT {self._dialect.epoch_us(self._dialect.now())}"
            now = int(self._run(conn, what, sql, [], fetch=True)[1][0][0])
        else:
            now = to_epoch_us(self.clock.now())
        cutoff = now - expired_for // _MICRO
        return cutoff if cutoff >= 0 else None

    def _purge_count(self, conn: BaseDatabaseWrapper, what: str, expired_for: timedelta) -> int:
        cutoff = self._purge_cutoff(conn, what, expired_for)
        if cutoff is None:
            return 0
        sql = f"SELECT COUNT(*) FROM {TABLE} WHERE lock_until <= {self._dialect.instant()}"
        return int(self._run(conn, what, sql, [cutoff], fetch=True)[1][0][0])

    def _purge_on(self, conn: BaseDatabaseWrapper, what: str, expired_for: timedelta, batch_size: int) -> int:
        cutoff = self._purge_cutoff(conn, what, expired_for)
        deleted = 0
        while cutoff is not None:
            names = self._purge_candidates(conn, what, cutoff, batch_size)
            if names:
                deleted += self._purge_batch(conn, what, names, cutoff)
            if len(names) < batch_size:
                # The cutoff is fixed and times only move forward, so no row can
                # become old enough after this last, short batch.
                break
        return deleted

    def _purge_candidates(self, conn: BaseDatabaseWrapper, what: str, cutoff: int, limit: int) -> list[str]:
        """The names of up to ``limit`` rows expired at ``cutoff``, oldest first (an
        index range; no lock taken)."""
        sql = (
            f"SELECT name FROM {TABLE} WHERE lock_until <= {self._dialect.instant()} "
            f"ORDER BY lock_until, name LIMIT {limit}"
        )
        return [row[0] for row in self._run(conn, what, sql, [cutoff], fetch=True)[1]]

    def _purge_batch(self, conn: BaseDatabaseWrapper, what: str, names: list[str], cutoff: int) -> int:
        """Delete those of ``names`` still expired at ``cutoff``, in one transaction that
        first raises the fencing mark to their highest token; returns how many."""
        expired = f"lock_until <= {self._dialect.instant()}"

        def each_part(
            statement: Callable[[str], str], of: list[str], *, fetch: bool = False
        ) -> tuple[int, list[Any]]:
            """Run ``statement(placeholders)`` over ``of`` in parts: the names are
            parameters, and SQLite before 3.32 takes at most 999 of those."""
            count, rows = 0, list[Any]()
            for start in range(0, len(of), _NAMES_PER_STATEMENT):
                part = of[start : start + _NAMES_PER_STATEMENT]
                sql = statement(", ".join(["%s"] * len(part)))
                done = self._run(conn, what, sql, [*part, cutoff], fetch=fetch)
                count += done[0]
                rows.extend(done[1])
            return count, rows

        with self._transaction(conn, what):
            if self._dialect.purge_lock:
                # PostgreSQL: acquire, unlock and extend wait until this batch commits,
                # and an acquire that was running has committed before this returns.
                self._run(conn, what, self._dialect.purge_lock, [])
            # The mark's row next: while this transaction holds it, a fresh INSERT on
            # MySQL (which reads the mark with a shared lock) waits, so it cannot take
            # a token from the mark before the rows below are gone and the mark raised.
            # On SQLite this first write also takes the database's write lock.
            take_mark = f"UPDATE {FENCE_TABLE} SET mark = mark WHERE id = 1"
            if self._run(conn, what, take_mark, [])[0] != 1:
                # Migration 0004 writes the row, but `manage.py flush` (and every
                # transactional test) empties the table. Fresh names then start from 1,
                # right for a lock table emptied too, and the first purge puts it back.
                self._run(conn, what, self._dialect.insert_if_missing(FENCE_TABLE, "id, mark", "1, 0"), [])
                self._run(conn, what, take_mark, [])
            # Lock the rows and check the condition again: a lock taken since the names
            # were chosen is no longer expired and stays.
            lock = self._dialect.update_lock
            rows = each_part(
                lambda some: (
                    f"SELECT name, fencing_token FROM {TABLE} WHERE name IN ({some}) AND {expired}{lock}"
                ),
                names,
                fetch=True,
            )[1]
            if not rows:
                return 0
            top = max(int(row[1]) for row in rows)
            self._run(
                conn, what, f"UPDATE {FENCE_TABLE} SET mark = %s WHERE id = 1 AND mark < %s", [top, top]
            )
            doomed = [row[0] for row in rows]
            return each_part(
                lambda some: f"DELETE FROM {TABLE} WHERE name IN ({some}) AND {expired}", doomed
            )[0]

    @contextmanager
    def _transaction(self, conn: BaseDatabaseWrapper, what: str) -> Iterator[None]:
        """One transaction on ``conn``, which is in autocommit mode and outside any
        ``atomic`` block (the caller's connection then, or one of our own)."""
        try:
            conn.set_autocommit(False)
            try:
                yield
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        except DatabaseError as err:
            raise self._failure(what, err) from err
        finally:
            try:
                conn.set_autocommit(True)
            except DatabaseError:
                conn.close()  # the next use reconnects in autocommit mode
