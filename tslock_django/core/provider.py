"""The provider base class and the lock handle.

A provider implements four primitives (``_acquire``, ``_unlock``, ``_extend``,
``_force_unlock``) plus ``_query`` (one page of a listing); the base class turns them
into the public contract: validation, signals, single-use handles, signed listing
cursors and the rule that a store failure is a
:class:`~tslock_django.exceptions.LockProviderError`, never ``None``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal

from django.dispatch import Signal

from .. import signals
from ..exceptions import (
    InvalidCursor,
    InvalidLockProvider,
    LockProviderError,
    StaleLockHandle,
    UnsupportedQuery,
)
from .aio import finish, in_thread
from .clock import ClockProvider, SystemClock
from .configuration import LockConfiguration
from .durations import DurationLike

# REQUIRED and the words stay importable from here, where providers have always found them.
from .options import FALSE_WORDS as FALSE_WORDS
from .options import REQUIRED as REQUIRED
from .options import TRUE_WORDS as TRUE_WORDS
from .options import option_error, resolve_options
from .query import (
    ALL_STATES,
    MAX_LIMIT,
    Cursor,
    ListingSupport,
    LockPage,
    LockQuery,
    StorePage,
    decode_cursor,
    encode_cursor,
)
from .records import ListedRecord, LockRecord

Guarantee = Literal["strong", "advisory"]

logger = logging.getLogger("tslock_django")


def default_locked_by() -> str:
    """``host:pid``: enough for an operator to find the process that holds a lock."""
    return f"{socket.gethostname()}:{os.getpid()}"


class SimpleLock:
    """A held lock. Single-use: after ``unlock()`` or a successful ``extend()`` this
    handle raises :class:`~tslock_django.exceptions.StaleLockHandle`.

    Attributes:
        record: the :class:`LockRecord` this handle holds (with its token).
        lock_at_least_until: the earliest moment ``unlock()`` can free the lock.
        provider: the provider that granted it.
    """

    def __init__(
        self,
        provider: LockProvider,
        record: LockRecord,
        *,
        lock_at_most_for: timedelta,
        lock_at_least_for: timedelta,
        lock_at_least_until: datetime,
    ) -> None:
        self.provider = provider
        self.record = record
        self.lock_at_most_for = lock_at_most_for
        self.lock_at_least_for = lock_at_least_for
        self.lock_at_least_until = lock_at_least_until
        self._spent: str | None = None
        self._mutex = threading.Lock()

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def fencing_token(self) -> int | None:
        """The store's per-name acquisition counter (``None`` on Workers KV)."""
        return self.record.fencing_token

    @property
    def token(self) -> str:
        return self.record.token

    def _check_unspent(self) -> None:
        """Raise if used up; call with ``_mutex`` held."""
        if self._spent:
            raise StaleLockHandle(
                f"this handle for lock {self.name!r} was already used by {self._spent}(); "
                "use the handle that extend() returned"
            )

    def _spend(self, how: str) -> None:
        with self._mutex:
            self._check_unspent()
            self._spent = how

    # The rules of unlock and extend are written once, here and in the provider's
    # _attempt_* helpers; unlock()/extend() and aunlock()/aextend() differ only in how
    # they wait for the store.

    def unlock(self) -> bool:
        """Release the lock, keeping it held until ``lock_at_least_until`` if that is later.

        Returns:
            ``True`` if the lock was still ours and is now released; ``False`` if it had
            already expired or changed hands (nothing was changed then).

        Raises:
            StaleLockHandle: the handle was already unlocked or extended.
            LockProviderError: the store failed; the handle stays usable, so ``unlock()``
                may be retried; otherwise the lock expires at ``lock_until``.
        """
        self._spend("unlock")
        with self._unspent_unless_answered():
            released = self.provider._unlock(self)
        return self._unlocked(released)

    async def aunlock(self) -> bool:
        """:meth:`unlock` for asyncio code: the same rules, returns and errors.

        If the awaiting task is cancelled, the handle stays usable (the release may or
        may not have reached the store; releasing again is harmless)."""
        self._spend("unlock")
        with self._unspent_unless_answered():
            released = await self.provider._aunlock(self)
        return self._unlocked(released)

    @contextmanager
    def _unspent_unless_answered(self) -> Iterator[None]:
        """Give the handle back its use when the store did not answer: it still owns the
        lock, so the caller may retry (Workers KV answers 429 to a second write within a
        second; a cancelled task may release again)."""
        try:
            yield
        except (LockProviderError, asyncio.CancelledError):
            with self._mutex:
                self._spent = None
            raise

    def _unlocked(self, released: bool) -> bool:
        self.notify(signals.lock_released, released=released)
        return released

    def extend(
        self, lock_at_most_for: DurationLike, lock_at_least_for: DurationLike = 0
    ) -> SimpleLock | None:
        """Hold the lock for ``lock_at_most_for`` from now (store time).

        Returns:
            A new handle (this one becomes unusable), or ``None`` if the lock is no
            longer ours (expired or taken); this handle then stays usable for ``unlock``.

        Raises:
            ValueError: bad durations.
            StaleLockHandle: the handle was already unlocked or extended.
            LockProviderError: the store failed.
        """
        config = LockConfiguration(self.name, lock_at_most_for, lock_at_least_for)
        with self._mutex:
            self._check_unspent()
            successor = self.provider._extend(self, config)
            if successor is not None:
                self._spent = "extend"
        return self._extended(successor)

    async def aextend(
        self, lock_at_most_for: DurationLike, lock_at_least_for: DurationLike = 0
    ) -> SimpleLock | None:
        """:meth:`extend` for asyncio code: the same rules, returns and errors.

        The handle counts as used while the extension is in flight (an ``unlock`` then
        raises ``StaleLockHandle``), and is usable again if the store refused, failed,
        or the awaiting task was cancelled."""
        config = LockConfiguration(self.name, lock_at_most_for, lock_at_least_for)
        self._spend("extend")
        successor = None
        try:
            successor = await self.provider._aextend(self, config)
        finally:
            if successor is None:
                with self._mutex:
                    self._spent = None
        return self._extended(successor)

    def _extended(self, successor: SimpleLock | None) -> SimpleLock | None:
        if successor is not None:
            successor.notify(signals.lock_extended)
        return successor

    def notify(self, signal: Signal, **extra: object) -> None:
        """Send ``signal`` about this holding, with the arguments every tslock signal
        carries (``alias``, ``name``, ``record``, the durations) plus ``extra``."""
        signals.notify(
            signal,
            sender=type(self.provider),
            alias=self.provider.alias,
            name=self.name,
            record=self.record,
            lock_at_most_for=self.lock_at_most_for,
            lock_at_least_for=self.lock_at_least_for,
            **extra,
        )

    def __repr__(self) -> str:
        state = f" spent by {self._spent}()" if self._spent else ""
        return (
            f"<SimpleLock {self.name!r} on {self.provider.alias!r} until "
            f"{self.record.lock_until.isoformat()} fencing={self.fencing_token}{state}>"
        )


