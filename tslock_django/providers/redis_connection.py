"""The connection a Redis provider keeps checked out of its pool (see
``RedisLockProvider._roundtrip``), and forgetting those connections in a forked child."""

from __future__ import annotations

import os
import select
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from .redis import RedisLockProvider


class Kept:
    """A connection checked out of the pool once and kept by a provider, with a
    ``poll`` on its socket: before each command, one system call that does not wait
    tells whether the server closed the connection (a restart, an idle timeout) or
    left bytes on it; either way it is connected again before anything is sent, as the
    pool does on checkout."""

    __slots__ = ("_poll", "_socket", "connection", "pool")

    def __init__(self, pool: redis.ConnectionPool, connection: Any) -> None:
        self.pool, self.connection = pool, connection
        self._socket: Any = None
        self._poll: Any = None

    def ready(self) -> None:
        connection = self.connection
        sock = getattr(connection, "_sock", None)
        if sock is not None and sock is not self._socket:
            self._watch(sock)
        if sock is None or self._readable():
            connection.disconnect()
            connection.connect()
            self._watch(getattr(connection, "_sock", None))

    def _watch(self, sock: Any) -> None:
        self._socket = sock
        if _HAS_POLL and sock is not None:
            self._poll = select.poll()
            self._poll.register(sock, select.POLLIN)

    def _readable(self) -> bool:
        if _HAS_POLL:
            return bool(self._poll.poll(0))
        return bool(select.select([self._socket], [], [], 0)[0])  # pragma: no cover - Windows


_HAS_POLL = hasattr(select, "poll")
#: Providers whose kept connections a forked child must not use (they are the parent's).
LIVE_PROVIDERS: weakref.WeakSet[RedisLockProvider] = weakref.WeakSet()


def _forget_kept_connections() -> None:
    for provider in list(LIVE_PROVIDERS):
        provider._forget_connections()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_kept_connections)
