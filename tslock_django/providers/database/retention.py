"""Retention: ``purge()`` of the database provider, which deletes rows expired longer
than a period in short batches and keeps fencing tokens rising across the deletion."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from ..epoch import to_epoch_us
from . import tables
from .tables import FENCE_TABLE, MAX_PURGE_BATCH, TABLE

if TYPE_CHECKING:
    from .provider import DatabaseLockProvider

_MICRO = timedelta(microseconds=1)


class Retention:
    """The purge of one ``DatabaseLockProvider`` (see ``DatabaseLockProvider.purge``):
    its statements run through the provider's connection handling."""

    def __init__(self, provider: DatabaseLockProvider) -> None:
        self.provider = provider

    def purge(self, expired_for: timedelta, *, dry_run: bool, batch_size: int) -> int:
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
            return self.provider._reading(what, lambda conn: self._purge_count(conn, what, expired_for))
        return self.provider._on_connection(what, self._purge_on, expired_for, batch_size)

    def _purge_cutoff(self, conn: BaseDatabaseWrapper, what: str, expired_for: timedelta) -> int | None:
        """Epoch microseconds: rows with ``lock_until`` at or before it are purged;
        ``None`` when nothing can be that old (before 1970)."""
        if self.provider.use_db_time:
            sql = f"SELECT {self.provider._dialect.epoch_us(self.provider._dialect.now())}"
            now = int(self.provider._run(conn, what, sql, [], fetch=True)[1][0][0])
        else:
            now = to_epoch_us(self.provider.clock.now())
        cutoff = now - expired_for // _MICRO
        return cutoff if cutoff >= 0 else None

    def _purge_count(self, conn: BaseDatabaseWrapper, what: str, expired_for: timedelta) -> int:
        cutoff = self._purge_cutoff(conn, what, expired_for)
        if cutoff is None:
            return 0
        sql = f"SELECT COUNT(*) FROM {TABLE} WHERE lock_until <= {self.provider._dialect.instant()}"
        return int(self.provider._run(conn, what, sql, [cutoff], fetch=True)[1][0][0])

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
            f"SELECT name FROM {TABLE} WHERE lock_until <= {self.provider._dialect.instant()} "
            f"ORDER BY lock_until, name LIMIT {limit}"
        )
        return [row[0] for row in self.provider._run(conn, what, sql, [cutoff], fetch=True)[1]]

    def _purge_batch(self, conn: BaseDatabaseWrapper, what: str, names: list[str], cutoff: int) -> int:
        """Delete those of ``names`` still expired at ``cutoff``, in one transaction that
        first raises the fencing mark to their highest token; returns how many."""
        expired = f"lock_until <= {self.provider._dialect.instant()}"

        def each_part(
            statement: Callable[[str], str], of: list[str], *, fetch: bool = False
        ) -> tuple[int, list[Any]]:
            """Run ``statement(placeholders)`` over ``of`` in parts: the names are
            parameters, and SQLite before 3.32 takes at most 999 of those."""
            count, rows = 0, list[Any]()
            for start in range(0, len(of), tables.NAMES_PER_STATEMENT):
                part = of[start : start + tables.NAMES_PER_STATEMENT]
                sql = statement(", ".join(["%s"] * len(part)))
                done = self.provider._run(conn, what, sql, [*part, cutoff], fetch=fetch)
                count += done[0]
                rows.extend(done[1])
            return count, rows

        with self._transaction(conn, what):
            if self.provider._dialect.purge_lock:
                # PostgreSQL: acquire, unlock and extend wait until this batch commits,
                # and an acquire that was running has committed before this returns.
                self.provider._run(conn, what, self.provider._dialect.purge_lock, [])
            # The mark's row next: while this transaction holds it, a fresh INSERT on
            # MySQL (which reads the mark with a shared lock) waits, so it cannot take
            # a token from the mark before the rows below are gone and the mark raised.
            # On SQLite this first write also takes the database's write lock.
            take_mark = f"UPDATE {FENCE_TABLE} SET mark = mark WHERE id = 1"
            if self.provider._run(conn, what, take_mark, [])[0] != 1:
                # Migration 0004 writes the row, but `manage.py flush` (and every
                # transactional test) empties the table. Fresh names then start from 1,
                # right for a lock table emptied too, and the first purge puts it back.
                self.provider._run(
                    conn, what, self.provider._dialect.insert_if_missing(FENCE_TABLE, "id, mark", "1, 0"), []
                )
                self.provider._run(conn, what, take_mark, [])
            # Lock the rows and check the condition again: a lock taken since the names
            # were chosen is no longer expired and stays.
            lock = self.provider._dialect.update_lock
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
            self.provider._run(
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
            raise self.provider._failure(what, err) from err
        finally:
            try:
                conn.set_autocommit(True)
            except DatabaseError:
                conn.close()  # the next use reconnects in autocommit mode
