"""The Redis provider's asyncio edge: the same scripts and the same steps as the sync
provider (see ``RedisLockProvider._acquire_steps`` and ``core.steps``), sent over
``redis.asyncio`` connections.

Like the sync edge, it speaks redis-py's connection layer without its client layer (no
retries of a write whose answer was lost) and keeps connections between operations,
one per coroutine running an operation at the same moment. Connections belong to the
event loop that opened them: on another loop (each ``asyncio.run``), the provider opens
new ones. ``aclose()`` closes them; otherwise they are closed when their loop shuts
down.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from ..core.aio import on_loop_shutdown


def async_url_pool(url: str, timeout: float) -> redis.asyncio.ConnectionPool:
    """The asyncio pool for OPTIONS ``url``: the sync pool's settings (no retries)."""
    return redis.asyncio.ConnectionPool.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=AsyncRetry(NoBackoff(), 0),
        client_name="tslock",
    )


#: Connection arguments of a sync pool that are objects of the sync world.
_SYNC_ONLY = frozenset(
    {"parser_class", "redis_connect_func", "event_dispatcher", "retry", "connection_class"}
)


def async_pool_like(pool: redis.ConnectionPool) -> redis.asyncio.ConnectionPool:
    """An asyncio pool that connects as ``pool`` does (same server, credentials, TLS,
    timeouts), without retries. Used for a Django cache's pool, whose sync connections
    cannot serve asyncio code."""
    async_class: type[AbstractConnection]
    if issubclass(pool.connection_class, redis.SSLConnection):
        async_class = redis.asyncio.SSLConnection
    elif issubclass(pool.connection_class, redis.UnixDomainSocketConnection):
        async_class = redis.asyncio.UnixDomainSocketConnection
    else:
        async_class = redis.asyncio.Connection
    accepted: set[str] = set()
    for base in async_class.__mro__:
        init = vars(base).get("__init__")
        if init is not None:
            accepted |= set(inspect.signature(init).parameters)
    # Only settings: the sync pool's parser, callbacks and maintenance handlers are
    # sync objects the asyncio connection must make its own of.
    kwargs = {
        k: v
        for k, v in pool.connection_kwargs.items()
        if k in accepted and k not in _SYNC_ONLY and not k.startswith(("maint", "orig_"))
    }
    kwargs.update(retry=AsyncRetry(NoBackoff(), 0), retry_on_timeout=False)
    return redis.asyncio.ConnectionPool(connection_class=async_class, **kwargs)


