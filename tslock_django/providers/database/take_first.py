"""Which acquires try a plain ``UPDATE`` before the upsert (SQLite and MariaDB).

The upsert answers every outcome in one statement: a new name, a free row, a held one
(and names its holder). It costs more than ShedLock's conditional ``UPDATE``, which
only takes a row that exists and is free: on MariaDB far more (see ``carried``), on
SQLite a larger program to run between two waits for the disk. When the ``UPDATE``
takes nothing (a held or a new name) the upsert must still run: two statements.

So the ``UPDATE`` goes first only where it is likely to win: for a name whose last
attempt in this process was granted (a job that runs on one node, or the node that
keeps winning). Every other attempt, a name's first and one refused here last, is the
upsert alone: one statement whether granted or refused. A process pays two only when
it won a name last and finds it held now.
"""

from __future__ import annotations

import threading

#: Names remembered as last granted here (a bounded memory; the oldest go first).
REMEMBERED = 1024


class TakeFirst:
    """The names this provider last won, the oldest forgotten beyond ``REMEMBERED``."""

    def __init__(self) -> None:
        self._won: dict[str, None] = {}
        self._mutex = threading.Lock()

    def __contains__(self, name: str) -> bool:
        """Whether ``name``'s last attempt here was granted: try the ``UPDATE`` first."""
        return name in self._won

    def granted(self, name: str) -> None:
        with self._mutex:
            self._won.pop(name, None)
            self._won[name] = None
            if len(self._won) > REMEMBERED:
                del self._won[next(iter(self._won))]

    def refused(self, name: str) -> None:
        with self._mutex:
            self._won.pop(name, None)
