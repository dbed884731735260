"""Listing at any size: a :class:`LockQuery` that a store answers one page at a time.

Nothing here reads every record. A query names what to list (a name prefix, a
substring of the name, the states wanted), in which order (name, ``lock_until`` or
``locked_at``, either way) and how many; the store answers one :class:`LockPage` and a
cursor to the next one.

Cursors are keyset positions (the last row's sort key and its name), never offsets, so a
page stays correct while locks are taken and released between pages: a record that
exists throughout is listed exactly once. They are opaque to callers: signed with the
project's ``SECRET_KEY`` and bound to the provider alias and to the query they came
from, so a cursor from another query, another provider or a hand-edited URL is refused
with :class:`~tslock_django.exceptions.InvalidCursor` instead of answering a wrong page.

Stores say what they can do themselves in :class:`ListingSupport` (``provider.listing``);
what a store cannot do is refused (an order it cannot sort by) or done over the pages it
reads and said so in ``LockPage.notes``, never by quietly reading everything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from django.core import signing

from ..exceptions import InvalidCursor, UnsupportedQuery
from .records import ListedRecord, LockRecord, UnreadableRecord

QueryState = Literal["held", "at_least", "expired"]
QueryOrder = Literal["name", "lock_until", "locked_at"]

#: Every state a query can ask for, in display order.
STATES: tuple[QueryState, ...] = ("held", "at_least", "expired")
#: The default: the locks that are held now (by a holder, or for ``lock_at_least_for``).
CURRENT_STATES: frozenset[str] = frozenset({"held", "at_least"})
ALL_STATES: frozenset[str] = frozenset(STATES)
#: Every order a query can ask for.
ORDERS: tuple[QueryOrder, ...] = ("name", "lock_until", "locked_at")
#: The largest page a query may ask for.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100

_SALT = "tslock_django.query.cursor"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
# ASCII letters only: the one case folding every store does the same way (SQLite's
# lower() and LIKE fold ASCII only).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(text: str) -> str:
    """``text`` with ASCII letters lower-cased: how ``search`` compares names."""
    return text.translate(_ASCII_LOWER)


def record_state(record: LockRecord, now: datetime) -> QueryState:
    """The query state of ``record`` at ``now``: ``held``, ``at_least`` or ``expired``."""
    if record.lock_until <= now:
        return "expired"
    return "at_least" if record.released else "held"


def epoch_us(moment: datetime) -> int:
    """Whole microseconds since the Unix epoch: how time orders are keyed in cursors."""
    return (moment - _EPOCH) // _MICROSECOND


@dataclass(frozen=True)
class LockQuery:
    """What to list, in which order, how much, and from where.

    Attributes:
        prefix: only names starting with this (a range scan in every store).
        search: only names containing this; ASCII letters match either case, every
            other character (``%``, ``_`` and ``\\`` included) matches only itself.
        states: any of ``"held"``, ``"at_least"`` (released by its holder, kept for
            ``lock_at_least_for``) and ``"expired"``; default: the current locks.
        order: ``"name"``, ``"lock_until"`` or ``"locked_at"``; ties are broken by name.
        descending: reverse the order (the name tie-breaker too).
        limit: at most this many records per page (1 to 1,000).
        cursor: ``LockPage.next_cursor`` or ``previous_cursor`` of an earlier page of the
            same query on the same provider; ``None`` for the first page.

    Raises:
        ValueError: an unknown state or order, no state at all, or a limit out of range.
    """

    prefix: str = ""
    search: str = ""
    states: frozenset[str] = CURRENT_STATES
    order: str = "name"
    descending: bool = False
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not isinstance(self.search, str):
            raise ValueError("LockQuery prefix and search must be strings")
        states = self.states
        if isinstance(states, str) or not isinstance(states, Iterable):
            raise ValueError(f"LockQuery states must be a set of {', '.join(STATES)}; got {states!r}")
        states = frozenset(states)
        unknown = sorted(states - ALL_STATES)
        if unknown:
            raise ValueError(
                f"unknown lock state(s) {', '.join(map(repr, unknown))}; choose from {', '.join(STATES)}"
            )
        if not states:
            raise ValueError(f"LockQuery needs at least one state out of {', '.join(STATES)}")
        object.__setattr__(self, "states", states)
        if self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}; choose from {', '.join(ORDERS)}")
        if not isinstance(self.descending, bool):
            raise ValueError(f"LockQuery descending must be True or False, got {self.descending!r}")
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"LockQuery limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
        if self.cursor is not None and not isinstance(self.cursor, str):
            raise ValueError("LockQuery cursor must be a string from a LockPage, or None")

    # -- what a record must satisfy, and where it sorts --------------------------------

    def matches(self, record: ListedRecord, now: datetime) -> bool:
        """Whether ``record`` belongs in this query's answer at ``now`` (the reference
        semantics that stores answering in SQL or JavaScript reproduce). An
        :class:`~tslock_django.core.records.UnreadableRecord` matches on its name alone,
        whatever states are asked for."""
        name = record.name
        if not name.startswith(self.prefix):
            return False
        if self.search and fold(self.search) not in fold(name):
            return False
        if isinstance(record, UnreadableRecord):
            # A value the store holds but nobody can read has no state to filter by;
            # every listing shows it, so an operator sees it and can deal with it.
            return True
        return record_state(record, now) in self.states

    def sort_key(self, record: ListedRecord) -> tuple[int | str, str]:
        """``(key, name)``: the record's place in this query's (ascending) order; time
        orders are keyed by epoch microseconds. An unreadable record has no times: in a
        time order its key is ``-1``, before every readable time. (Its store may place it
        elsewhere on its own pages, by what its index holds, and then says so in
        ``StorePage.positions``; a merged page takes it where its store reached it.)"""
        if self.order == "name":
            return (record.name, record.name)
        if isinstance(record, UnreadableRecord):
            return (-1, record.name)
        moment = record.lock_until if self.order == "lock_until" else record.locked_at
        return (epoch_us(moment), record.name)

    def keyset(self, position: Any) -> tuple[int | str, str]:
        """A decoded cursor position as this query's ``(key, name)`` keyset.

        Raises:
            InvalidCursor: the position is not a keyset of this query's order.
        """
        if isinstance(position, list) and len(position) == 2 and isinstance(position[1], str):
            key = position[0]
            if self.order == "name" and isinstance(key, str):
                return (key, position[1])
            if self.order != "name" and isinstance(key, int) and not isinstance(key, bool):
                return (key, position[1])
        raise InvalidCursor("the listing cursor does not fit this query; start again from the first page")

    def after(self, key: tuple[int | str, str], mark: tuple[int | str, str]) -> bool:
        """Whether sort key ``key`` comes strictly after keyset ``mark`` in this query's
        direction."""
        return key < mark if self.descending else key > mark

    # -- derived queries ------------------------------------------------------------

    def reversed(self) -> LockQuery:
        """The same query in the opposite direction (how a previous page is read)."""
        return replace(self, descending=not self.descending)

    @property
    def shape(self) -> str:
        """A digest of everything that decides which records come in which order (not
        the limit or the cursor): a cursor is valid only for a query of the same shape."""
        text = json.dumps(
            [self.prefix, self.search, sorted(self.states), self.order, self.descending],
            ensure_ascii=False,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ListingSupport:
    """What a store answers itself (``provider.listing``).

    Attributes:
        orders: the orders the store sorts by; any other is refused with
            :class:`UnsupportedQuery` rather than sorted by reading everything.
        descending: the store also sorts them in reverse (else refused likewise).
        search: substring search runs in the store; otherwise it is applied to the
            pages the store reads, within a budget, and the page says so.
        states: the state filter runs in the store (same fallback as ``search``).
        expired: the store keeps expired records (some drop them when they end).
        total: ``LockPage.total`` is given (an exact count the store has cheaply).
        backward: previous pages (``LockPage.previous_cursor``).
    """

    orders: frozenset[str] = frozenset(ORDERS)
    descending: bool = True
    search: bool = True
    states: bool = True
    expired: bool = True
    total: bool = False
    backward: bool = True

    def limitations(self) -> list[str]:
        """What the store cannot do itself, one phrase each (for the admin and docs)."""
        found = []
        missing_orders = [o for o in ORDERS if o not in self.orders]
        if missing_orders:
            found.append(f"cannot sort by {', '.join(o.replace('_', ' ') for o in missing_orders)}")
        if not self.descending:
            found.append("cannot sort in reverse")
        if not self.search:
            found.append("searches only the keys it reads per page")
        if not self.states:
            found.append("filters states only over the keys it reads per page")
        if not self.expired:
            found.append("keeps no expired records")
        if not self.backward:
            found.append("cannot page backwards")
        return found


@dataclass
class StorePage:
    """What a provider's ``_query`` returns; :meth:`LockProvider.query` turns it into a
    :class:`LockPage` with cursors.

    Attributes:
        records: at most ``limit`` records, in the query's order (readable ones, and an
            :class:`~tslock_django.core.records.UnreadableRecord` for each value that
            is not one).
        more: there may be records after the last one (read ``limit + 1`` to know).
        total: the exact number of records the query matches, if cheap, else ``None``.
        notes: what the store could not do or read for this page (for the reader).
        resume: where the next page starts when that is not just after the last record
            (a store that stopped reading at a budget); JSON-able, store-defined.
        positions: the position just after each record when the store does not page by
            keyset (JSON-able, store-defined); ``None`` means keyset, derived here.
    """

    records: Sequence[ListedRecord]
    more: bool
    total: int | None = None
    notes: list[str] = field(default_factory=list)
    resume: Any = None
    positions: list[Any] | None = None


@dataclass(frozen=True)
class LockPage:
    """One page of a :class:`LockQuery`'s answer.

    Attributes:
        records: the records, without tokens, at most ``limit``; a value the store holds
            that is not a readable record is an
            :class:`~tslock_django.core.records.UnreadableRecord` row among them.
        next_cursor: the cursor of the next page, ``None`` at the end.
        previous_cursor: the cursor of the page before, ``None`` on the first page or
            where the store cannot page backwards.
        total: the number of records the whole query matches, when the store has it
            cheaply; else ``None``.
        notes: what the store could not do or read for this page, in words for an
            operator (e.g. "3 keys written without metadata were not read").
    """

    records: list[ListedRecord]
    next_cursor: str | None
    previous_cursor: str | None = None
    total: int | None = None
    notes: tuple[str, ...] = ()
    _cursor_after: Callable[[int], str] | None = field(default=None, repr=False, compare=False)

    def cursor_after(self, index: int) -> str:
        """A cursor whose page starts right after ``records[index]`` (the admin uses it
        to continue each provider where a merged page stopped taking its records)."""
        if self._cursor_after is None:
            raise ValueError("this page was not made by a provider and has no cursors")
        if not 0 <= index < len(self.records):
            raise IndexError(f"record index {index} is outside this page of {len(self.records)}")
        return self._cursor_after(index)


# -- cursors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cursor:
    """A decoded cursor: the page starts after ``position``; ``backward``: it ends
    before ``position`` (``inclusive``: with the record at ``position`` as its last)."""

    position: Any
    backward: bool = False
    inclusive: bool = False


def _signer() -> signing.Signer:
    # No timestamp: the same position signs to the same cursor, so a walk can tell a
    # store that hands out the same page again (and cursors stay short).
    return signing.Signer(salt=_SALT)


def encode_cursor(
    alias: str, query: LockQuery, position: Any, *, backward: bool = False, inclusive: bool = False
) -> str:
    """Sign ``position`` for ``query`` on provider ``alias`` (``None``: the start);
    ``backward``: the page ending before it (``inclusive``: ending with it)."""
    payload = {"a": alias, "q": query.shape, "p": position}
    if backward:
        payload["b"] = 1
        if inclusive:
            payload["i"] = 1
    return _signer().sign_object(payload)


def decode_cursor(alias: str, query: LockQuery) -> Cursor | None:
    """The cursor of ``query`` for provider ``alias``, or ``None`` for a first page.

    Raises:
        InvalidCursor: the cursor was altered, signed with another ``SECRET_KEY``, or
            belongs to another provider or to a query of another shape.
    """
    if query.cursor is None or query.cursor == "":
        return None
    try:
        payload = _signer().unsign_object(query.cursor)
    except signing.BadSignature:
        raise InvalidCursor(
            "the listing cursor is not one this site gave out (altered, truncated, or from before a "
            "SECRET_KEY change); start again from the first page"
        ) from None
    if not isinstance(payload, dict) or "p" not in payload:
        raise InvalidCursor("the listing cursor is malformed; start again from the first page")
    if payload.get("a") != alias:
        raise InvalidCursor(
            f"the listing cursor belongs to lock provider {payload.get('a')!r}, not {alias!r}; "
            "start again from the first page"
        )
    if payload.get("q") != query.shape:
        raise InvalidCursor(
            "the listing cursor belongs to another query (prefix, search, states or order changed); "
            "start again from the first page"
        )
    return Cursor(payload["p"], bool(payload.get("b")), bool(payload.get("i")))


def backward_from(cursor: str) -> str:
    """Turn a forward cursor (a page that starts after record *x*) into one for the
    page that ends with *x* (or, if *x* is gone or moved, just before its place): how
    a merged listing steps back over one provider.

    Raises:
        InvalidCursor: as :func:`decode_cursor`.
    """
    try:
        payload = _signer().unsign_object(cursor)
    except signing.BadSignature:
        raise InvalidCursor("the listing cursor is not one this site gave out") from None
    if not isinstance(payload, dict):
        raise InvalidCursor("the listing cursor is malformed")
    payload["b"] = payload["i"] = 1
    return _signer().sign_object(payload)


__all__ = [
    "ALL_STATES",
    "CURRENT_STATES",
    "MAX_LIMIT",
    "ORDERS",
    "STATES",
    "Cursor",
    "InvalidCursor",
    "ListingSupport",
    "LockPage",
    "LockQuery",
    "StorePage",
    "UnsupportedQuery",
    "backward_from",
    "decode_cursor",
    "encode_cursor",
    "fold",
    "record_state",
]