@dataclass(frozen=True)
class Attempt:
    """The outcome of one acquire: ``held`` when acquired, else ``holder`` (if known)."""

    held: SimpleLock | None
    holder: LockRecord | None


class LockProvider(ABC):
    """Base class of every lock store.

    Subclasses declare their OPTIONS in ``default_options`` (use ``REQUIRED`` for
    options without a default) and list option names that hold secrets in
    ``secret_options`` so that no repr or message shows them. They implement
    ``_acquire``, ``_unlock``, ``_extend``, ``_force_unlock`` and ``_query``, declare
    what their store answers itself in ``listing``, and implement ``purge`` unless the
    store forgets expired records by itself (then ``self_cleaning`` says how).

    Args:
        alias: the key in ``TSLOCK_PROVIDERS`` (used in messages and signals).
        clock: where caller-side time comes from (tests pass a ``MutableClock``).
        **options: the provider's OPTIONS.

    Raises:
        InvalidLockProvider: an unknown or missing option, or a bad option value.
    """

    guarantee: ClassVar[Guarantee] = "strong"
    default_options: ClassVar[Mapping[str, Any]] = {}
    secret_options: ClassVar[frozenset[str]] = frozenset()
    #: Longest storage key in UTF-8 bytes (the key prefix included).
    max_key_bytes: ClassVar[int] = 255
    #: What the store answers itself when listing (see :class:`ListingSupport`).
    listing: ClassVar[ListingSupport] = ListingSupport()
    #: ``None`` when expired records stay until ``purge``; otherwise how the store
    #: forgets them by itself (shown by ``tslock purge``).
    self_cleaning: ClassVar[str | None] = None

    def __init__(self, alias: str = "default", *, clock: ClockProvider | None = None, **options: Any) -> None:
        self.alias = alias
        self.clock: ClockProvider = clock or SystemClock()
        self.options = self._resolve_options(options)
        self.locked_by = default_locked_by()

    # -- options -----------------------------------------------------------------

    def _resolve_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        return resolve_options(self.alias, type(self).__name__, self.default_options, given)

    def option_error(self, key: str, problem: str) -> InvalidLockProvider:
        """An ``InvalidLockProvider`` for one option, for use in subclasses' validation."""
        return option_error(self.alias, key, problem)

    # -- the public contract --------------------------------------------------------

    def key_for(self, name: str) -> str:
        """The storage key of a lock name (providers with a key prefix override this)."""
        return name

    def validate_name(self, name: str) -> None:
        """Raise ``ValueError`` if the storage key of ``name`` is over this store's limit."""
        size = len(self.key_for(name).encode("utf-8"))
        if size > self.max_key_bytes:
            raise ValueError(
                f"lock name {name[:40]!r}... is too long for provider {self.alias!r}: its storage "
                f"key is {size} UTF-8 bytes and the limit is {self.max_key_bytes}; use a shorter name"
            )

    def lock(self, config: LockConfiguration) -> SimpleLock | None:
        """Try once to acquire the lock described by ``config``.

        Returns:
            A :class:`SimpleLock` when acquired; ``None`` when someone else holds it.

        Raises:
            ValueError: the name does not fit this store.
            LockProviderError: the store failed (never reported as ``None``).
        """
        return self.attempt(config).held

    def attempt(self, config: LockConfiguration) -> Attempt:
        """Like :meth:`lock`, but also returns the holder's record when the store
        reported it, so a skip can say who holds the lock without another round trip."""
        self._attempt_begins(config)
        return self._attempt_ends(config, self._acquire(config))

    async def alock(self, config: LockConfiguration) -> SimpleLock | None:
        """:meth:`lock` for asyncio code: the same rules, returns and errors.

        A task cancelled while the request is in flight leaves no lock behind: the
        request is let finish and, if the store granted the lock, it is released
        before the cancellation goes on."""
        return (await self.aattempt(config)).held

    async def aattempt(self, config: LockConfiguration) -> Attempt:
        """:meth:`attempt` for asyncio code (see :meth:`alock` on cancellation)."""
        self._attempt_begins(config)
        acquiring = asyncio.ensure_future(self._aacquire(config))
        try:
            outcome = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            await finish(self._give_up_acquire(config, acquiring))
            raise
        return self._attempt_ends(config, outcome)

    async def _give_up_acquire(
        self, config: LockConfiguration, acquiring: asyncio.Future[SimpleLock | LockRecord | None]
    ) -> None:
        """The caller was cancelled while acquiring: wait for the store's answer and
        release what it granted, so no lock is left held by nobody."""
        try:
            outcome = await acquiring
        except LockProviderError:
            return  # nothing was granted (or the store cannot say): nothing to release
        attempt = self._attempt_ends(config, outcome)
        if attempt.held is not None:
            try:
                await attempt.held.aunlock()
            except LockProviderError as err:
                logger.error(
                    "acquiring lock %r was cancelled after the store granted it, and releasing it "
                    "failed (it expires at %s): %s",
                    config.name,
                    attempt.held.record.lock_until,
                    err,
                )

    def _attempt_begins(self, config: LockConfiguration) -> None:
        """What every acquire does before asking the store: check the name and send
        ``lock_attempted``."""
        self.validate_name(config.name)
        signals.notify(signals.lock_attempted, sender=type(self), record=None, **self._common(config))

    def _attempt_ends(self, config: LockConfiguration, outcome: SimpleLock | LockRecord | None) -> Attempt:
        """What every acquire does with the store's answer: send ``lock_acquired`` or
        ``lock_skipped`` and return the :class:`Attempt`."""
        common = self._common(config)
        if isinstance(outcome, SimpleLock):
            signals.notify(signals.lock_acquired, sender=type(self), record=outcome.record, **common)
            return Attempt(outcome, None)
        signals.notify(signals.lock_skipped, sender=type(self), record=outcome, **common)
        return Attempt(None, outcome)

    def _common(self, config: LockConfiguration) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "name": config.name,
            "lock_at_most_for": config.lock_at_most_for,
            "lock_at_least_for": config.lock_at_least_for,
        }

    def force_unlock(self, name: str, *, expected: int | str | None) -> bool:
        """Release ``name`` whoever holds it: the operator's escape hatch.

        Args:
            name: the lock name.
            expected: the holding the operator saw: a fencing token (``int``) or a token
                (``str``). The release happens only if the lock is still that holding;
                ``None`` releases unconditionally.

        Returns:
            ``True`` if a held lock was released; ``False`` if nothing matched.

        Raises:
            LockProviderError: the store failed.
        """
        self._check_expected(name, expected)
        return self._force_released(name, expected, self._force_unlock(name, expected))

    async def aforce_unlock(self, name: str, *, expected: int | str | None) -> bool:
        """:meth:`force_unlock` for asyncio code: the same rules, returns and errors."""
        self._check_expected(name, expected)
        return self._force_released(name, expected, await self._aforce_unlock(name, expected))

    def _check_expected(self, name: str, expected: object) -> None:
        self.validate_name(name)
        if isinstance(expected, bool) or not isinstance(expected, (int, str, type(None))) or expected == "":
            # "" would match a released record's empty token in some stores.
            raise ValueError(
                f"expected must be a fencing token (int), a non-empty token (str) or None, got {expected!r}"
            )

    def _force_released(self, name: str, expected: int | str | None, released: bool) -> bool:
        signals.notify(
            signals.lock_force_released,
            sender=type(self),
            alias=self.alias,
            name=name,
            record=None,
            released=released,
            expected=expected,
        )
        return released

    def query(self, query: LockQuery) -> LockPage:
        """One page of the records that ``query`` asks for, without tokens, answered by
        the store (see :class:`~tslock_django.core.query.LockQuery`).

        Returns:
            A :class:`LockPage`: the records, the cursors of the next and previous
            pages, the total when the store has it cheaply, and notes on what the store
            could not do for this page.

        Raises:
            InvalidCursor: ``query.cursor`` is not one this provider gave out for a
                query of this shape.
            UnsupportedQuery: the store cannot sort by ``query.order``.
            LockProviderError: the store failed.
        """
        if not isinstance(query, LockQuery):
            raise TypeError(f"query() takes a LockQuery, got {type(query).__name__}")
        cursor = decode_cursor(self.alias, query)
        support = self.listing
        if query.descending and not support.descending:
            raise UnsupportedQuery(
                f"lock provider {self.alias!r} cannot list in reverse order without reading every record"
            )
        if query.order not in support.orders:
            able = ", ".join(o for o in ("name", "lock_until", "locked_at") if o in support.orders)
            raise UnsupportedQuery(
                f"lock provider {self.alias!r} cannot sort by {query.order} without reading every "
                f"record; it sorts by {able}"
            )
        asked, notes = query, []
        if not support.expired and "expired" in query.states:
            notes.append(
                f"lock provider {self.alias!r} keeps no expired records; only current locks are shown"
            )
            states = query.states - {"expired"}
            if not states:
                return LockPage([], None, total=0 if support.total else None, notes=tuple(notes))
            query = replace(query, states=states)
        backward = cursor is not None and cursor.backward
        if backward and not support.backward:
            raise InvalidCursor(f"lock provider {self.alias!r} cannot page backwards")
        alias = self.alias

        def encode(position: object, *, backward: bool = False) -> str:
            return encode_cursor(alias, asked, position, backward=backward)

        def back_to(position: object) -> str:
            """The page that ends with the record at ``position`` (already shown)."""
            return encode_cursor(alias, asked, position, backward=True, inclusive=True)

        if cursor is None or not cursor.backward:
            page = self._query(query, None if cursor is None else cursor.position)
            records, positions = list(page.records), self._positions(query, page)
            next_cursor = None
            if page.more:
                resume = page.resume if page.resume is not None else (positions[-1] if records else None)
                next_cursor = None if resume is None else encode(resume)
            previous = None
            if cursor is not None and cursor.position is not None and support.backward:
                # Before this page's first record; on an empty page, back to (and with)
                # the record the cursor follows, which the page before showed.
                previous = encode(positions[0], backward=True) if records else back_to(cursor.position)
        else:
            page, records, positions = self._backward(query, cursor)
            # Read in reverse, shown in the query's order; the page after this one
            # starts after its last record.
            # Nothing before the position: the next page is the first one.
            next_cursor = encode(positions[-1] if records else None)
            previous = encode(positions[0], backward=True) if page.more and records else None
        notes.extend(page.notes)
        return LockPage(
            records=records,
            next_cursor=next_cursor,
            previous_cursor=previous,
            total=page.total,
            notes=tuple(notes),
            _cursor_after=lambda index: encode(positions[index]),
        )

    @staticmethod
    def _positions(query: LockQuery, page: StorePage) -> list[Any]:
        if page.positions is not None:
            return list(page.positions)
        return [list(query.sort_key(r)) for r in page.records]

    def _backward(self, query: LockQuery, cursor: Cursor) -> tuple[StorePage, list[ListedRecord], list[Any]]:
        """The page that ends just before ``cursor``'s position, in ``query``'s order:
        read in the reverse order from that position. With ``cursor.inclusive`` (from
        :func:`backward_from`) the record at the position itself ends the page when it
        is still there, found by an exact-name lookup every store can answer."""
        limit = query.limit
        mark: ListedRecord | None = None
        if cursor.inclusive and cursor.position is not None:
            key = query.keyset(cursor.position)
            probe = replace(query, prefix=key[1], order="name", descending=False, limit=1, cursor=None)
            found = self._query(probe, None).records
            if found and found[0].name == key[1] and query.sort_key(found[0]) == key:
                mark = found[0]
                limit -= 1
        if limit > 0:
            page = self._query(replace(query.reversed(), limit=limit), cursor.position)
        else:
            # A page of one, filled by the record itself: read one more only to learn
            # whether anything comes before it.
            before = self._query(replace(query.reversed(), limit=1), cursor.position)
            page = StorePage([], more=bool(before.records), notes=before.notes)
        records = list(reversed(page.records))
        positions = self._positions(query, page)[::-1]
        if mark is not None:
            records.append(mark)
            positions.append(list(query.sort_key(mark)))
        return page, records, positions

    def pages(self, query: LockQuery, *, max_empty_pages: int = 100) -> Iterator[LockPage]:
        """Every page of ``query`` from its cursor on, one request at a time: constant
        memory whatever the store holds.

        Args:
            max_empty_pages: stop after this many pages in a row without a record. A
                store that reads within a budget (Workers KV) may answer an empty page
                and a cursor to go on; a hundred of them is about the API token's whole
                five-minute allowance, and a store handing out endless fresh cursors
                would otherwise keep the walk going forever.

        Raises:
            LockProviderError: the store failed, handed out a cursor it had already
                given, or ``max_empty_pages`` empty pages in a row.
        """
        seen: set[str] = set()
        empty = 0
        while True:
            page = self.query(query)
            yield page
            if page.next_cursor is None:
                return
            if page.next_cursor in seen:
                raise LockProviderError(
                    "the listing repeated a page cursor; stopped reading", alias=self.alias
                )
            empty = 0 if page.records else empty + 1
            if empty >= max_empty_pages:
                raise LockProviderError(
                    f"the listing gave {empty} pages in a row without a record; stopped reading "
                    "(narrow the query with a prefix)",
                    alias=self.alias,
                )
            seen.add(page.next_cursor)
            query = replace(query, cursor=page.next_cursor)

    def list_locks(self, prefix: str = "") -> list[ListedRecord]:
        """Every record whose name starts with ``prefix``, expired ones included where
        the store keeps them, by name, without tokens (``token`` is empty;
        ``token_fingerprint`` identifies the holding), and an ``UnreadableRecord`` for
        each stored value that is not a record. A convenience that walks
        :meth:`query`'s pages: for large stores, use ``query`` or ``pages``.

        Raises:
            LockProviderError: the store failed.
        """
        states = ALL_STATES if self.listing.expired else ALL_STATES - {"expired"}
        query = LockQuery(prefix=prefix, states=states, order="name", limit=MAX_LIMIT)
        return [record for page in self.pages(query) for record in page.records]

    def purge(self, expired_for: timedelta, *, dry_run: bool = False, batch_size: int = 500) -> int:
        """Delete the records that expired more than ``expired_for`` ago, in batches of
        ``batch_size``; a held lock or one in its ``lock_at_least_for`` is never
        touched, and a purged name locked again still gets a higher fencing token.

        Returns:
            How many records were deleted (with ``dry_run``: would be; nothing changes).

        Raises:
            NotImplementedError: the store forgets expired records itself
                (``self_cleaning`` says how).
            LockProviderError: the store failed.
        """
        raise NotImplementedError(
            f"lock provider {self.alias!r} needs no purge: {self.self_cleaning or 'it cannot purge'}"
        )

    def close(self) -> None:  # noqa: B027  (an optional hook, not an abstract method)
        """Free connections or clients; the provider may be used again afterwards."""

    async def aclose(self) -> None:
        """Free connections or clients, the async ones included (call it on the event
        loop that used them); the provider may be used again afterwards. By default
        :meth:`close`."""
        self.close()

    # -- for subclasses ------------------------------------------------------------

    @abstractmethod
    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        """Acquire and return the handle; when held, return the holder's record if the
        store reported it, else ``None``; raise ``LockProviderError`` on failure."""

    @abstractmethod
    def _unlock(self, held: SimpleLock) -> bool:
        """Release ``held`` if its token still owns the lock, honouring
        ``held.lock_at_least_until``; return whether it did."""

    @abstractmethod
    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        """Extend ``held`` if its token still owns an unexpired lock; return the new handle."""

    @abstractmethod
    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        """Release ``name`` if it matches ``expected`` (see ``force_unlock``)."""

    @abstractmethod
    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        """One page of ``query`` in the store: records that ``query.matches`` (tokens
        left out), in ``query.sort_key`` order (reversed when ``query.descending``),
        strictly after keyset ``after`` (``query.keyset(after)``; ``None`` for the
        start), at most ``query.limit`` of them, and ``more`` when there are others.
        Stores that do not page by keyset return ``positions`` (and maybe ``resume``)
        and get them back as ``after``.

        A stored value that is not a record is an ``UnreadableRecord`` in the page
        (whatever states are asked for, when its name matches), never an exception
        for the whole page; its place is where the store's walk found it, given in
        ``positions`` when ``query.sort_key`` cannot know it (a time order)."""

    # The async primitives. By default each runs its sync primitive in a worker thread,
    # so a provider written for sync code works unchanged under asyncio; a provider
    # with an async client overrides them with native I/O (same answers, same errors).

    async def _aacquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        """:meth:`_acquire` for asyncio code (default: in a worker thread)."""
        return await in_thread(self._acquire, config)

    async def _aunlock(self, held: SimpleLock) -> bool:
        """:meth:`_unlock` for asyncio code (default: in a worker thread)."""
        return await in_thread(self._unlock, held)

    async def _aextend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        """:meth:`_extend` for asyncio code (default: in a worker thread)."""
        return await in_thread(self._extend, held, config)

    async def _aforce_unlock(self, name: str, expected: int | str | None) -> bool:
        """:meth:`_force_unlock` for asyncio code (default: in a worker thread)."""
        return await in_thread(self._force_unlock, name, expected)

    def handle(
        self,
        record: LockRecord,
        config: LockConfiguration,
        lock_at_least_until: datetime | None = None,
    ) -> SimpleLock:
        """Build the handle for a record this provider just acquired or extended.
        ``lock_at_least_until`` defaults to ``record.locked_at + lock_at_least_for``."""
        if lock_at_least_until is None:
            lock_at_least_until = record.locked_at + config.lock_at_least_for
        return SimpleLock(
            self,
            record,
            lock_at_most_for=config.lock_at_most_for,
            lock_at_least_for=config.lock_at_least_for,
            lock_at_least_until=lock_at_least_until,
        )

    def __repr__(self) -> str:
        shown = {k: ("***" if k in self.secret_options and v else v) for k, v in sorted(self.options.items())}
        return f"<{type(self).__name__} {self.alias!r} {shown}>"
