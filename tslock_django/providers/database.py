"""``DatabaseLockProvider``: ShedLock's table protocol on any Django database.

Acquire is one conditional ``UPDATE`` (take an expired row) and, when no row exists
yet, one ``INSERT`` whose conflict means "held". Deadlines come from the database's
clock by default, so web nodes with skewed clocks still agree. Rows are never deleted:
after release they keep the last holder and the fencing counter, which therefore grows
monotonically per name.

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

import logging
import secrets
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..core.configuration import LockConfiguration
from ..core.provider import LockProvider, SimpleLock
from ..core.records import LockRecord, fingerprint
from ..exceptions import LockProviderError
from .epoch import from_epoch_us, to_epoch_us

logger = logging.getLogger("tslock_django")

T = TypeVar("T")

TABLE = "tslock_lock"
_MICRO = timedelta(microseconds=1)
_SQLITE_TIME = "'%%Y-%%m-%%d %%H:%%M:%%f'"


class _Dialect:
    """How one vendor writes "now", "now + d", an instant from epoch microseconds, and
    reads a column back as epoch microseconds."""

    returning = True

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


class _PostgreSQL(_Dialect):
    def now(self) -> str:
        return "statement_timestamp()"  # constant within a statement (clock_timestamp() is not)

    def plus(self, base: str) -> str:
        return f"({base} + %s * INTERVAL '1 microsecond')"

    def instant(self) -> str:
        return self.plus("TIMESTAMPTZ 'epoch'")

    def epoch_us(self, column: str) -> str:
        return f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"


class _MySQL(_Dialect):
    # Columns are DATETIME(6) holding UTC wall time; UTC_TIMESTAMP ignores the session
    # time zone, and all arithmetic below is on UTC wall time.
    returning = False

    def now(self) -> str:
        return "UTC_TIMESTAMP(6)"

    def plus(self, base: str) -> str:
        return f"TIMESTAMPADD(MICROSECOND, %s, {base})"

    def instant(self) -> str:
        return self.plus("'1970-01-01 00:00:00'")

    def epoch_us(self, column: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column})"


class _SQLite(_Dialect):
    # Text in UTC, as Django stores it; SQLite's clock has millisecond resolution.
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


_DIALECTS: dict[str, type[_Dialect]] = {"postgresql": _PostgreSQL, "mysql": _MySQL, "sqlite": _SQLite}


@dataclass(frozen=True)
class _Statements:
    """Every statement the provider runs, written once per provider: the text depends
    only on the vendor and on whose clock decides. Where "now" is the caller's clock it
    is a parameter, and the parameter lists below follow the placeholders in order."""

    acquire_update: str
    acquire_insert: str
    read_back: str
    read: str
    unlock: str
    extend: str
    extend_read_back: str
    force_unlock: str
    list_all: str

    @classmethod
    def build(cls, dialect: _Dialect, use_db_time: bool) -> _Statements:
        epoch = dialect.epoch_us
        now = dialect.now() if use_db_time else dialect.instant()
        until = dialect.plus(dialect.now()) if use_db_time else dialect.instant()
        instant = dialect.instant()
        columns = f"name, {epoch('lock_until')}, {epoch('locked_at')}, locked_by, token, fencing_token"
        taken = f"{epoch('locked_at')}, {epoch('lock_until')}, fencing_token"
        returning = f" RETURNING {taken}" if dialect.returning else ""
        insert = (
            f"INSERT INTO {TABLE} (name, lock_until, locked_at, locked_by, token, fencing_token) "
            f"VALUES (%s, {until}, {now}, %s, %s, 1)"
        )
        if dialect.returning:
            insert += " ON CONFLICT (name) DO NOTHING" + returning
        extend = (
            f"UPDATE {TABLE} SET lock_until = {until} WHERE name = %s AND token = %s AND lock_until > {now}"
        )
        return cls(
            # [until, now, locked_by, token, name, now]
            acquire_update=(
                f"UPDATE {TABLE} SET lock_until = {until}, locked_at = {now}, locked_by = %s, token = %s, "
                f"fencing_token = fencing_token + 1 WHERE name = %s AND lock_until <= {now}{returning}"
            ),
            # [name, until, now, locked_by, token]
            acquire_insert=insert,
            # [name, token]: MySQL/MariaDB have no UPDATE ... RETURNING
            read_back=f"SELECT {taken} FROM {TABLE} WHERE name = %s AND token = %s",
            # [name]
            read=f"SELECT {columns} FROM {TABLE} WHERE name = %s",
            # [at_least, now, at_least, now, name, token, now]
            unlock=(
                f"UPDATE {TABLE} SET lock_until = CASE WHEN {instant} > {now} THEN {instant} ELSE {now} END, "
                f"token = '' WHERE name = %s AND token = %s AND lock_until > {now}"
            ),
            # [until, name, token, now]
            extend=extend + (f" RETURNING {epoch('lock_until')}" if dialect.returning else ""),
            # [name, token]
            extend_read_back=f"SELECT {epoch('lock_until')} FROM {TABLE} WHERE name = %s AND token = %s",
            # [now, name, now] + [fencing token or token]
            force_unlock=(
                f"UPDATE {TABLE} SET lock_until = {now}, token = '' WHERE name = %s AND lock_until > {now}"
            ),
            list_all=f"SELECT {columns} FROM {TABLE}",
        )


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
    default_options: ClassVar[dict[str, Any]] = {"using": "default", "use_db_time": True}
    max_key_bytes: ClassVar[int] = 255

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, **kwargs)
        self.using = self.options["using"]
        if not isinstance(self.using, str) or self.using not in connections.settings:
            known = ", ".join(map(repr, connections.settings)) or "(none)"
            raise self.option_error(
                "using", f"= {self.using!r} is not a database alias; DATABASES has {known}"
            )
        if not isinstance(self.options["use_db_time"], bool):
            raise self.option_error(
                "use_db_time", f"must be True or False, got {self.options['use_db_time']!r}"
            )
        vendor = connections[self.using].vendor
        if vendor not in _DIALECTS:
            raise self.option_error(
                "using",
                f"= {self.using!r} is a {vendor} database; the database provider supports "
                f"{', '.join(sorted(_DIALECTS))}",
            )
        self.vendor = vendor
        self.use_db_time = self.options["use_db_time"]
        self._dialect = _DIALECTS[vendor]()
        self._sql = _Statements.build(self._dialect, self.use_db_time)

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
        conflict_means_held: bool = False,
    ) -> tuple[int, list[Any]]:
        """Execute one statement on ``conn``; returns (rowcount, rows), rows only when
        ``fetch`` (the statement returns some: we say so rather than ask the cursor,
        whose ``description`` psycopg builds anew on every access).

        Every database error becomes a ``LockProviderError``, except a unique violation
        of an INSERT (``conflict_means_held``), which is re-raised for the caller.
        """
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall() if fetch else []
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
        what = f"acquire {config.name!r}"
        return self._on_connection(what, lambda conn: self._acquire_on(conn, what, config))

    def _acquire_on(
        self, conn: BaseDatabaseWrapper, what: str, config: LockConfiguration
    ) -> SimpleLock | LockRecord:
        name, token, sql = config.name, secrets.token_hex(16), self._sql
        now = self._now()
        params = [*self._until(config.lock_at_most_for), *now, self.locked_by, token, name, *now]
        returning = self._dialect.returning
        count, rows = self._run(conn, what, sql.acquire_update, params, fetch=returning)
        if count != 1:
            params = [name, *self._until(config.lock_at_most_for), *self._now(), self.locked_by, token]
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
            rows = self._run(conn, what, sql.read_back, [name, token], fetch=True)[1]
            if not rows:
                raise LockProviderError(f"{what}: the row written could not be read back", alias=self.alias)
        locked_at, lock_until, fencing = rows[0]
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

    def _read(self, conn: BaseDatabaseWrapper, name: str, what: str) -> LockRecord | None:
        rows = self._run(conn, what, self._sql.read, [name], fetch=True)[1]
        return self._record(rows[0]) if rows else None

    def _record(self, row: tuple[Any, ...]) -> LockRecord:
        name, lock_until, locked_at, locked_by, token, fencing = row
        return LockRecord(
            name=name,
            lock_until=self._time(lock_until),
            locked_at=self._time(locked_at),
            locked_by=locked_by,
            fencing_token=int(fencing),
            provider=self.alias,
            released=not token,
            token_fingerprint=fingerprint(token) if token else "",
        )

    def _unlock(self, held: SimpleLock) -> bool:
        # The at-least deadline came from this database's clock (locked_at, or the
        # extension's "now", plus lock_at_least_for), so it is compared with that clock.
        what = f"unlock {held.name!r}"
        at_least, now = to_epoch_us(held.lock_at_least_until), self._now()
        params = [at_least, *now, at_least, *now, held.name, held.token, *now]
        return self._on_connection(what, lambda conn: self._run(conn, what, self._sql.unlock, params)[0] == 1)

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        what = f"extend {held.name!r}"
        params = [*self._until(config.lock_at_most_for), held.name, held.token, *self._now()]

        def extend(conn: BaseDatabaseWrapper) -> list[Any] | None:
            count, rows = self._run(conn, what, self._sql.extend, params, fetch=self._dialect.returning)
            if count != 1:
                return None
            if rows:
                return rows
            read_back = self._sql.extend_read_back
            return self._run(conn, what, read_back, [held.name, held.token], fetch=True)[1] or None

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
            sql, params = sql + " AND token = %s", [*params, expected]
        return self._on_connection(what, lambda conn: self._run(conn, what, sql, params)[0] == 1)

    def list_locks(self, prefix: str = "") -> list[LockRecord]:
        select, params = self._sql.list_all, []
        if prefix:
            # LIKE would need escaping per vendor; a range on the primary key is exact.
            select += " WHERE name >= %s AND name < %s"
            params = [prefix, prefix + "\U0010ffff"]
        # Reading needs no connection of its own: inside the caller's transaction it sees
        # what was committed (on MySQL, as of the transaction's snapshot), which is what a
        # listing (the admin page under ATOMIC_REQUESTS) may show.
        shared = connections[self.using]
        try:
            # Inside a transaction, a savepoint keeps a failed SELECT from poisoning it
            # (PostgreSQL aborts the whole transaction on any error).
            with transaction.atomic(using=self.using) if shared.in_atomic_block else nullcontext():
                rows = self._run(shared, "list locks", select + " ORDER BY name", params, fetch=True)[1]
        except DatabaseError as err:  # the savepoint's own statements
            raise self._failure("list locks", err) from err
        return [r for r in map(self._record, rows) if r.name.startswith(prefix)]
