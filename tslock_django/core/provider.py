"""The provider base class (the lock handle is in ``handle``).

A provider implements four primitives (``_acquire``, ``_unlock``, ``_extend``,
``_force_unlock``) plus ``_query`` (one page of a listing); the base class turns them
into the public contract: validation, signals, single-use handles, signed listing
cursors and the rule that a store failure is a
:class:`~tslock_django.exceptions.LockProviderError`, never ``None``.

For asyncio code each primitive has an async twin (``_aacquire``...), by default the
sync one in a worker thread; providers with an async client override them. The rules
around them (``_attempt_begins``/``_attempt_ends``, ``_check_expected``...) are the
sync path's own, so both paths behave alike.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal

from .. import signals
from ..exceptions import (
    InvalidCursor,
    InvalidLockProvider,
    LockProviderError,
    UnsupportedQuery,
)
from .aio import finish, in_thread
from .clock import ClockProvider, SystemClock
from .configuration import LockConfiguration

# The handle lives in its own module; providers have always imported it from here.
from .handle import Attempt as Attempt
from .handle import SimpleLock as SimpleLock

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

#: The largest fencing token a store keeps: a signed 64-bit integer (the database's
#: BIGINT, Redis's integers). Tokens start at 1 and only grow, so none is below 0.
MAX_FENCING_TOKEN = 2**63 - 1


def check_fencing_token(name: str, token: int) -> None:
    """Raise ``ValueError`` unless ``token`` is a fencing token some store could hold
    (0 to :data:`MAX_FENCING_TOKEN`): one out of that range never matches a holding,
    and database drivers would raise ``OverflowError`` on it instead of answering."""
    if not 0 <= token <= MAX_FENCING_TOKEN:
        digits = str(token) if len(str(abs(token))) <= 40 else f"of {len(str(abs(token)))} digits"
        raise ValueError(
            f"fencing token {digits} for lock {name[:200]!r} is out of range: fencing tokens are "
            f"whole numbers from 0 to {MAX_FENCING_TOKEN} (a signed 64-bit integer); pass the "
            "fencing token the store reported (e.g. in the admin or 'tslock list')"
        )


def default_locked_by() -> str:
    """``host:pid``: enough for an operator to find the process that holds a lock."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
        try:
            outcome = self._acquire(config)
        except Exception as err:
            self._attempt_failed(config, err)
            raise
        return self._attempt_ends(config, outcome)

    async def alock(self, config: LockConfiguration) -> SimpleLock | None:
        """:meth:`lock` for asyncio code: the same rules, returns and errors.

        A task cancelled while the request is in flight leaves no lock behind: the
        request is let finish and, if the store granted the lock, it is released
        before the cancellation goes on."""
        return (await self.aattempt(config)).held

    async def aattempt(self, config: LockConfiguration) -> Attempt:
        """:meth:`attempt` for asyncio code (see :meth:`alock` on cancellation).

        One rule for every store: the acquire runs in a task of its own, which the
        caller's cancellation cannot cut short; if the caller is cancelled meanwhile,
        the store's answer is awaited and what it granted is released before the
        cancellation goes on. (A task costs tens of microseconds, against a store's
        round trip of a tenth of a millisecond or more.)"""
        self._attempt_begins(config)
        return await self._attempt_to_the_end(config)

    async def _attempt_to_the_end(self, config: LockConfiguration) -> Attempt:
        acquiring = asyncio.ensure_future(self._aacquire(config))
        try:
            outcome = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            await finish(self._give_up_acquire(config, acquiring))
            raise
        except Exception as err:
            self._attempt_failed(config, err)
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
        if signals.listened(signals.lock_attempted):
            signals.notify(signals.lock_attempted, sender=type(self), record=None, **self._common(config))

    def _attempt_ends(self, config: LockConfiguration, outcome: SimpleLock | LockRecord | None) -> Attempt:
        """What every acquire does with the store's answer: send ``lock_acquired`` or
        ``lock_skipped`` and return the :class:`Attempt`."""
        if isinstance(outcome, SimpleLock):
            if signals.listened(signals.lock_acquired):
                signals.notify(
                    signals.lock_acquired, sender=type(self), record=outcome.record, **self._common(config)
                )
            return Attempt(outcome, None)
        if signals.listened(signals.lock_skipped):
            signals.notify(signals.lock_skipped, sender=type(self), record=outcome, **self._common(config))
        return Attempt(None, outcome)

    def _attempt_failed(self, config: LockConfiguration, err: Exception) -> None:
        """The store failed while acquiring: send ``lock_failed`` (the caller re-raises)."""
        signals.notify(signals.lock_failed, sender=type(self), record=None, error=err, **self._common(config))

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
            ValueError: the name does not fit this store, or ``expected`` is not a
                holding: a fencing token out of 0..``MAX_FENCING_TOKEN``, an empty token.
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
        if isinstance(expected, int):
            check_fencing_token(name, expected)

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