class AsyncEdge:
    """Sends packed commands on ``redis.asyncio`` connections of the running loop.

    The connections of a loop are closed by :meth:`aclose`, or else when that loop
    shuts down (see :func:`~tslock_django.core.aio.on_loop_shutdown`), so none is left
    unclosed at exit."""

    def __init__(self, make_pool: Callable[[], redis.asyncio.ConnectionPool]) -> None:
        self._make_pool = make_pool
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: redis.asyncio.ConnectionPool | None = None
        # redis.asyncio's connection methods are untyped: Any keeps mypy strict elsewhere.
        self._kept: list[Any] = []
        self._watcher: AsyncGenerator[None, None] | None = None
        #: The connections in a round trip, and the timer that ends late ones.
        self._busy: set[_Conn] = set()
        self._watchdog: asyncio.TimerHandle | None = None

    async def _pool_of_this_loop(self) -> redis.asyncio.ConnectionPool:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._pool is None:
            # Connections of another loop cannot be used on this one (that loop's
            # watcher closes them when it shuts down).
            pool = self._make_pool()
            kept: list[Any] = []
            self._loop, self._pool, self._kept = loop, pool, kept
            self._watcher = await on_loop_shutdown(lambda: _close(pool, kept))
        return self._pool

    async def roundtrip(self, packed: bytes) -> Any:
        """Send one packed command and read its answer (see the sync ``_roundtrip``).

        A task cancelled while waiting for the answer leaves the connection as it is,
        owing that answer: the next command on it reads and drops it first."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._pool is None:
            await self._pool_of_this_loop()
        kept = self._kept
        try:
            conn = kept.pop()
        except IndexError:
            conn = _Conn(await self._pool.get_connection())  # type: ignore[union-attr, no-untyped-call]
        timeout = conn.connection.socket_timeout
        if timeout is not None:
            self._watch(conn, loop, timeout)
        try:
            connection = conn.connection
            reader = connection._reader
            if conn.broken or conn.owed or reader is None or reader.at_eof():
                await conn.prepare()
            # The usual way, inline: each call less is a coroutine frame fewer to set up
            # and to resume when the answer arrives.
            connection._writer.write(packed)
            conn.owed = 1
            reply = await connection._parser.read_response()
            conn.owed = 0
            if isinstance(reply, redis.ResponseError):
                raise reply
        except asyncio.CancelledError:
            # A cancelled wait for an answer: the connection stays usable, owing it (read
            # first next time).
            kept.append(conn)
            raise
        except redis.ResponseError:
            kept.append(conn)  # an answer, read in full: the connection stays usable
            raise
        except (OSError, redis.ConnectionError) as err:
            # Closed under the read, by the server or by the deadline's timer.
            conn.shut()
            kept.append(conn)
            if conn.late:
                raise redis.TimeoutError("Timeout reading from Redis") from None
            if isinstance(err, OSError):
                raise redis.ConnectionError(f"Error while reading from Redis: {err}") from err
            raise
        except BaseException:
            # A failure or a timeout half-way: what the connection holds is unknown;
            # the next use connects again.
            conn.shut()
            kept.append(conn)
            raise
        finally:
            self._busy.discard(conn)
        kept.append(conn)
        return reply

    # The deadline of a round trip is the connection's socket timeout, as in sync code.
    # One timer per edge rather than one per round trip (asyncio.timeout cost about
    # 10 us a round trip, more than a quarter of it): it fires at the earliest
    # deadline of the connections in use, shuts those that are late (their reads then
    # fail as timeouts), and sets itself again while any are in use.

    def _watch(self, conn: _Conn, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        conn.deadline = loop.time() + timeout
        self._busy.add(conn)
        if self._watchdog is None:
            self._watchdog = loop.call_at(conn.deadline, self._expire_late, loop)

    def _expire_late(self, loop: asyncio.AbstractEventLoop) -> None:
        self._watchdog = None
        if loop is not self._loop:
            return  # the edge moved on to another loop (or forgot its connections)
        now = loop.time()
        for conn in [c for c in self._busy if c.deadline <= now]:
            self._busy.discard(conn)
            conn.expire()
        if self._busy:
            earliest = min(c.deadline for c in self._busy)
            self._watchdog = loop.call_at(earliest, self._expire_late, loop)

    async def aclose(self) -> None:
        """Close the connections of the running loop (those of other loops are closed
        when their loop shuts down)."""
        watcher, loop = self._watcher, self._loop
        self.forget()
        if watcher is not None and loop is asyncio.get_running_loop():
            await watcher.aclose()  # runs its close now

    def forget(self) -> None:
        """Stop using the current connections (sync ``close()``, a forked child); the
        next async operation opens new ones."""
        self._loop, self._pool, self._kept, self._watcher = None, None, [], None
        self._busy = set()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None


async def _close(pool: redis.asyncio.ConnectionPool, kept: list[Any]) -> None:
    connections, kept[:] = list(kept), []
    for conn in connections:
        await conn.connection.disconnect()
    await pool.disconnect()


class _Conn:
    """A ``redis.asyncio`` connection kept by an edge, and how many answers it owes
    (commands sent whose answer nobody read: their task was cancelled meanwhile).

    Commands are written to the connection's stream and answers read with its parser
    directly: the connection's own ``send_packed_command`` and ``read_response`` run
    each write in a task of its own (``wait_for``) and each read under a timeout of
    its own, and close the connection when a read is cancelled; here the edge's one
    timer keeps the deadline (measured on a local Redis: about 40 us a round trip
    through those methods, 17 us this way, 10 us on the sync connection). The
    parser keeps what it read of an answer when a read is cancelled and goes on
    from there on the next call, which is what lets a connection owe an answer
    instead of being closed."""

    __slots__ = ("broken", "connection", "deadline", "late", "owed")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.owed = 0
        #: Shut after a failure (or never connected): connect before the next command.
        self.broken = True
        #: When the round trip in progress is late, on the loop's clock (see AsyncEdge).
        self.deadline = 0.0
        self.late = False

    async def prepare(self) -> None:
        """Make the connection ready for a command: connected (again, if it never was or
        the server closed it: a restart, an idle timeout; as the pool does on checkout),
        and owing no answer (those of cancelled commands are read and dropped)."""
        reader = self.connection._reader
        # At its end with nothing left to read, the answers owed are lost with it.
        if self.broken or reader is None or reader.at_eof():
            await self.reconnect()
        while self.owed:
            reply = await self.connection._parser.read_response()
            self.owed -= 1
            del reply  # an answer nobody waits for any more

    async def reconnect(self) -> None:
        self.owed, self.late, self.broken = 0, False, True
        await self.connection.disconnect()
        await self.connection.connect()
        self.broken = False

    def shut(self) -> None:
        """Close without waiting (the next round trip connects again)."""
        self.owed, self.broken = 0, True
        self.connection._close()

    def expire(self) -> None:
        """The round trip is late: shut the connection, so that its read fails (as a
        timeout, see ``AsyncEdge.roundtrip``)."""
        self.late = True
        self.shut()


class AsyncRedis:
    """The asyncio side of ``RedisLockProvider`` (mixed in before
    ``SteppedPrimitives``, which drives the provider's steps with ``_asend``)."""

    _async_edge: AsyncEdge

    def _asend(self, packed: bytes) -> Awaitable[Any]:
        # The edge's coroutine itself: no frame of its own around it.
        return self._async_edge.roundtrip(packed)

    async def aclose(self) -> None:
        """Close the asyncio connections (call it on the loop that used them), then
        what :meth:`close` closes."""
        await self._async_edge.aclose()
        self.close()  # type: ignore[attr-defined]
