"""``DatabaseLockProvider``: ShedLock's table protocol on any Django database.

Acquire is one statement, the same on every outcome: an upsert that inserts the row of
a new name, or takes over the existing row only where it has expired, and returns the
row it wrote with its fencing token. On PostgreSQL and SQLite the upsert's ``WHERE``
leaves a held row as it is, and no row back means "held"; MariaDB's ``ON DUPLICATE KEY
UPDATE`` writes a held row back unchanged and returns it, which names the holder. Where
the server has no ``RETURNING`` (MySQL, MariaDB before 10.5, SQLite before 3.35)
acquire is ShedLock's own sequence instead: a conditional ``UPDATE`` (take an expired
row), an ``INSERT`` whose conflict means "held", and a ``SELECT`` of what was written or
of the holder. Unlock and extend are one statement each (MySQL's extend hands its new
deadline back through ``LAST_INSERT_ID``). Every statement runs on a cursor of Django's
``connection.cursor()``. Deadlines come from the database's clock by default, so web
nodes with skewed clocks still agree. Locking never deletes rows: after release they
keep the last holder and the fencing counter, which therefore grows monotonically per
name. ``purge()`` deletes rows expired longer than a retention period, raising the
high-water mark in ``tslock_fence`` to their fencing tokens in the same transaction; a
name inserted afresh starts from that mark, so its tokens still grow across a purge.
Why this statement and no other: ``docs/explanation/database.md``.

A listing is one ``SELECT`` per page: a range on the primary key for a prefix, ``LIKE``
for a substring, the states as comparisons with "now", a keyset on ``(key, name)`` and
``LIMIT limit + 1``, never ``OFFSET``; the indexes of migration 0003 serve the current
locks and the time orders. When that page is not the whole answer, a second ``SELECT``
counts the records up to ``COUNT_CAP`` for ``LockPage.total``. Names compare in code
point order on every database (a binary collation; "C" on PostgreSQL, migration 0002).

Times cross the Python/SQL boundary as integer microseconds since the Unix epoch,
converted in SQL, never through Django's datetime adapters: those depend on
``USE_TZ``, ``TIME_ZONE`` and the connection's time zone, and a lock must mean the same
instant whatever a project sets there.

A lock written on a connection that is inside a transaction would stay invisible to
other processes until that transaction commits (and vanish on rollback), which
defeats the lock. The provider then uses a short-lived connection of its own, so the
lock is visible at once and survives the caller's rollback. SQLite allows one writer
at a time, so there that connection would wait for the caller's own transaction: the
provider refuses instead, with a message that says so.

The package, one idea per module: ``provider`` runs the statements (connections,
errors, the protocol's steps); ``statements`` writes them once per provider from a
dialect; ``dialect`` is what every vendor answers and ``postgresql``, ``mysql`` and
``sqlite`` are each vendor's answers; ``listing`` writes a page's ``SELECT``;
``retention`` is ``purge()``; ``tables`` names the tables and limits.
"""

from __future__ import annotations

from .provider import DatabaseLockProvider
from .tables import COUNT_CAP, FENCE_TABLE, MAX_PURGE_BATCH, TABLE

__all__ = ["COUNT_CAP", "FENCE_TABLE", "MAX_PURGE_BATCH", "TABLE", "DatabaseLockProvider"]
