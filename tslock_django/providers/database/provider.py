"""``DatabaseLockProvider``: the lock protocol on one Django database connection.

The statements come from ``Statements`` (written once per provider from the vendor's
dialect); this module runs them: on which connection, prepared or not, and how a
database error becomes a ``LockProviderError``. See the package's docstring for the
protocol itself.
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
from . import cursors, tables
from .carried import ClockOffset, wall_clock_us
from .listing import PageStatements, unmatchable
from .prepared import prepares, preparing, statement_gone
from .retention import Retention
from .routines import DIALECTS
from .statements import Statements
from .tables import TABLE
from .take_first import TakeFirst

logger = logging.getLogger("tslock_django")

T = TypeVar("T")

_MICRO = timedelta(microseconds=1)
#: The databases already warned about missing routines in this process (one line each).
_WARNED_NO_ROUTINES: set[str] = set()


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
        # The checks live in providers.store_options, where the system checks run them too.
        self.options = DATABASE.check(alias, self.options)
        self.using = self.options["using"]
        connection = connections[self.using]
        self.vendor = vendor = connection.vendor
        check_database_vendor(alias, self.using, vendor)
        #: Whether the fixed statements run prepared (see the option).
        self.prepares = prepares(connection, self.options["prepared_statements"])
        self.use_db_time = self.options["use_db_time"]
        self._dialect = DIALECTS[vendor]()
        self._sql = Statements.build(self._dialect, self.use_db_time)
        # Acquire and unlock as calls of the routines of migration 0007, where the vendor
        # has them; on the caller's clock the plain statements (the routines read the
        # database's). None once a call found them missing (see _call).
        self._routines = self._dialect.routines if self.use_db_time else None
        # Whether acquire is the one upsert (see _upsert_returns; None: not known yet).
        self._upsert_returning = self._dialect.upsert_returning
        # The names to try a plain UPDATE for before the upsert (see take_first), where
        # the server returns rows from both: SQLite 3.35+ here, MariaDB 10.5+ once its
        # version is known (_upsert_returns). On MariaDB with the database's clock, the
        # offset that decodes the UPDATE's carried "now" (see carried).
        self._take_first: TakeFirst | None = None
        self._clock_offset: ClockOffset | None = None
        if self._dialect.takes_first and self._upsert_returning and self._dialect.update_returning:
            self._take_first = TakeFirst()
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
        maker = preparing if prepared else self._dialect.cursor
        try:
            try:
                return cursors.run(conn, sql, params, fetch=fetch, carried=carried, maker=maker)
            except DatabaseError as err:
                if not (prepared and statement_gone(err)):
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
                return cursors.run(conn, sql, params, fetch=fetch, carried=carried, maker=maker)
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
    ) -> SimpleLock | LockRecord:
        name, token = config.name, secrets.token_hex(16)
        # The table keeps the token's digest only: a SQL log line or a dump of the table
        # is then no key to this holding, and hex digests compare exactly on every
        # database (MariaDB's default collation would fold the case of raw tokens).
        digest = token_digest(token)
        first = self._take_first
        taken = None
        if first is not None and name in first and self._may_take():
            taken = self._take(conn, what, config, digest)
        if taken is None:
            answer = self._acquire_answer(conn, what, config, digest)
            first = self._take_first  # set up by the first answer on MariaDB
            if isinstance(answer, LockRecord):
                if first is not None:
                    first.refused(name)
                return answer
            taken = answer
        if first is not None:
            first.granted(name)
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

    def _acquire_answer(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration, digest: str
    ) -> tuple[Any, Any, Any] | LockRecord:
        """Acquire in the statement that answers every outcome (a routine's call, the
        upsert, or ShedLock's steps where neither exists): ``(locked_at, lock_until,
        fencing_token)`` when granted, else the holder."""
        rows: list[Any] | None = None
        name = config.name
        if self._routines is not None:
            call = [name, config.lock_at_most_for // _MICRO, self.locked_by, digest]
            rows = self._call(conn, what, self._routines.acquire, call)
        if rows is None and self._upsert_returns(conn):
            values = {
                "name": [name],
                "until": self._until(config.lock_at_most_for),
                "now": self._now(),
                "locked_by": [self.locked_by],
                "token": [digest],
            }
            params = [value for slot in self._sql.acquire_slots for value in values[slot]]
            offset = self._clock_offset
            sent = wall_clock_us() if offset is not None else 0
            rows = self._run(conn, what, self._sql.acquire, params, fetch=True, prepared=True)[1]
            if offset is not None and rows and rows[0][4] == digest:
                offset.learn(int(rows[0][2]), sent, wall_clock_us())
        if rows is None:
            return self._acquire_in_steps(conn, what, config, digest)
        if not rows:
            # An upsert always ends with a row; none is a store that misbehaves,
            # never "held".
            raise LockProviderError(f"{what}: the upsert returned no row", alias=self.alias)
        row = rows[0]
        if row[4] != digest:  # the row as the holder left it
            return self._record(row)
        return row[2], row[1], row[5]

    def _may_take(self) -> bool:
        """Whether a taking UPDATE can tell its grant: always where it returns rows;
        on MariaDB with the database's clock, while the clock offset is trusted."""
        return self._clock_offset is None or self._clock_offset.trusted

    def _take(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration, digest: str
    ) -> tuple[Any, Any, Any] | None:
        """Take ``config.name`` if it exists and is free (see ``take_first``):
        ``(locked_at, lock_until, fencing_token)`` in epoch microseconds, or ``None``
        when nothing was taken (a held or new name: the upsert then decides and names
        the holder)."""
        until, now = self._until(config.lock_at_most_for), self._now()
        params = [*until, *now, self.locked_by, digest, config.name, *now]  # Statements.take_slots
        if self._sql.take_carried is None:
            rows = self._run(conn, what, self._sql.acquire_update, params, fetch=True, prepared=True)[1]
            return tuple(rows[0]) if rows else None
        sent = wall_clock_us()
        count, rows = self._run(conn, what, self._sql.take_carried, params, carried=True, prepared=True)
        if count != 1:
            return None
        reply = int(rows[0][0] or 0)
        offset = self._clock_offset
        if offset is None:
            return now[0], until[0], reply  # the caller's times; the reply is the token
        taken = offset.decode(reply, sent, config.lock_at_most_for // _MICRO)
        if taken is not None:
            return taken
        # Nothing usable carried (a fencing token too large for the reply): read it.
        read = self._run(conn, what, self._sql.read_back, [config.name, digest], fetch=True)[1]
        if not read:
            raise LockProviderError(f"{what}: the row written could not be read back", alias=self.alias)
        locked_at, lock_until, fencing = read[0]
        offset.learn(int(locked_at), sent, wall_clock_us())
        return locked_at, lock_until, fencing

    def _call(self, conn: BaseDatabaseWrapper, what: str, sql: str, params: list[Any]) -> list[Any] | None:
        """Call a routine of migration 0007; its rows, or ``None`` when the routine is
        not in the database (the migration has not run, or it was dropped): the
        provider then says so once and uses the plain statements from then on."""
        try:
            return self._run(conn, what, sql, params, fetch=True, prepared=True)[1]
        except LockProviderError as err:
            driver = err.__cause__.__cause__ if err.__cause__ is not None else None
            if driver is None or not self._dialect.missing_routine(driver):
                raise
        self._routines = None
        if self.using not in _WARNED_NO_ROUTINES:
            _WARNED_NO_ROUTINES.add(self.using)
            logger.warning(
                "database %r has no tslock routines (run `manage.py migrate tslock_django`); "
                "locking with plain statements meanwhile, which is slower",
                self.using,
            )
        return None

    def _upsert_returns(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether this server returns the row of an upsert, so that acquire is one
        statement. On MySQL and MariaDB that takes the server's version, known once
        connected; it is asked once per provider."""
        able = self._upsert_returning
        if able is None:
            server: Any = conn
            able = bool(server.mysql_is_mariadb and server.mysql_version >= (10, 5))
            self._upsert_returning = able
            if able and self._dialect.takes_first:
                self._take_first = TakeFirst()
                self._clock_offset = ClockOffset() if self.use_db_time else None
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
        return self._on_connection(f"unlock {held.name!r}", self._unlock_on, held)

    def _unlock_on(self, conn: BaseDatabaseWrapper, what: str, held: SimpleLock) -> bool:
        at_least, digest = to_epoch_us(held.lock_at_least_until), token_digest(held.token)
        if self._routines is not None:
            rows = self._call(conn, what, self._routines.unlock, [held.name, digest, at_least])
            if rows is not None:
                return bool(rows[0][0])
        now = self._now()
        if not held.lock_at_least_for:
            # Nothing to keep: the deadline is "now", a shorter statement to run.
            params = [*now, held.name, digest, *now]
            return self._run(conn, what, self._sql.release, params, prepared=True)[0] == 1
        params = [at_least, *now, held.name, digest, *now]
        return self._run(conn, what, self._sql.unlock, params, prepared=True)[0] == 1

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        what = f"extend {held.name!r}"
        digest = token_digest(held.token)
        params = [*self._until(config.lock_at_most_for), held.name, digest, *self._now()]

        returning = self._dialect.update_returning
        carried = self._dialect.extend_carries_deadline

        def extend(conn: BaseDatabaseWrapper, what: str) -> list[Any] | None:
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
        return self._on_connection(
            what, lambda conn, what: self._run(conn, what, sql, params, prepared=True)[0] == 1
        )

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
