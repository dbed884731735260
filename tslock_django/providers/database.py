"""``DatabaseLockProvider``: ShedLock's table protocol on any Django database.

Acquire is one conditional ``UPDATE`` (take an expired row) and, when no row exists
yet, one ``INSERT`` whose conflict means "held". Deadlines come from the database's
clock by default, so web nodes with skewed clocks still agree. Rows are never deleted:
after release they keep the last holder and the fencing counter, which therefore grows
monotonically per name.

Inside a caller's ``transaction.atomic()`` a lock written on the caller's connection
would stay invisible to other processes until that transaction commits, which defeats
the lock. The provider then uses a connection of its own (one per thread), so the lock
is visible at once and survives the caller's rollback.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from django.db import DatabaseError, IntegrityError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.dateparse import parse_datetime

from ..core.configuration import LockConfiguration
from ..core.provider import LockProvider, SimpleLock
from ..core.records import LockRecord
from ..exceptions import LockProviderError

TABLE = "tslock_lock"
COLUMNS = "name, lock_until, locked_at, locked_by, token, fencing_token"


class _Sql:
    """Builds one statement and its parameters in textual order; the dialect decides
    whether "now" is an SQL expression or a parameter from the provider's clock."""

    def __init__(self, dialect: _Dialect) -> None:
        self.dialect = dialect
        self.parts: list[str] = []
        self.params: list[Any] = []

    def add(self, text: str, *params: Any) -> _Sql:
        self.parts.append(text)
        self.params.extend(params)
        return self

    def now(self) -> _Sql:
        self.dialect.now(self)
        return self

    def now_plus(self, delta: timedelta) -> _Sql:
        self.dialect.now_plus(self, delta)
        return self

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class _Dialect:
    """How one database vendor says "now", "now + d" and whether it has RETURNING."""

    vendor: str
    returning: bool
    provider: DatabaseLockProvider
    use_db_time: bool

    def now(self, sql: _Sql) -> None:
        if not self.use_db_time:
            sql.add("%s", self.param(self.provider.clock.now()))
        elif self.vendor == "postgresql":
            # Constant within a statement (clock_timestamp() is not).
            sql.add("statement_timestamp()")
        elif self.vendor == "mysql":
            sql.add("UTC_TIMESTAMP(6)")
        else:
            sql.add("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')")

    def now_plus(self, sql: _Sql, delta: timedelta) -> None:
        micros = delta // timedelta(microseconds=1)
        if not self.use_db_time:
            sql.add("%s", self.param(self.provider.clock.now() + delta))
        elif self.vendor == "postgresql":
            sql.add("(statement_timestamp() + %s * INTERVAL '1 microsecond')", micros)
        elif self.vendor == "mysql":
            sql.add("TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))", micros)
        else:
            sql.add("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', %s)", f"+{micros / 1e6:.6f} seconds")

    def param(self, value: datetime) -> Any:
        return self.provider.connection().ops.adapt_datetimefield_value(value)


