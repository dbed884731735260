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
from collections.abc import AsyncGenerator, Callable
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
        """Send one packed command and read its answer (see the sync ``_roundtrip``)."""
        pool = await self._pool_of_this_loop()
        kept = self._kept
        connection: Any
        try:
            connection = kept.pop()
        except IndexError:
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            reader = getattr(connection, "_reader", None)
            if reader is None or reader.at_eof():
                # Never connected, or the server closed it (a restart, an idle timeout):
                # connect again before anything is sent, as the pool does on checkout.
                await connection.disconnect()
                await connection.connect()
            await connection.send_packed_command([packed], check_health=False)
            reply = await connection.read_response()
        except redis.ResponseError:
            kept.append(connection)  # an answer, read in full: the connection stays usable
            raise
        except BaseException:
            # Interrupted between sending and reading (a failure, or a cancelled task): a
            # late answer must not be read as the answer to the next command.
            connection._close()
            kept.append(connection)
            raise
        kept.append(connection)
        return reply

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


async def _close(pool: redis.asyncio.ConnectionPool, kept: list[Any]) -> None:
    connections, kept[:] = list(kept), []
    for connection in connections:
        await connection.disconnect()
    await pool.disconnect()


class AsyncRedis:
    """The asyncio side of ``RedisLockProvider`` (mixed in before
    ``SteppedPrimitives``, which drives the provider's steps with ``_asend``)."""

    _async_edge: AsyncEdge

    async def _asend(self, packed: bytes) -> Any:
        return await self._async_edge.roundtrip(packed)

    async def aclose(self) -> None:
        """Close the asyncio connections (call it on the loop that used them), then
        what :meth:`close` closes."""
        await self._async_edge.aclose()
        self.close()  # type: ignore[attr-defined]
