"""``DatabaseLockProvider``: the lock protocol on one Django database connection.

The statements come from ``Statements`` (written once per provider from the vendor's
dialect); this module runs them through Django's ``connection.cursor()``: on which
connection, and how a database error becomes a ``LockProviderError``. See the package's
docstring for the protocol itself.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ...core.configuration import LockConfiguration
from ...core.provider import LockProvider, SimpleLock
from ...core.query import ListingSupport, LockQuery, StorePage
from ...core.records import LockRecord, token_digest
from ...exceptions import LockProviderError
from ..epoch import from_epoch_us, to_epoch_us
from ..store_options import DATABASE, check_database_vendor
from . import tables
from .dialect import Dialect
from .listing import PageStatements, unmatchable
from .mysql import MySQL
from .postgresql import PostgreSQL
from .retention import Retention
from .sqlite import SQLite
from .statements import Statements
from .tables import TABLE

logger = logging.getLogger("tslock_django")

T = TypeVar("T")

_MICRO = timedelta(microseconds=1)
#: The dialect of each ``connection.vendor`` the provider speaks to.
DIALECTS: dict[str, type[Dialect]] = {d.vendor: d for d in (PostgreSQL, MySQL, SQLite)}


class DatabaseLockProvider(LockProvider):
    """Locks in the ``tslock_lock`` table of a Django database (PostgreSQL,
    MySQL/MariaDB or SQLite).

    OPTIONS:
        using: the database alias (default ``"default"``).
        use_db_time: decide expiry on the database's clock (default ``True``); with
            ``False`` the provider's ``ClockProvider`` decides (tests with a
            ``MutableClock``).
    """

    guarantee: ClassVar = "strong"
    default_options: ClassVar = DATABASE.defaults
    max_key_bytes: ClassVar[int] = 255
    listing: ClassVar[ListingSupport] = ListingSupport(total=True)

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, **kwargs)
        # The checks live in providers.store_options, where the system checks run them too.
        self.options = DATABASE.check(alias, self.options)
        self.using = self.options["using"]
        connection = connections[self.using]
        self.vendor = vendor = connection.vendor
        check_database_vendor(alias, self.using, vendor)
        self.use_db_time = self.options["use_db_time"]
        self._dialect = DIALECTS[vendor]()
        self._sql = Statements.build(self._dialect, self.use_db_time)
        # Whether acquire is the one statement (None: ask the server, see _one_statement).
        self._single = self._dialect.one_statement
        # The SQL of "now" in reads; its parameter (if any) comes from _now().
        now_sql = self._dialect.now() if self.use_db_time else self._dialect.instant()
        self._pages = PageStatements(self._dialect, now_sql, self._sql.columns)
        self._retention = Retention(self)

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

    def _on_connection(self, what: str, operation: Callable[..., T], *args: Any) -> T:
        """Run an operation that writes, ``operation(conn, what, *args)``: on the caller's
        connection when it commits each statement at once; otherwise on a connection of
        our own for this one operation (closed afterwards, so it never outlives the
        operation)."""
        shared = connections[self.using]
        try:
            # get_autocommit() connects: an unreachable server fails here.
            direct = not shared.in_atomic_block and shared.get_autocommit()
        except DatabaseError as err:
            shared.close_if_unusable_or_obsolete()
            raise self._failure(what, err) from err
        if direct:
            return operation(shared, what, *args)
        if self.vendor == "sqlite":
            raise LockProviderError(
                f"{what}: database {self.using!r} is SQLite, which allows one writer at a time, and "
                "this call runs inside a transaction (transaction.atomic() or autocommit off), so a "
                "lock would wait for that transaction; take the lock outside the transaction",
                alias=self.alias,
            )
        private = type(shared)(dict(shared.settings_dict), alias=self.using)
        try:
            return operation(private, what, *args)
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
        last_insert_id: bool = False,
        conflict_means_held: bool = False,
    ) -> tuple[int, list[Any]]:
        """Execute one statement on a cursor of ``conn.cursor()``; returns (rowcount,
        rows), rows only when ``fetch`` (the statement returns some) or ``last_insert_id`` (on
        MySQL: one row of the value the statement set with ``LAST_INSERT_ID(expr)``,
        the cursor's ``lastrowid``). The rows are fetched before the count is read:
        SQLite counts the rows of a ``RETURNING`` statement as they are fetched.

        Every database error becomes a ``LockProviderError``, except a unique violation
        of an INSERT (``conflict_means_held``), which is re-raised for the caller.
        """
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall() if fetch else [(cursor.lastrowid,)] if last_insert_id else []
                return cursor.rowcount, rows
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
        return self._on_connection(f"acquire {config.name!r}", self._acquire_on, config)

    def _acquire_on(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration
    ) -> SimpleLock | LockRecord | None:
        name, token = config.name, secrets.token_hex(16)
        # The table keeps the token's digest only: a SQL log line or a dump of the table
        # is then no key to this holding, and hex digests compare exactly on every
        # database (MariaDB's default collation would fold the case of raw tokens).
        digest = token_digest(token)
        if self._one_statement(conn):
            dialect = self._dialect
            until, now = self._until(config.lock_at_most_for), self._now()
            params = dialect.acquire_params(name, until, now, self.locked_by, digest)
            rows = self._run(conn, what, self._sql.acquire, params, fetch=True)[1]
            if not rows:
                # Held. SQLite's upsert cannot return the holder's row: read it.
                return None if dialect.names_holder else self._read(conn, name, what)
            row = rows[0]
            if row[4] != digest:  # the holder's row
                return self._record(row)
            locked_at, lock_until, fencing = row[2], row[1], row[5]
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
            # The token's fingerprint is its digest's head: no second hash.
            token_fingerprint=digest[:8],
        )
        return self.handle(record, config)

    def _one_statement(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether this server runs acquire as one statement. On MySQL and MariaDB
        that takes the server's version (MariaDB 10.5 added ``RETURNING``), known once
        connected; it is asked once per provider."""
        single = self._single
        if single is None:
            server: Any = conn
            single = self._single = bool(server.mysql_is_mariadb and server.mysql_version >= (10, 5))
        return single

    def _acquire_in_steps(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration, digest: str
    ) -> tuple[Any, Any, Any] | LockRecord:
        """ShedLock's acquire, for servers without ``RETURNING`` (MySQL, MariaDB before
        10.5, SQLite before 3.35): take an expired row, else insert the row of a new
        name, else read the holder. Returns ``(locked_at, lock_until, fencing_token)``
        when granted, else the holder."""
        name, sql = config.name, self._sql
        now = self._now()
        params = [*self._until(config.lock_at_most_for), *now, self.locked_by, digest, name, *now]
        returning = self._dialect.update_returning
        count, rows = self._run(conn, what, sql.take, params, fetch=returning)
        if count != 1:
            params = [name, *self._until(config.lock_at_most_for), *self._now(), self.locked_by, digest]
            try:
                count, rows = self._run(
                    conn, what, sql.insert, params, fetch=returning, conflict_means_held=True
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
        return self._on_connection(f"unlock {held.name!r}", self._unlock_on, held)

    def _unlock_on(self, conn: BaseDatabaseWrapper, what: str, held: SimpleLock) -> bool:
        digest, now = token_digest(held.token), self._now()
        if not held.lock_at_least_for:
            # Nothing to keep: the deadline is "now", a shorter statement to run.
            return self._run(conn, what, self._sql.release, [*now, held.name, digest, *now])[0] == 1
        params = [to_epoch_us(held.lock_at_least_until), *now, held.name, digest, *now]
        return self._run(conn, what, self._sql.unlock, params)[0] == 1

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        what = f"extend {held.name!r}"
        digest = token_digest(held.token)
        params = [*self._until(config.lock_at_most_for), held.name, digest, *self._now()]

        returning = self._dialect.update_returning
        in_last_insert_id = self._dialect.extend_sets_last_insert_id

        def extend(conn: BaseDatabaseWrapper, what: str) -> list[Any] | None:
            count, rows = self._run(
                conn, what, self._sql.extend, params, fetch=returning, last_insert_id=in_last_insert_id
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
            token_fingerprint=held.record.token_fingerprint,
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
        return self._on_connection(what, lambda conn, what: self._run(conn, what, sql, params)[0] == 1)

    # -- asyncio ----------------------------------------------------------------------
    # Django's rule for the ORM and its connections under asyncio: run them through
    # sync_to_async(thread_sensitive=True), on the one thread that owns the connection.
    # The statements are the sync primitives' own.

    async def _aacquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        return await sync_to_async(self._acquire, thread_sensitive=True)(config)

    async def _aunlock(self, held: SimpleLock) -> bool:
        return await sync_to_async(self._unlock, thread_sensitive=True)(held)

    async def _aextend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        return await sync_to_async(self._extend, thread_sensitive=True)(held, config)

    async def _aforce_unlock(self, name: str, expected: int | str | None) -> bool:
        return await sync_to_async(self._force_unlock, thread_sensitive=True)(name, expected)

    # -- listing --------------------------------------------------------------------

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        if unmatchable(query.prefix) or unmatchable(query.search):
            return StorePage(records=[], more=False, total=0)
        what = "list locks"
        sql, params = self._pages.page(query, after, self._now())

        def read(conn: BaseDatabaseWrapper) -> tuple[list[Any], int | None]:
            rows = self._run(conn, what, sql, params, fetch=True)[1]
            if after is None and len(rows) <= query.limit:
                return rows, len(rows)  # the whole answer is in hand
            count = self._pages.count(query, self._now())
            if count is None:
                return rows, None
            counted = int(self._run(conn, what, *count, fetch=True)[1][0][0])
            return rows, counted if counted <= tables.COUNT_CAP else None

        rows, total = self._reading(what, read)
        records = [self._record(row) for row in rows[: query.limit]]
        return StorePage(records=records, more=len(rows) > query.limit, total=total)

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
        return self._retention.purge(expired_for, dry_run=dry_run, batch_size=batch_size)
