"""An **advisory** lock provider on a Workers KV namespace, over the Cloudflare REST API.

Workers KV is eventually consistent, caches reads (a missing key too) for about a
minute, has no compare-and-swap and accepts one write per second per key. A lock built
on it cannot guarantee one holder: two callers in different locations can both acquire
the same name. This provider exists so that a Django app can share lock names with
Workers that already use ``@tslock/cloudflare-kv``, and for jobs where an occasional
overlapping run is harmless. Use
:class:`~tslock_django.providers.cloudflare_do.DurableObjectLockProvider` when it is not.

The storage format is the one of ``@tslock/cloudflare-kv``, byte for byte:

- key: ``key_prefix + name`` (default prefix ``tslock:``), 1..512 UTF-8 bytes;
- value: ``{"lockUntil":<epoch ms>,"lockedAt":<epoch ms>,"lockedBy":"...","token":"..."}``
  (compact JSON, that key order);
- ``expiration_ttl = max(60, floor(remaining_ms / 1000) + 1)``: KV refuses TTLs under 60 s,
  so the key can outlive a short lock; ``lockUntil`` is what decides, never the key's
  existence.

The same JSON is also stored as the key's metadata so that listing needs one request per
1,000 locks; keys written without metadata (by the TypeScript package) are read one by one.
The metadata alone also carries ``"released": true`` when a holder released its lock before
``lock_at_least_for`` ended (the TypeScript format has no such field).

Listing (:meth:`KVLockProvider.query`) follows KV's key listing, which is by name only:
KV answers the prefix and the name order; search and states are applied to the keys read,
within ``list_request_budget`` REST requests per page, and a page that ran out of budget
says how far it got and continues on the next page. List answers are cached for
``list_cache_seconds`` so that repeated views cost nothing. Listings read for admin page
views also draw on one allowance per provider and process (``admin_request_budget`` per
``admin_budget_seconds``), so that browsing never takes the jobs' share of the token's
limit; lock calls never draw on it.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, ClassVar, TypeVar, cast

import httpx
from django.views.decorators.debug import sensitive_variables

from ..core import decode
from ..core.budget import AdminViewListing, RequestAllowance, current_admin_view
from ..core.clock import ClockProvider
from ..core.configuration import LockConfiguration
from ..core.decode import Unreadable
from ..core.durations import to_milliseconds
from ..core.provider import LockProvider, SimpleLock
from ..core.query import CURRENT_STATES, ListingSupport, LockQuery, StorePage, fold, record_state
from ..core.records import ListedRecord, LockRecord, UnreadableRecord, fingerprint
from ..core.steps import SteppedPrimitives
from ..exceptions import InvalidCursor, LockProviderError
from .epoch import from_epoch_ms, to_epoch_ms
from .http import Answer, Request
from .kv_rest import LIST_LIMIT_MAX, MISS, KVKey, KVPage, KVRestNamespace, ListingCache
from .store_options import CLOUDFLARE_MAX_KEY_BYTES, KV, KV_MIN_KEEP_ALIVE_AT_MOST_FOR

T = TypeVar("T")
#: One operation on the namespace, as steps: the requests it sends, then its result.
Steps = Generator[Request, Answer, T]

#: The name this module has always exported for ``to_epoch_ms`` (tests and callers use it).
epoch_ms = to_epoch_ms

#: Workers KV refuses an ``expiration_ttl`` below this many seconds.
MIN_EXPIRATION_TTL = 60
#: Workers KV stores at most this many bytes of metadata per key.
MAX_METADATA_BYTES = 1024
#: The fields of a record, in the order ``@tslock/cloudflare-kv`` writes them.
RECORD_FIELDS = ("lockUntil", "lockedAt", "lockedBy", "token")


def expiration_ttl(lock_until_ms: int, now_ms: int) -> int:
    """The TTL the TypeScript package uses: a second past ``lockUntil``, at least 60 s."""
    remaining_ms = max(0, lock_until_ms - now_ms)
    return max(MIN_EXPIRATION_TTL, math.floor(remaining_ms / 1000) + 1)


@dataclass(frozen=True)
class KVRecord:
    """A lock record as stored in KV (times in epoch milliseconds)."""

    lock_until: int
    locked_at: int
    locked_by: str
    # The ownership token: whoever has it can unlock or extend, so a repr must not show it.
    token: str = field(repr=False)
    #: Released by its holder and kept only for ``lock_at_least_for``. The TypeScript
    #: format has no such field, so it travels in the metadata only (``None``: unknown,
    #: as for a record read from a value).
    released: bool | None = False

    def encode(self) -> str:
        """The exact text ``JSON.stringify`` produces for this record in TypeScript."""
        return json.dumps(self.as_json(), separators=(",", ":"), ensure_ascii=False)

    def as_json(self) -> dict[str, Any]:
        """The record in the TypeScript format (the stored value)."""
        return {
            "lockUntil": self.lock_until,
            "lockedAt": self.locked_at,
            "lockedBy": self.locked_by,
            "token": self.token,
        }

    def metadata(self) -> dict[str, Any]:
        """The key's metadata: the record, and ``released`` when it is."""
        data = self.as_json()
        if self.released:
            data["released"] = True
        return data

    @classmethod
    def read(cls, data: Any) -> KVRecord:
        """The record in ``data`` (a decoded JSON value).

        Epoch times must be finite numbers from 1970 up to year 9999, the range a
        ``datetime`` holds; a fraction is rounded down (the TypeScript package writes one
        for a non-integer duration). ``lockedBy`` and ``token`` must be strings. Extra
        fields are ignored so that a newer writer can add some.

        Raises:
            Unreadable: saying which field is wrong.
        """
        if not isinstance(data, dict):
            raise Unreadable("the value is not a JSON object")
        return cls(
            decode.epoch_ms(data.get("lockUntil"), "lockUntil"),
            decode.epoch_ms(data.get("lockedAt"), "lockedAt"),
            decode.text(data.get("lockedBy"), "lockedBy"),
            decode.text(data.get("token"), "token"),
            data.get("released") is True,
        )

    @classmethod
    def from_json(cls, data: Any) -> KVRecord | None:
        """The record in ``data`` (see :meth:`read`), or ``None`` if it is not one."""
        try:
            return cls.read(data)
        except Unreadable:
            return None

    @classmethod
    def parse(cls, raw: str | bytes, *, key: str) -> KVRecord | str:
        """The record in stored value ``raw``, or a sentence saying what is wrong with it
        (naming ``key``). The value passes the size and shape checks of
        :mod:`tslock_django.core.decode` first."""
        try:
            record = cls.read(decode.load_json(raw))
        except Unreadable as err:
            return (
                f"key {decode.shown(key, 200)!r} does not hold a lock record of @tslock/cloudflare-kv "
                f"({err}); delete the key or use another key_prefix"
            )
        # A value never says whether its holder released it (the metadata does).
        return replace(record, released=None)

    @classmethod
    def decode(cls, raw: str | bytes, *, key: str, alias: str) -> KVRecord:
        """Parse a stored value.

        Raises:
            LockProviderError: naming ``key`` and what is wrong with the value.
        """
        parsed = cls.parse(raw, key=key)
        if isinstance(parsed, str):
            raise LockProviderError(parsed, alias=alias)
        return parsed


