"""``MemoryLockProvider``: locks inside one process. Strong within the process, useless
across processes: for tests, single-process tools and as the reference implementation
of the provider contract."""

from __future__ import annotations

import secrets
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from ..core.configuration import LockConfiguration
from ..core.provider import LockProvider, SimpleLock
from ..core.query import ListingSupport, LockQuery, StorePage
from ..core.records import LockRecord
from .store_options import MEMORY


class MemoryLockProvider(LockProvider):
    """Keeps records in a dict guarded by a mutex; time from ``self.clock``."""

    default_options: ClassVar = MEMORY.defaults
    max_key_bytes: ClassVar[int] = 1024
    listing: ClassVar = ListingSupport(total=True)

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, **kwargs)
        self._records: dict[str, LockRecord] = {}
        # The fencing counter outlives records, like the database row does.
        self._counters: dict[str, int] = {}
        self._mutex = threading.Lock()

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        with self._mutex:
            now = self.clock.now()
            current = self._records.get(config.name)
            if current is not None and current.lock_until > now:
                return current
            fencing = self._counters.get(config.name, 0) + 1
            self._counters[config.name] = fencing
            record = LockRecord(
                name=config.name,
                lock_until=now + config.lock_at_most_for,
                locked_at=now,
                locked_by=self.locked_by,
                token=secrets.token_hex(16),
                fencing_token=fencing,
                provider=self.alias,
            )
            self._records[config.name] = record
        return self.handle(record, config)

    def _owned(self, held: SimpleLock) -> LockRecord | None:
        current = self._records.get(held.name)
        if current is None or current.released or current.token != held.token:
            return None
        return current

    def _unlock(self, held: SimpleLock) -> bool:
        with self._mutex:
            current = self._owned(held)
            now = self.clock.now()
            if current is None or current.lock_until <= now:
                return False
            self._records[held.name] = replace(
                current, lock_until=max(now, held.lock_at_least_until), released=True
            )
            return True

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        with self._mutex:
            current = self._owned(held)
            now = self.clock.now()
            if current is None or current.lock_until <= now:
                return None
            record = replace(current, lock_until=now + config.lock_at_most_for)
            self._records[held.name] = record
        return self.handle(record, config, lock_at_least_until=now + config.lock_at_least_for)

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        with self._mutex:
            current = self._records.get(name)
            now = self.clock.now()
            if current is None or current.lock_until <= now:
                return False
            if isinstance(expected, int) and current.fencing_token != expected:
                return False
            if isinstance(expected, str) and current.token != expected:
                return False
            self._records[name] = replace(current, lock_until=now, released=True)
            return True

    # asyncio: no I/O and a mutex held for microseconds, so the sync primitives run on
    # the loop itself, without a thread.

    async def _aacquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        return self._acquire(config)

    async def _aunlock(self, held: SimpleLock) -> bool:
        return self._unlock(held)

    async def _aextend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        return self._extend(held, config)

    async def _aforce_unlock(self, name: str, expected: int | str | None) -> bool:
        return self._force_unlock(name, expected)

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        # The reference answer: filter, sort and cut every record, which is what the
        # other stores do with indexes.
        now = self.clock.now()
        with self._mutex:
            found = [r for r in self._records.values() if query.matches(r, now)]
        total = len(found)
        found.sort(key=query.sort_key, reverse=query.descending)
        if after is not None:
            mark = query.keyset(after)
            found = [r for r in found if query.after(query.sort_key(r), mark)]
        page = found[: query.limit + 1]
        return StorePage(
            records=[
                replace(r, token="", token_fingerprint=r.token_fingerprint) for r in page[: query.limit]
            ],
            more=len(page) > query.limit,
            total=total,
        )

    def purge(self, expired_for: timedelta, *, dry_run: bool = False, batch_size: int = 500) -> int:
        # The fencing counters stay in _counters, so a purged name locked again
        # continues from its last token.
        with self._mutex:
            cutoff = self.clock.now() - expired_for
            old = [name for name, r in self._records.items() if r.lock_until <= cutoff]
            if not dry_run:
                for name in old:
                    del self._records[name]
        return len(old)