class DatabaseLockProvider(LockProvider):
    """Locks in the ``tslock_lock`` table of a Django database.

    OPTIONS:
        using: the database alias (default ``"default"``).
        use_db_time: decide expiry on the database's clock (default ``True``); with
            ``False`` the provider's ``ClockProvider`` decides (tests, or databases
            other than PostgreSQL, MySQL/MariaDB and SQLite).
    """

    guarantee: ClassVar = "strong"
    default_options: ClassVar[dict[str, Any]] = {"using": "default", "use_db_time": True}
    max_key_bytes: ClassVar[int] = 255
    supported_vendors: ClassVar[tuple[str, ...]] = ("postgresql", "mysql", "sqlite")

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
        use_db_time = self.options["use_db_time"]
        if use_db_time and vendor not in self.supported_vendors:
            raise self.option_error(
                "use_db_time",
                f"is True but database {self.using!r} is {vendor}, whose clock this provider cannot "
                f"read; use {', '.join(self.supported_vendors)} or set use_db_time to False",
            )
        self._dialect = _Dialect(
            vendor=vendor,
            returning=vendor in ("postgresql", "sqlite"),
            provider=self,
            use_db_time=use_db_time,
        )
        self._local = threading.local()
        self._private: list[BaseDatabaseWrapper] = []
        self._private_mutex = threading.Lock()

    # -- connections ---------------------------------------------------------------

    def connection(self) -> BaseDatabaseWrapper:
        """The caller's connection in autocommit mode, else this thread's own one."""
        shared = connections[self.using]
        if not shared.in_atomic_block:
            return shared
        private = getattr(self._local, "connection", None)
        if private is None:
            private = type(shared)(dict(shared.settings_dict), alias=self.using)
            self._local.connection = private
            with self._private_mutex:
                self._private.append(private)
        return private

    def close(self) -> None:
        with self._private_mutex:
            private, self._private = self._private, []
        for conn in private:
            conn.close()
        self._local = threading.local()

    def _run(self, what: str, sql: _Sql) -> tuple[int, list[tuple[Any, ...]]]:
        """Execute one statement; returns (rowcount, rows). Database errors other than
        the INSERT conflict become ``LockProviderError``."""
        conn = self.connection()
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql.text, sql.params)
                rows = cursor.fetchall() if cursor.description else []
                return cursor.rowcount, rows
        except IntegrityError:
            raise
        except DatabaseError as err:
            # A killed connection stays broken until closed; close it so the next call
            # reconnects instead of failing forever in a long-running process.
            conn.close_if_unusable_or_obsolete()
            raise LockProviderError(
                f"{what}: database {self.using!r} failed ({type(err).__name__}: {err})".strip(),
                alias=self.alias,
            ) from err

    def _sql(self) -> _Sql:
        return _Sql(self._dialect)

    # -- the protocol -----------------------------------------------------------------

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        name, token = config.name, secrets.token_hex(16)
        what = f"acquire {name!r}"
        returning = " RETURNING locked_at, lock_until, fencing_token" if self._dialect.returning else ""
        update = (
            self._sql()
            .add(f"UPDATE {TABLE} SET lock_until = ")
            .now_plus(config.lock_at_most_for)
            .add(", locked_at = ")
            .now()
            .add(", locked_by = %s, token = %s, fencing_token = fencing_token + 1", self.locked_by, token)
            .add(" WHERE name = %s AND lock_until <= ", name)
            .now()
            .add(returning)
        )
        count, rows = self._run(what, update)
        if count != 1:
            insert = (
                self._sql()
                .add(f"INSERT INTO {TABLE} ({COLUMNS}) VALUES (%s, ", name)
                .now_plus(config.lock_at_most_for)
                .add(", ")
                .now()
                .add(", %s, %s, 1)", self.locked_by, token)
            )
            if self._dialect.returning:
                insert.add(" ON CONFLICT (name) DO NOTHING" + returning)
            try:
                count, rows = self._run(what, insert)
            except IntegrityError:
                count = 0
            if count != 1:
                return self._read(name, what)
        if not rows:
            # No RETURNING (MySQL/MariaDB): read back what we wrote, by our token.
            select = self._sql().add(
                f"SELECT locked_at, lock_until, fencing_token FROM {TABLE} WHERE name = %s AND token = %s",
                name,
                token,
            )
            rows = self._run(what, select)[1]
            if not rows:
                raise LockProviderError(f"{what}: the row written could not be read back", alias=self.alias)
        locked_at, lock_until, fencing = rows[0]
        record = LockRecord(
            name=name,
            lock_until=_aware(lock_until),
            locked_at=_aware(locked_at),
            locked_by=self.locked_by,
            token=token,
            fencing_token=int(fencing),
            provider=self.alias,
        )
        return self.handle(record, config)

    def _read(self, name: str, what: str) -> LockRecord | None:
        select = self._sql().add(f"SELECT {COLUMNS} FROM {TABLE} WHERE name = %s", name)
        rows = self._run(what, select)[1]
        return self._record(rows[0]) if rows else None

    def _record(self, row: tuple[Any, ...]) -> LockRecord:
        name, lock_until, locked_at, locked_by, token, fencing = row
        return LockRecord(
            name=name,
            lock_until=_aware(lock_until),
            locked_at=_aware(locked_at),
            locked_by=locked_by,
            fencing_token=int(fencing),
            provider=self.alias,
            released=not token,
            token_fingerprint=_fingerprint(token),
        )

    def _unlock(self, held: SimpleLock) -> bool:
        at_least_until = self._dialect.param(held.lock_at_least_until)
        update = (
            self._sql()
            .add(f"UPDATE {TABLE} SET lock_until = CASE WHEN %s > ", at_least_until)
            .now()
            .add(" THEN %s ELSE ", at_least_until)
            .now()
            .add(" END, token = '' WHERE name = %s AND token = %s AND lock_until > ", held.name, held.token)
            .now()
        )
        return self._run(f"unlock {held.name!r}", update)[0] == 1

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        what = f"extend {held.name!r}"
        update = (
            self._sql()
            .add(f"UPDATE {TABLE} SET lock_until = ")
            .now_plus(config.lock_at_most_for)
            .add(" WHERE name = %s AND token = %s AND lock_until > ", held.name, held.token)
            .now()
        )
        if self._dialect.returning:
            update.add(" RETURNING lock_until")
        count, rows = self._run(what, update)
        if count != 1:
            return None
        if not rows:
            select = self._sql().add(
                f"SELECT lock_until FROM {TABLE} WHERE name = %s AND token = %s", held.name, held.token
            )
            rows = self._run(what, select)[1]
            if not rows:
                return None
        lock_until = _aware(rows[0][0])
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
        update = (
            self._sql()
            .add(f"UPDATE {TABLE} SET lock_until = ")
            .now()
            .add(", token = '' WHERE name = %s", name)
        )
        update.add(" AND lock_until > ").now()
        if isinstance(expected, int):
            update.add(" AND fencing_token = %s", expected)
        elif isinstance(expected, str):
            update.add(" AND token = %s", expected)
        return self._run(f"force-release {name!r}", update)[0] == 1

    def list_locks(self, prefix: str = "") -> list[LockRecord]:
        select = self._sql().add(f"SELECT {COLUMNS} FROM {TABLE}")
        if prefix:
            # LIKE would need escaping per vendor; a range on the primary key is exact.
            select.add(" WHERE name >= %s AND name < %s", prefix, prefix + "\U0010ffff")
        select.add(" ORDER BY name")
        rows = self._run("list locks", select)[1]
        return [r for r in map(self._record, rows) if r.name.startswith(prefix)]


def _aware(value: Any) -> datetime:
    """Database values as aware UTC datetimes (SQLite gives text, MySQL naive UTC)."""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise LockProviderError(f"unreadable timestamp {value!r} in {TABLE}")
        value = parsed
    if not isinstance(value, datetime):
        raise LockProviderError(f"unreadable timestamp {value!r} in {TABLE}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _fingerprint(token: str) -> str:
    from ..core.records import fingerprint

    return fingerprint(token) if token else ""
