"""The SQL of a listing page: a prefix as a range of the primary key, a search as an
escaped ``LIKE``, the states as comparisons with "now", a keyset after the last row and
``LIMIT limit + 1``, never ``OFFSET``; and a count capped at ``COUNT_CAP``."""

from __future__ import annotations

import string
from typing import Any

from ...core.query import ALL_STATES, LockQuery, fold
from ...exceptions import InvalidCursor
from ..epoch import MAX_EPOCH_US
from . import tables
from .dialect import Dialect
from .tables import LIKE_ESCAPE, TABLE


def unmatchable(text: str) -> bool:
    """Whether ``text`` holds a character no lock name can: a control character
    (refused by ``LockConfiguration``) or a lone surrogate (not encodable as UTF-8).
    Such a prefix or search matches nothing, and PostgreSQL would refuse NUL outright."""
    return any(ord(c) < 0x20 or c == "\x7f" or 0xD800 <= ord(c) <= 0xDFFF for c in text)


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code point
    order: the prefix with its last character raised by one (characters that cannot be
    raised, U+10FFFF, are dropped first), or ``None`` when nothing is above them all.
    ``name >= prefix AND name < end`` then selects exactly the names with that prefix."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            raised = 0xE000 if last + 1 == 0xD800 else last + 1  # surrogates are no characters
            return "".join(chars) + chr(raised)
    return None


def like_containing(folded: str) -> str:
    """A LIKE pattern (escape character ``LIKE_ESCAPE``) matching names that contain
    ``folded`` literally: ``%``, ``_`` and the escape character stand for themselves."""
    escaped = "".join(LIKE_ESCAPE + c if c in ("%", "_", LIKE_ESCAPE) else c for c in folded)
    return f"%{escaped}%"


def state_filter(states: frozenset[str], now: str, dialect: Dialect) -> str | None:
    """The WHERE condition of ``states`` given the SQL of "now", using "now" once (so
    at most one parameter), or ``None`` when every state is wanted. A released record
    has an empty token; the time decides whether it is still kept."""
    if states >= ALL_STATES:
        return None
    if "expired" not in states:
        current = dialect.few(f"lock_until > {now}")
        if states == {"held"}:
            return f"{current} AND token <> ''"
        if states == {"at_least"}:
            return f"{current} AND token = ''"
        return current
    if states == {"expired"}:
        return f"lock_until <= {now}"
    # expired and one of the current states: an expired row satisfies either.
    return f"(lock_until <= {now} OR token {'<>' if 'held' in states else '='} '')"


class PageStatements:
    """The statements of listing pages for one provider: its dialect, its SQL of
    "now" (``now_sql``) and that SQL's parameters (``now_params()``, read per page: the
    caller's clock moves)."""

    def __init__(self, dialect: Dialect, now_sql: str, columns: str) -> None:
        self.dialect = dialect
        self.now_sql = now_sql
        self.columns = columns

    def filters(self, query: LockQuery, now: list[Any]) -> tuple[list[str], list[Any]]:
        """The WHERE terms (and their parameters, in order) of ``query``'s prefix,
        search and states, with ``now`` the parameters of "now"."""
        where: list[str] = []
        params: list[Any] = []
        if query.prefix:
            # A range on the primary key, not LIKE: exact, and an index range scan.
            where.append("name >= %s")
            params.append(query.prefix)
            end = prefix_end(query.prefix)
            if end is not None:
                where.append("name < %s")
                params.append(end)
        if query.search:
            folded = fold(query.search)
            letters = "".join(sorted(set(folded) & set(string.ascii_lowercase)))
            where.append(f"{self.dialect.fold('name', letters)} LIKE %s ESCAPE '{LIKE_ESCAPE}'")
            params.append(like_containing(folded))
        states = state_filter(query.states, self.now_sql, self.dialect)
        if states is not None:
            where.append(states)
            params += now
        return where, params

    def count(self, query: LockQuery, now: list[Any]) -> tuple[str, list[Any]] | None:
        """A count of ``query``'s records that reads at most ``COUNT_CAP + 1`` of
        them (a larger answer is no total), or ``None`` where even that could read
        the whole table: a search over expired records, which no index narrows
        (expired names are nearly all of a large table)."""
        if query.search and "expired" in query.states:
            return None
        where, params = self.filters(query, now)
        matching = f"SELECT 1 FROM {TABLE}" + (" WHERE " + " AND ".join(where) if where else "")
        return f"SELECT COUNT(*) FROM ({matching} LIMIT {tables.COUNT_CAP + 1}) AS matching", params

    def page(self, query: LockQuery, after: object | None, now: list[Any]) -> tuple[str, list[Any]]:
        """The one SELECT of a page: ``query``'s filters, the keyset after ``after``,
        its order and ``LIMIT limit + 1`` (the extra row says whether there is more)."""
        where, params = self.filters(query, now)
        descending = query.descending
        beyond = "<" if descending else ">"
        column = query.order  # "name", "lock_until" or "locked_at": column names
        if after is not None:
            key, name = query.keyset(after)
            if isinstance(key, str):  # order by name: the key is the name
                where.append(f"name {beyond} %s")
                params.append(name)
            else:
                if not 0 <= key <= MAX_EPOCH_US:
                    raise InvalidCursor(
                        "the listing cursor holds no valid time; start again from the first page"
                    )
                term, times = self.dialect.beyond(column, beyond)
                where.append(term)
                params += [key] * times + [name]
        direction = " DESC" if descending else ""
        keys = f"name{direction}" if column == "name" else f"{column}{direction}, name{direction}"
        sql = f"SELECT {self.columns} FROM {TABLE}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return f"{sql} ORDER BY {keys} LIMIT {query.limit + 1}", params
