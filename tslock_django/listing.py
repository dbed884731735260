"""One listing across several providers: merge each provider's sorted page.

For a page of ``L`` rows each provider is asked for ``L`` records from where it stands; the
pages are merged by the query's sort key (then provider order, then name) and the first
``L`` kept, so nothing is read twice or skipped. A :class:`ListingCursor` holds every
provider's place, signed and bound to the providers and the query, so a cursor from
elsewhere raises :class:`~tslock_django.exceptions.InvalidCursor`. How places move, and how
a previous page is found: ``docs/explanation/listing.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.core import signing

from .core.provider import LockProvider
from .core.query import ALL_STATES, MAX_LIMIT, LockPage, LockQuery, backward_from
from .core.records import ListedRecord, LockRecord, UnreadableRecord
from .exceptions import InvalidCursor, InvalidLockProvider, LockProviderError, UnsupportedQuery

logger = logging.getLogger(__name__)

_SALT = "tslock_django.listing.merged-cursor"
_VERSION = 1

#: A provider's place: ``None`` for its beginning, else a cursor of that provider.
Place = str | None


def describe_failure(alias: str, err: BaseException, failed_to: str = "be read") -> str:
    """One line for an operator: "Lock provider 'x' could not <failed_to>: ...".

    ``LockProviderError`` and ``InvalidLockProvider`` messages are written not to hold
    secrets; any other exception is a bug of the provider, whose text we do not trust,
    so only its type is shown and the traceback goes to the log."""
    if isinstance(err, InvalidLockProvider):
        return f"Lock provider {alias!r} is not configured correctly: {err}"
    if isinstance(err, LockProviderError):
        # The error usually starts with "lock provider 'alias': "; do not say it twice.
        text = str(err).removeprefix(f"lock provider {alias!r}: ")
        return f"Lock provider {alias!r} could not {failed_to}: {text}"
    logger.error("tslock: lock provider %r could not %s", alias, failed_to, exc_info=err)
    return (
        f"Lock provider {alias!r} could not {failed_to}: unexpected {type(err).__name__} "
        "(details in the server log)"
    )


def left_out_reason(alias: str, provider: LockProvider, query: LockQuery) -> str | None:
    """Why ``provider`` cannot take part in ``query``'s order without reading every
    record, or ``None`` when it can."""
    support = provider.listing
    order = query.order.replace("_", " ")
    if query.order not in support.orders:
        return f"Lock provider {alias!r} cannot sort by {order}; its locks are not in this order."
    if query.descending and not support.descending:
        return f"Lock provider {alias!r} cannot sort in reverse; its locks are not in this order."
    return None


def query_limitations(alias: str, provider: LockProvider, query: LockQuery) -> list[str]:
    """What ``provider`` does over the pages it reads instead of in the store, for this
    query (said on the page, so nobody takes a partial search for a complete one)."""
    support, found = provider.listing, []
    if query.search and not support.search:
        found.append(
            f"Lock provider {alias!r} searches only the keys it reads per page; a page may show "
            "fewer matches than exist."
        )
    if query.states != ALL_STATES and not support.states:
        found.append(
            f"Lock provider {alias!r} filters states only over the keys it reads per page; a page "
            "may show fewer locks than exist."
        )
    return found


@dataclass(frozen=True)
class ListingCursor:
    """Every provider's place in a merged listing (decoded).

    Attributes:
        places: where each provider starts the page (``backward``: the page after the
            one meant).
        backward: the page meant is the one that ends where ``places`` begin.
    """

    places: dict[str, Place]
    backward: bool = False


class MergedListing:
    """The merged listing of ``aliases`` for ``query`` (its ``cursor`` is ignored: the
    merged cursor is given to :meth:`page`).

    Args:
        aliases: the providers to list, in display order (the merge's tie-breaker).
        query: prefix, search, states, order, direction and page size (``limit``).
        lookup: alias -> provider (``tslock_django.conf.providers`` by default).
    """

    def __init__(
        self,
        aliases: Sequence[str],
        query: LockQuery,
        lookup: Callable[[str], LockProvider] | None = None,
    ) -> None:
        if lookup is None:
            from .conf import providers

            lookup = providers.__getitem__
        self.aliases = list(aliases)
        # A page is at most MAX_LIMIT - 1 rows: stepping back reads one record more.
        self.query = replace(query, cursor=None, limit=min(query.limit, MAX_LIMIT - 1))
        self.lookup = lookup
        text = json.dumps([self.aliases, self.query.shape, self.query.limit], ensure_ascii=False)
        #: What a merged cursor is bound to: the providers listed, the query and page size.
        self.binding = hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- cursors ---------------------------------------------------------------------

    def encode(self, cursor: ListingCursor) -> str:
        """Sign ``cursor`` for this listing."""
        payload: dict[str, Any] = {"v": _VERSION, "k": self.binding, "p": cursor.places}
        if cursor.backward:
            payload["b"] = 1
        # No timestamp (unlike signing.dumps): the same places always give the same link.
        return signing.Signer(salt=_SALT).sign_object(payload, compress=True)

    def decode(self, text: str | None) -> ListingCursor | None:
        """The merged cursor ``text`` of this listing, ``None`` for the first page.

        Raises:
            InvalidCursor: altered, from another listing (providers, filters, order or
                page size changed) or malformed.
        """
        if not text:
            return None
        try:
            payload = signing.Signer(salt=_SALT).unsign_object(text)
        except signing.BadSignature:
            raise InvalidCursor(
                "the page link is not one this site gave out (altered, truncated, or from before a "
                "SECRET_KEY change); start again from the first page"
            ) from None
        if not isinstance(payload, dict) or payload.get("v") != _VERSION:
            raise InvalidCursor("the page link is malformed; start again from the first page")
        if payload.get("k") != self.binding:
            raise InvalidCursor(
                "the page link belongs to another listing (the providers, search, filters, order or "
                "page size changed); start again from the first page"
            )
        places = payload.get("p")
        if not isinstance(places, dict) or not _places_of(places, self.aliases):
            raise InvalidCursor("the page link is malformed; start again from the first page")
        return ListingCursor(dict(places), payload.get("b") == 1)

    # -- pages -----------------------------------------------------------------------

    def page(self, cursor: str | None = None) -> MergedPage:
        """The page that merged cursor ``cursor`` points to (the first page for ``None``).

        A provider that fails, cannot be built or answers garbage is reported in
        ``MergedPage.errors`` and the others are listed; one that cannot sort by the
        query's order is left out and said so in ``MergedPage.notes``.

        Raises:
            InvalidCursor: ``cursor`` (or a provider cursor inside it) is not one this
                listing gave out.
        """
        decoded = self.decode(cursor)
        result = MergedPage(rows=[])
        sources: list[tuple[str, LockProvider]] = []
        for alias in self.aliases:
            try:
                provider = self.lookup(alias)
                reason = left_out_reason(alias, provider, self.query)
            except Exception as err:  # noqa: BLE001  (one broken store must not hide the others)
                result.errors.append(describe_failure(alias, err))
                continue
            if reason:
                result.notes.append(reason)
                continue
            sources.append((alias, provider))
            result.notes.extend(query_limitations(alias, provider, self.query))
        places: dict[str, Place] = {alias: None for alias, _ in sources}
        if decoded is not None:
            places.update({a: decoded.places.get(a) for a in places})
            if decoded.backward:
                places = self._places_before(sources, decoded)
        self._forward(sources, places, result)
        return result

    def _read(self, alias: str, provider: LockProvider, query: LockQuery) -> tuple[LockPage, list[Any]]:
        """One provider's page and each record's merge key; ``InvalidCursor`` passes, any
        other failure is the provider's."""
        page = provider.query(query)
        records = page.records
        if not isinstance(records, list) or not all(
            isinstance(r, (LockRecord, UnreadableRecord)) for r in records
        ):
            raise LockProviderError("answered something that is not a list of lock records", alias=alias)
        try:
            keys = [self.query.sort_key(r) for r in records]
        except (TypeError, ValueError, AttributeError) as err:
            raise LockProviderError("answered a lock record whose times cannot be read", alias=alias) from err
        return page, keys

    def _forward(
        self, sources: list[tuple[str, LockProvider]], places: dict[str, Place], result: MergedPage
    ) -> None:
        limit, descending = self.query.limit, self.query.descending
        pages: dict[str, tuple[LockPage, list[Any]]] = {}
        for alias, provider in sources:
            try:
                pages[alias] = self._read(alias, provider, replace(self.query, cursor=places[alias]))
            except InvalidCursor:
                raise
            except UnsupportedQuery as err:
                result.notes.append(f"Lock provider {alias!r}: {err}; its locks are not in this order.")
            except Exception as err:  # noqa: BLE001  (one broken store must not hide the others)
                result.errors.append(describe_failure(alias, err))
        order = {alias: i for i, (alias, _) in enumerate(sources)}
        heads = {alias: 0 for alias in pages}
        while len(result.rows) < limit:
            # Take the smallest head in the query's direction; each provider's page is
            # already in that order, so what is taken from it is always a prefix.
            best: str | None = None
            for alias, index in heads.items():
                if index >= len(pages[alias][0].records):
                    continue
                if best is None or self._before(
                    (pages[alias][1][index], order[alias]),
                    (pages[best][1][heads[best]], order[best]),
                    descending,
                ):
                    best = alias
            if best is None:
                break
            result.rows.append(Row(best, pages[best][0].records[heads[best]]))
            heads[best] += 1

        after: dict[str, Place] = dict(places)
        more = False
        for alias, provider in sources:
            if places[alias] is not None and not provider.listing.backward:
                result.backward_blocked.append(
                    f"Lock provider {alias!r} cannot page backwards; start again from the first page."
                )
            if alias not in pages:  # failed: it keeps its place, to resume there
                continue
            page, _ = pages[alias]
            taken, count = heads[alias], len(page.records)
            result.notes.extend(page.notes)
            result.totals[alias] = page.total
            if taken < count:
                after[alias] = page.cursor_after(taken - 1) if taken else places[alias]
                more = True
            elif page.next_cursor is not None:
                after[alias] = page.next_cursor
                more = True
            elif count:
                # Its last record was taken: it stays there (not "done"), so the page
                # back from the next one can step over it, and later locks are seen.
                after[alias] = page.cursor_after(count - 1)
        result.at_start = all(place is None for place in places.values())
        if more:
            result.next_cursor = self.encode(ListingCursor(after))
        if not result.at_start and not result.backward_blocked:
            result.previous_cursor = self.encode(ListingCursor(places, backward=True))
        if not result.errors and len(result.totals) == len(sources):
            counts = list(result.totals.values())
            result.total = sum(c for c in counts if c is not None) if None not in counts else None

    def _places_before(
        self, sources: list[tuple[str, LockProvider]], cursor: ListingCursor
    ) -> dict[str, Place]:
        """Where each provider starts the page that ends where ``cursor``'s places begin:
        read the ``L + 1`` records up to each place, merge, keep the last ``L``; a
        provider starts just after the record before its first kept one, or at its
        beginning when all it read was kept."""
        limit, descending = self.query.limit, self.query.descending
        places: dict[str, Place] = {}
        pages: dict[str, tuple[LockPage, list[Any]]] = {}
        for alias, provider in sources:
            place = places[alias] = cursor.places.get(alias)
            if place is None or not provider.listing.backward:
                continue  # at its beginning already (or cannot step back: said on the page)
            try:
                back = replace(self.query, limit=limit + 1, cursor=backward_from(place))
                pages[alias] = self._read(alias, provider, back)
            except InvalidCursor:
                raise
            except (LockProviderError, InvalidLockProvider, UnsupportedQuery):
                continue  # the forward read reports it, if it still fails
            except Exception:  # a provider's bug: logged; the forward read reports it too
                logger.exception("tslock: lock provider %r could not step back a page", alias)
                continue
        order = {alias: i for i, (alias, _) in enumerate(sources)}
        tails = {alias: len(page.records) for alias, (page, _) in pages.items()}
        for _ in range(limit):
            best: str | None = None
            for alias, tail in tails.items():
                if tail == 0:
                    continue
                # The last record in the query's direction goes last on the page.
                if best is None or self._before(
                    (pages[best][1][tails[best] - 1], order[best]),
                    (pages[alias][1][tail - 1], order[alias]),
                    descending,
                ):
                    best = alias
            if best is None:
                break
            tails[best] -= 1
        for alias, (page, _) in pages.items():
            tail = tails[alias]
            if tail:
                places[alias] = page.cursor_after(tail - 1)
            elif page.previous_cursor is None:
                places[alias] = None  # all it has before its place is on the page
            # else: a store that read less than it was asked for and has more before
            # (never a store that reads limit + 1); it keeps its place.
        return places

    @staticmethod
    def _before(left: tuple[Any, int], right: tuple[Any, int], descending: bool) -> bool:
        """Whether merge key ``left`` comes first: sort key, then provider order, then
        name (in the key already), all reversed when descending."""
        (l_key, l_order), (r_key, r_order) = left, right
        if l_key != r_key:
            return bool(l_key > r_key) if descending else bool(l_key < r_key)
        return l_order > r_order if descending else l_order < r_order


def _places_of(value: dict[Any, Any], aliases: Sequence[str]) -> bool:
    return set(value) <= set(aliases) and all(v is None or isinstance(v, str) for v in value.values())


@dataclass(frozen=True)
class Row:
    """One record on a merged page (maybe an ``UnreadableRecord``) and the alias of the
    provider it came from."""

    alias: str
    record: ListedRecord


@dataclass
class MergedPage:
    """One page of a :class:`MergedListing`.

    Attributes:
        rows: at most ``limit`` rows, in the query's order.
        next_cursor: the merged cursor of the next page, ``None`` at the end.
        previous_cursor: of the page before; ``None`` on the first page or when a
            provider cannot page backwards (``backward_blocked`` says which).
        at_start: this is the first page.
        total: how many records the whole listing has, when every provider said.
        totals: per provider, its ``LockPage.total`` (``None``: not known).
        notes: what a store could not do for this page, one sentence each.
        errors: one message per provider that could not be built or read.
        backward_blocked: why there is no previous page link.
    """

    rows: list[Row]
    next_cursor: str | None = None
    previous_cursor: str | None = None
    at_start: bool = True
    total: int | None = None
    totals: dict[str, int | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    backward_blocked: list[str] = field(default_factory=list)


__all__ = [
    "ListingCursor",
    "MergedListing",
    "MergedPage",
    "Row",
    "describe_failure",
    "left_out_reason",
    "query_limitations",
]
