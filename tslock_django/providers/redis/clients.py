"""How the Redis provider connects: a redis-py connection pool from the URL or made like
a Django cache's, a ``redis.asyncio`` pool made like that one for each event loop, and
the scripts registered on each client.

Every pool here has retries off: a write whose answer was lost must reach the caller as
a failure, not run twice. The asyncio pools also have no socket timeout of their own:
redis-py applies it to a write with ``asyncio.wait_for``, which before Python 3.12 can
swallow the task's cancellation (python/cpython#86296): the command then completes and
the cancelled task goes on. The provider bounds each asyncio command with
:func:`deadline` instead, which passes a cancellation on.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from ...core.aio import on_loop_shutdown
from .scripts import SCRIPTS

if sys.version_info >= (3, 11, 3):
    from asyncio import timeout as deadline
else:  # pragma: no cover - older Pythons (asyncio.timeout before 3.11.3 could raise a stray CancelledError)
    from async_timeout import timeout as deadline  # type: ignore[import-not-found, no-redef]

if TYPE_CHECKING:
    from redis.asyncio.connection import AbstractConnection

__all__ = ["AsyncClient", "deadline", "pool_from_url", "pool_like"]


def pool_from_url(url: str, timeout: float) -> redis.ConnectionPool:
    """The pool of OPTIONS ``url``: ``timeout`` to connect and to answer, no retries.

    Raises:
        ValueError, TypeError: redis-py could not read the URL.
    """
    return redis.ConnectionPool.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        client_name="tslock",
    )


def pool_like(shared: redis.ConnectionPool) -> redis.ConnectionPool:
    """A pool that connects as the Django cache's pool ``shared`` does (server,
    credentials, TLS, timeouts) without its retries: the cache may retry a ``SET``, a
    lock write must not run twice."""
    return redis.ConnectionPool(
        connection_class=shared.connection_class,
        **{**shared.connection_kwargs, "retry": Retry(NoBackoff(), 0)},
    )


#: Connection arguments of a sync pool that are objects of the sync world.
_SYNC_ONLY = frozenset(
    {"parser_class", "redis_connect_func", "event_dispatcher", "retry", "connection_class"}
)


def async_pool_like(pool: redis.ConnectionPool) -> redis.asyncio.ConnectionPool:
    """An asyncio pool that connects as ``pool`` does, without retries and without a
    socket timeout (see the module docstring: the caller bounds each command)."""
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
    kwargs.update(retry=AsyncRetry(NoBackoff(), 0), retry_on_timeout=False, socket_timeout=None)
    return redis.asyncio.ConnectionPool(connection_class=async_class, **kwargs)


class AsyncClient:
    """A ``redis.asyncio`` client of one event loop, with the scripts registered on it.

    Its connections are closed by :meth:`aclose`, or else when its loop shuts down (see
    :func:`~tslock_django.core.aio.on_loop_shutdown`), so none is left unclosed at exit.
    """

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = redis.asyncio.Redis(connection_pool=async_pool_like(pool))
        self.scripts: dict[str, Any] = {op: self.client.register_script(src) for op, src in SCRIPTS.items()}
        self._watcher: AsyncGenerator[None, None] | None = None

    async def watch(self) -> None:
        """Close the connections when the loop shuts down."""
        self._watcher = await on_loop_shutdown(self._close)

    async def _close(self) -> None:
        await self.client.aclose()
        await self.client.connection_pool.disconnect()

    async def aclose(self) -> None:
        """Close the connections now (on the loop that opened them)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.aclose()  # runs _close
        else:
            await self._close()
