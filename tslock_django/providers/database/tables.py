"""The two tables the database provider writes, and the limits that size its statements."""

from __future__ import annotations

TABLE = "tslock_lock"
FENCE_TABLE = "tslock_fence"
#: The most rows one purge transaction may delete (``batch_size``); a batch holds
#: row locks until it commits, so it should stay short.
MAX_PURGE_BATCH = 10_000
#: Names per statement within a batch: they are parameters, and SQLite before 3.32
#: takes at most 999 of those.
NAMES_PER_STATEMENT = 900
#: Listings count their records (``LockPage.total``) up to this many; beyond it, a
#: count would read more rows than a page is worth, and the total is ``None``.
COUNT_CAP = 10_000
#: The character that escapes ``%``, ``_`` and itself in LIKE patterns: not a
#: backslash, which MySQL also reads as an escape inside string literals.
LIKE_ESCAPE = "!"
