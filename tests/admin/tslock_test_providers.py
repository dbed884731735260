"""Test-only providers for the admin and CLI tests, configured by dotted path in
``TSLOCK_PROVIDERS`` (use ``path_of(cls)``, which works under any pytest import mode)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from tests.kv.fake import FakeKVTransport
from tslock_django.conf import MEMORY_BACKEND
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.provider import LockProvider, SimpleLock
from tslock_django.core.query import ORDERS, ListingSupport, LockQuery, StorePage, fold
from tslock_django.core.records import LockRecord, UnreadableRecord
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_kv import KVLockProvider
from tslock_django.providers.memory import MemoryLockProvider

#: A TSLOCK_PROVIDERS entry for an in-process provider.
MEMORY: dict[str, Any] = {"BACKEND": MEMORY_BACKEND, "OPTIONS": {}}


def path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class StaticProvider(LockProvider):
    """Answers queries over the records given in OPTIONS["records"]; cannot lock, refuses
    writes. Records with naive times (a misbehaving store) are answered as they are, in
    name order only, so the admin's handling of unreadable times can be seen;
    ``UnreadableRecord`` rows come whatever states are asked for, in every order."""

    default_options: ClassVar[dict[str, Any]] = {"records": ()}
    listing: ClassVar = ListingSupport(total=True)
    #: Aliases whose _query ran, in order (tests clear it).
    calls: ClassVar[list[str]] = []

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        StaticProvider.calls.append(self.alias)
        now = datetime.now(timezone.utc)
        found = []
        for record in self.options["records"]:
            readable = isinstance(record, UnreadableRecord) or (
                record.lock_until.tzinfo is not None and record.locked_at.tzinfo is not None
            )
            if readable and not query.matches(record, now):
                continue
            if not readable and not (
                record.name.startswith(query.prefix) and fold(query.search) in fold(record.name)
            ):
                continue
            found.append(record)
        found.sort(key=query.sort_key, reverse=query.descending)
        if after is not None:
            mark = query.keyset(after)
            found = [r for r in found if query.after(query.sort_key(r), mark)]
        return StorePage(records=found[: query.limit], more=len(found) > query.limit, total=len(found))

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        raise NotImplementedError

    def _unlock(self, held: SimpleLock) -> bool:
        raise NotImplementedError

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        raise NotImplementedError

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        raise LockProviderError("this store refuses writes (HTTP 403)", alias=self.alias, status_code=403)


class AdvisoryStaticProvider(StaticProvider):
    guarantee = "advisory"


class FailingProvider(StaticProvider):
    """``_query`` fails in the way OPTIONS["failure"] says."""

    default_options: ClassVar[dict[str, Any]] = {"failure": "store", "records": ()}

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        StaticProvider.calls.append(self.alias)
        failure = self.options["failure"]
        if failure == "store":
            raise LockProviderError(
                "HTTP 401 from the store: the token was refused", alias=self.alias, status_code=401
            )
        if failure == "bug":
            raise RuntimeError("boom with Bearer super-secret-value inside")
        if failure == "garbage":
            # Positions given, so the garbage reaches the caller as the store sent it.
            return StorePage(records=[{"name": "not-a-record"}], more=False, positions=[None])  # type: ignore[list-item]
        raise AssertionError(failure)


class FencelessMemoryProvider(MemoryLockProvider):
    """An in-process stand-in for Workers KV: advisory, no fencing token in listings, and
    ``force_unlock`` takes the holder's token, its fingerprint or nothing (an int is a
    ValueError), as ``KVLockProvider`` does."""

    guarantee = "advisory"
    #: (method, name) of every query / force_unlock call, so tests can see what the admin asked.
    calls: ClassVar[list[tuple[str, str]]] = []

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        FencelessMemoryProvider.calls.append(("query", query.prefix))
        page = super()._query(query, after)
        page.records = [replace(r, fencing_token=None) for r in page.records]
        return page

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        FencelessMemoryProvider.calls.append(("force_unlock", name))
        if isinstance(expected, int):
            raise ValueError("Workers KV has no fencing tokens; release with the token (str) or None")
        current = self._records.get(name)
        if isinstance(expected, str) and current is not None and expected == current.token_fingerprint:
            # KV compares the fingerprint too; the memory provider only knows raw tokens.
            expected = current.token
        return super()._force_unlock(name, expected)


class FakeKVProvider(KVLockProvider):
    """``KVLockProvider`` on the fake namespace in ``FakeKVProvider.fake`` (set by a fixture):
    ``transport`` cannot be given through TSLOCK_PROVIDERS, so the class supplies it."""

    fake: ClassVar[FakeKVTransport | None] = None

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, transport=FakeKVProvider.fake, **kwargs)


class KVLikeMemoryProvider(FencelessMemoryProvider):
    """Lists like Workers KV: by name only, forwards only, search and states over the
    pages it reads, no total."""

    listing: ClassVar = ListingSupport(
        orders=frozenset({"name"}), descending=False, search=False, states=False, backward=False
    )

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        page = super()._query(query, after)
        page.total = None  # KV has no count short of listing every key
        return page


class FlakyMemoryProvider(MemoryLockProvider):
    """A memory store whose queries fail while ``FlakyMemoryProvider.broken`` is set."""

    broken: ClassVar[bool] = False

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        if FlakyMemoryProvider.broken:
            raise LockProviderError("HTTP 503 from the store", alias=self.alias, status_code=503)
        return super()._query(query, after)


#: Every order of a query, both ways: (order, descending).
EVERY_ORDER = [(order, descending) for order in ORDERS for descending in (False, True)]


class SelfCleaningProvider(MemoryLockProvider):
    """A store that forgets expired records by itself, as Workers KV does."""

    self_cleaning: ClassVar[str | None] = "Workers KV deletes each key when its expiration passes"

    def purge(self, expired_for: timedelta, *, dry_run: bool = False, batch_size: int = 500) -> int:
        return LockProvider.purge(self, expired_for, dry_run=dry_run, batch_size=batch_size)


class FailingPurgeProvider(MemoryLockProvider):
    """A store whose purge fails."""

    def purge(self, expired_for: timedelta, *, dry_run: bool = False, batch_size: int = 500) -> int:
        raise LockProviderError("HTTP 500 from the store", alias=self.alias, status_code=500)