class KVLockProvider(SteppedPrimitives, LockProvider):
    """Advisory locks in a Workers KV namespace, compatible with ``@tslock/cloudflare-kv``.

    OPTIONS:
        account_id, namespace_id, api_token: where the namespace is and a token with
            "Workers KV Storage: Edit" (required).
        acknowledge_advisory_lock: must be exactly ``True``: the statement that two
            callers can both acquire a lock and that this is acceptable for your jobs.
        key_prefix: prepended to every lock name (default ``"tslock:"``, as TypeScript).
        confirm_write: re-read after writing and report "not acquired" when another
            token is seen (default ``True``; one more request per acquisition).
        base_url: the API root (default ``https://api.cloudflare.com/client/v4``).
        timeout: seconds one REST request may take, answer included (default 10; see
            the Durable Object provider's ``timeout``).
        list_request_budget: the most REST requests one :meth:`query` call (one page of
            a listing) may spend, list pages and value reads together (default 10, from
            2 to 1,200). The API token's budget is 1,200 requests per 5 minutes, shared
            with the jobs. When it runs out before the page is full, the page holds what
            was found, its notes say how many keys were examined (and which keys written
            without metadata were not read yet), and the next page goes on from there.
            An answer from the cache counts like a request, so a page is the same page
            whether it came from KV or from the cache.
        list_cache_seconds: how long list answers, and values read for a listing, are
            reused (default 5; ``0`` turns the cache off). Reads for acquire, unlock and
            extend never use it, and this provider's own writes clear it, so a process
            sees its own changes at once; another process's changes can show up to this
            late.
        admin_request_budget, admin_budget_seconds: the most REST requests that listings
            read for admin page views may spend in any ``admin_budget_seconds`` (default
            120 per 300, a tenth of the token's limit; 1 to 1,200 per 1 to 3,600 s). One
            allowance per provider and process, shared by every admin user and thread:
            what protects the jobs is the total the admin spends, whoever browses. When it
            is spent, a view shows what the cache still holds and what it read before,
            the admin says until when, and the next page goes on from there. Lock,
            unlock, extend, force release and listings for anything else (``tslock
            list``, scripts) never draw on it.

    Listing: Workers KV lists keys in name order with their metadata, 1,000 per request,
    and has no other index. So :meth:`query` answers ``order="name"`` ascending only
    (``lock_until`` or ``locked_at`` orders, descending order and previous pages are
    refused as :class:`~tslock_django.exceptions.UnsupportedQuery`); ``prefix`` is KV's
    own prefix; ``search`` (on names: it costs no read) and ``states`` are applied to the
    keys read. ``at_least`` is told from ``held`` by this provider's metadata; a current
    lock written without metadata counts as held, and the page says so. ``total`` is
    never given. Expired records are listed until KV drops their key by its TTL. A
    value that is not a lock record is left out with a note naming its key. Cursors
    hold KV's own cursor, which KV may stop accepting after a while: such a cursor is
    an :class:`~tslock_django.exceptions.InvalidCursor`.

    Keyword Args:
        transport: an ``httpx.BaseTransport`` used instead of the network (tests, e.g.
            an in-process fake of the KV REST API).

    Raises:
        InvalidLockProvider: a missing or wrong option; without the acknowledgement.
    """

    guarantee = "advisory"
    default_options: ClassVar[Mapping[str, Any]] = KV.defaults
    secret_options = frozenset({"api_token"})
    max_key_bytes = CLOUDFLARE_MAX_KEY_BYTES
    #: The shortest ``lock_at_most_for`` keep-alive can extend (see
    #: ``KV_MIN_KEEP_ALIVE_AT_MOST_FOR``). Checks and the keep-alive use it to refuse
    #: shorter ones.
    min_keep_alive_at_most_for: ClassVar[timedelta] = KV_MIN_KEEP_ALIVE_AT_MOST_FOR
    listing: ClassVar[ListingSupport] = ListingSupport(
        orders=frozenset({"name"}),
        descending=False,
        search=False,
        states=False,
        expired=True,
        total=False,
        backward=False,
    )
    self_cleaning: ClassVar[str | None] = (
        "Workers KV deletes each lock's key by its TTL, at most about a minute after the lock ends"
    )
    #: Keys asked for per list request (KV's maximum: the fewest requests per listing).
    list_page_keys: int = LIST_LIMIT_MAX

    @sensitive_variables("options", "opts")
    def __init__(
        self,
        alias: str = "default",
        *,
        clock: ClockProvider | None = None,
        transport: httpx.BaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(alias, clock=clock, **options)
        self._validate_options()
        opts = self.options
        self.key_prefix: str = opts["key_prefix"]
        self.confirm_write: bool = opts["confirm_write"]
        self.namespace = KVRestNamespace(
            account_id=opts["account_id"],
            namespace_id=opts["namespace_id"],
            api_token=opts["api_token"],
            base_url=opts["base_url"],
            timeout=float(opts["timeout"]),
            alias=alias,
            transport=transport,
        )
        self._listing_cache = ListingCache(self.clock, float(opts["list_cache_seconds"]))
        #: Shared by every thread of this process (the handler keeps one instance per alias).
        self._admin_allowance = RequestAllowance(
            opts["admin_request_budget"], float(opts["admin_budget_seconds"]), self.clock
        )

    def _validate_options(self) -> None:
        # The checks live in providers.store_options, where the system checks run them too.
        self.options = KV.check(self.alias, self.options)

    # -- keys ------------------------------------------------------------------------

    def key_for(self, name: str) -> str:
        return self.key_prefix + name

    def validate_name(self, name: str) -> None:
        super().validate_name(name)
        if self.key_for(name) in (".", ".."):
            raise ValueError(f"lock name {name!r} gives the storage key {name!r}, which Workers KV refuses")

    def close(self) -> None:
        self.namespace.close()

    # -- store access ----------------------------------------------------------------

    def _now_ms(self) -> int:
        return epoch_ms(self.clock.now())

    def _read(self, key: str) -> Steps[KVRecord | None]:
        raw = yield from self.namespace.get_bytes_steps(key)
        return None if raw is None else KVRecord.decode(raw, key=key, alias=self.alias)

    def _write(self, key: str, record: KVRecord, now_ms: int) -> Steps[None]:
        metadata: dict[str, Any] | None = record.metadata()
        if len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_METADATA_BYTES:
            # A very long locked_by would break the write; listing then reads the value.
            metadata = None
        try:
            yield from self.namespace.put_steps(
                key,
                record.encode(),
                expiration_ttl=expiration_ttl(record.lock_until, now_ms),
                metadata=metadata,
                secrets=(record.token,),
            )
        finally:
            # Even a write that failed may have landed: listings must read again.
            self._listing_cache.clear()

    def _delete(self, key: str) -> Steps[None]:
        try:
            yield from self.namespace.delete_steps(key)
        finally:
            self._listing_cache.clear()

    def _record(self, name: str, stored: KVRecord, *, with_token: bool) -> LockRecord:
        return LockRecord(
            name=name,
            lock_until=from_epoch_ms(stored.lock_until),
            locked_at=from_epoch_ms(stored.locked_at),
            # Cut for display: a holder is informative, and a page shows many.
            locked_by=decode.shown(stored.locked_by),
            token=stored.token if with_token else "",
            fencing_token=None,
            provider=self.alias,
            released=bool(stored.released),
            token_fingerprint=fingerprint(stored.token) if stored.token else "",
        )

    # -- the primitives --------------------------------------------------------------
    # Each is written once, as steps (see core.steps); SteppedPrimitives sends their
    # requests with the namespace's httpx.Client (_send) or an AsyncClient (_asend).

    def _send(self, request: Request) -> Answer:
        return self.namespace._pool.send_request(request)

    async def _asend(self, request: Request) -> Answer:
        return await self.namespace.asend(request)

    async def aclose(self) -> None:
        """Close the namespace's HTTP clients, the asyncio one included."""
        await self.namespace.aclose()

    def _acquire_steps(self, config: LockConfiguration) -> Steps[SimpleLock | LockRecord | None]:
        key = self.key_for(config.name)
        now_ms = self._now_ms()
        current = yield from self._read(key)
        # lockUntil decides, not the key's existence: the 60 s TTL floor keeps keys
        # around after short locks have ended.
        if current is not None and current.lock_until > now_ms:
            return self._record(config.name, current, with_token=False)
        mine = KVRecord(
            lock_until=now_ms + to_milliseconds(config.lock_at_most_for),
            locked_at=now_ms,
            locked_by=self.locked_by,
            token=str(uuid.uuid4()),
        )
        yield from self._write(key, mine, now_ms)
        if self.confirm_write:
            seen = yield from self._read(key)
            if seen is None or seen.token != mine.token:
                # Someone else wrote in between (or our write is not visible here yet).
                # Deleting could remove their record, so we only step back.
                return None if seen is None else self._record(config.name, seen, with_token=False)
        return self.handle(self._record(config.name, mine, with_token=True), config)

    def _unlock_steps(self, held: SimpleLock) -> Steps[bool]:
        key = self.key_for(held.name)
        now_ms = self._now_ms()
        current = yield from self._read(key)
        if current is None or current.token != held.token or current.lock_until <= now_ms:
            return False
        at_least_ms = epoch_ms(held.lock_at_least_until)
        if at_least_ms <= now_ms:
            yield from self._delete(key)
        else:
            kept = KVRecord(at_least_ms, current.locked_at, current.locked_by, current.token, released=True)
            yield from self._write(key, kept, now_ms)
        return True

    def _extend_steps(self, held: SimpleLock, config: LockConfiguration) -> Steps[SimpleLock | None]:
        key = self.key_for(held.name)
        now = self.clock.now()
        now_ms = epoch_ms(now)
        current = yield from self._read(key)
        if current is None or current.token != held.token or current.lock_until <= now_ms:
            return None
        extended = KVRecord(
            now_ms + to_milliseconds(config.lock_at_most_for),
            current.locked_at,
            current.locked_by,
            current.token,
        )
        yield from self._write(key, extended, now_ms)
        return self.handle(
            self._record(held.name, extended, with_token=True),
            config,
            lock_at_least_until=from_epoch_ms(now_ms) + config.lock_at_least_for,
        )

    def _force_unlock_steps(self, name: str, expected: int | str | None) -> Steps[bool]:
        if isinstance(expected, int):
            raise ValueError(
                f"provider {self.alias!r} (Workers KV) has no fencing tokens, so it cannot release "
                f"{name!r} conditional on fencing token {expected}; pass the holder's token (or the "
                "token fingerprint shown in the admin) as a string, or None to release unconditionally"
            )
        key = self.key_for(name)
        current = yield from self._read(key)
        if current is None:
            return False
        if expected is not None and expected not in (current.token, fingerprint(current.token)):
            return False
        yield from self._delete(key)
        return current.lock_until > self._now_ms()

    # -- listing ---------------------------------------------------------------------

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        # The base class has refused what KV cannot do (other orders, descending,
        # backward pages), so this is a forward walk over KV's key listing.
        return _Scan(self, query, after).run()

    def _list_page(self, prefix: str, cursor: str) -> KVPage:
        """One KV list page, fresh (the cache is the scan's business)."""
        try:
            return self.namespace.list(prefix=prefix, limit=self.list_page_keys, cursor=cursor)
        except LockProviderError as err:
            if cursor and err.status_code == 400:
                # KV refuses a cursor it no longer knows (they are opaque and may expire).
                raise InvalidCursor(
                    "Workers KV no longer accepts this listing position; start again from the first page"
                ) from err
            raise


def _position(after: object | None) -> tuple[str, str | None]:
    """``(kv_cursor, last_name)`` from a position this provider gave out."""
    if after is None:
        return "", None
    if (
        isinstance(after, list)
        and len(after) == 2
        and isinstance(after[0], str)
        and (after[1] is None or isinstance(after[1], str))
    ):
        return after[0], after[1]
    raise InvalidCursor("the listing cursor is not a Workers KV position; start again from the first page")


#: How many unread key names a note shows before "and N more".
_NAMES_SHOWN = 5


class _Scan:
    """One page of a listing: walks KV's list pages from a position, applies search and
    states, reads keys without metadata, and stops at ``limit + 1`` records, at the end
    of the listing, or when the request budget is spent.

    A position is ``[kv_cursor, name]``: restart the KV list page at ``kv_cursor`` and
    skip every name up to and including ``name`` (``None``: skip nothing). KV pages are
    restarted rather than keyset-searched because KV cannot start after a given key.
    """

    def __init__(self, provider: KVLockProvider, query: LockQuery, after: object | None) -> None:
        self.provider = provider
        self.query = query
        self.start = _position(after)
        self.budget: int = provider.options["list_request_budget"]
        self.cache = provider._listing_cache
        self.spent = 0
        self.examined = 0
        self.records: list[ListedRecord] = []
        self.positions: list[list[str | None]] = []
        self.notes: list[str] = []
        self.undecided = 0
        #: The admin page view this page is read for, if any: its requests then also
        #: draw on the provider's allowance for admin views.
        self.admin_view: AdminViewListing | None = current_admin_view()
        #: The allowance for admin views refused a request of this page.
        self.refused = False

    # -- requests, within the budget and through the cache -------------------------------

    def may_send(self) -> bool:
        """Whether one more REST request may go out for this page (the cache missed)."""
        if self.admin_view is None:
            return True
        allowance = self.provider._admin_allowance
        until = allowance.take_or_renewal()
        if until is None:
            return True
        self.refused = True
        self.admin_view.spent(
            self.provider.alias,
            f"the Workers KV listing budget for admin views ({allowance.describe()}, "
            "OPTIONS admin_request_budget)",
            until,
        )
        return False

    def list_page(self, prefix: str, cursor: str) -> KVPage | None:
        """The KV page at ``cursor``, or ``None`` when the budget is spent."""
        if self.spent >= self.budget:
            return None
        # A cached answer counts against the budget too: so a page is the same page
        # whether it came from KV or from the cache, and repeated views cost nothing.
        self.spent += 1
        key = ("keys", prefix, cursor, self.provider.list_page_keys)
        cached = self.cache.get(key)
        if cached is not MISS:
            return cast(KVPage, cached)
        if not self.may_send():
            return None
        generation = self.cache.generation
        page = self.provider._list_page(prefix, cursor)
        self.cache.put(key, page, generation=generation, weight=len(page.keys))
        return page

    def value(self, key: str) -> tuple[bool, bytes | None]:
        """``(True, the stored value of key)`` (``None``: deleted since it was listed),
        or ``(False, None)`` when the budget is spent."""
        if self.spent >= self.budget:
            return False, None
        self.spent += 1
        cache_key = ("value", key)
        cached = self.cache.get(cache_key)
        if cached is not MISS:
            return True, cast("bytes | None", cached)
        if not self.may_send():
            return False, None
        generation = self.cache.generation
        content = self.provider.namespace.get_bytes(key)
        # Weighed by the kilobyte: a huge value under the prefix is not kept.
        size = 0 if content is None else len(content) // 1024
        self.cache.put(cache_key, content, generation=generation, weight=1 + size)
        return True, content

    # -- the walk ----------------------------------------------------------------------

    def run(self) -> StorePage:
        provider, query = self.provider, self.query
        key_prefix = provider.key_prefix
        prefix = key_prefix + query.prefix
        needle = fold(query.search)
        now = provider.clock.now()
        cursor, skip = self.start
        # Everything up to ``done`` has been looked at: where the next page starts.
        done: tuple[str, str | None] = self.start
        seen = {cursor}
        while True:
            page = self.list_page(prefix, cursor)
            if page is None:
                return self.stopped(done)
            last = len(page.keys) - 1
            for index, entry in enumerate(page.keys):
                name = entry.name[len(key_prefix) :]
                if not entry.name.startswith(prefix) or (skip is not None and name <= skip):
                    continue
                # Just after the last key of a page is the start of the next page: saves
                # listing a page again only to skip all of it.
                here = (page.cursor, None) if index == last and page.cursor else (cursor, name)
                if needle and needle not in fold(name):
                    self.examined += 1
                    done = here
                    continue
                stored = KVRecord.from_json(entry.metadata) if entry.has_metadata else None
                if stored is None and len(self.records) == query.limit:
                    # Another key that may match: say "more" without spending a read on it.
                    return self.full(done)
                if stored is None:
                    read, content = self.value(entry.name)
                    if not read:
                        if not self.refused:
                            # (A refusal of the admin allowance is said by the admin.)
                            self.note_unread(page.keys[index:], prefix, skip, needle)
                        return self.stopped(done)
                    decoded = self.decode(entry.name, content)
                    if isinstance(decoded, str):
                        # Not a record: a row saying why, whatever states were asked for
                        # (its state is unknown), so the rest of the page still shows.
                        if len(self.records) == query.limit:
                            return self.full(done)
                        self.records.append(UnreadableRecord(name, provider.alias, decoded))
                        self.positions.append(list(here))
                        self.examined += 1
                        done = here
                        continue
                    stored = decoded
                self.examined += 1
                if stored is not None:
                    record = provider._record(name, stored, with_token=False)
                    if stored.released is None and record.lock_until > now and query.states & CURRENT_STATES:
                        self.undecided += 1
                    if record_state(record, now) in query.states:
                        if len(self.records) == query.limit:
                            return self.full(done)
                        self.records.append(record)
                        self.positions.append(list(here))
                done = here
            if not page.cursor:
                return self.answer(False, done)
            if page.cursor in seen:
                raise LockProviderError(
                    "Workers KV answered a listing cursor it had already given; stopped reading "
                    "rather than go round forever",
                    alias=provider.alias,
                )
            seen.add(page.cursor)
            cursor, skip = page.cursor, None
            done = (cursor, None)

    def decode(self, key: str, content: bytes | None) -> KVRecord | str | None:
        """The record in a value read for the listing, the reason it is not one, or
        ``None`` when the key was deleted since it was listed."""
        if content is None:
            return None
        return KVRecord.parse(content, key=key)

    def full(self, done: tuple[str, str | None]) -> StorePage:
        return self.answer(True, done)

    def answer(self, more: bool, done: tuple[str, str | None]) -> StorePage:
        if self.undecided:
            self.notes.append(
                f"{self.undecided} current locks were written without metadata (as "
                "@tslock/cloudflare-kv writes them), which does not say whether the holder released "
                "them early and they are kept only for lock_at_least_for; they count as held"
            )
        return StorePage(
            self.records, more=more, notes=self.notes, positions=self.positions, resume=list(done)
        )

    def stopped(self, done: tuple[str, str | None]) -> StorePage:
        """The budget ran out: what was found, and the place to go on from."""
        if self.refused:
            # The allowance for admin views: the admin says so, with when it renews.
            if done == self.start and not self.records:
                # Nothing read: no link to a next page that would be this one again.
                return self.answer(False, done)
            return self.full(done)
        if len(self.records) < self.query.limit:
            self.notes.append(
                f"examined {self.examined} keys with the {self.budget} REST requests a page may spend "
                "(OPTIONS list_request_budget); the rest follow on the next page"
            )
        if done == self.start and not self.records:
            # Cannot happen with a budget of two or more; never hand out a cursor that
            # would make the reader ask for the same page forever.
            raise LockProviderError(
                "the listing made no progress within its request budget", alias=self.provider.alias
            )
        return self.full(done)

    def note_unread(self, rest: list[KVKey], prefix: str, skip: str | None, needle: str) -> None:
        """Name the keys of this KV page that need a value read the budget had no room for."""
        unread = []
        for entry in rest:
            name = entry.name[len(self.provider.key_prefix) :]
            if not entry.name.startswith(prefix) or (skip is not None and name <= skip):
                continue
            if needle and needle not in fold(name):
                continue
            if not entry.has_metadata or KVRecord.from_json(entry.metadata) is None:
                unread.append(entry.name)
        shown = ", ".join(repr(k) for k in unread[:_NAMES_SHOWN])
        more = f" and {len(unread) - _NAMES_SHOWN} more" if len(unread) > _NAMES_SHOWN else ""
        self.notes.append(
            f"{len(unread)} keys written without metadata (as @tslock/cloudflare-kv writes them) "
            f"were not read yet, at one request each: {shown}{more}; they follow on the next page"
        )
