"""The asyncio edge of the HTTP providers: ``AsyncPooledClient`` sends the same
:class:`~tslock_django.providers.http.Request` as ``PooledClient`` does, on an
``httpx.AsyncClient`` with httpx's own transport, with the same bounds (answer size,
gzip undone in pieces: :class:`~tslock_django.providers.http._Body`) and the same errors
(:func:`~tslock_django.providers.http.transport_errors`). Here the provider's ``timeout``
bounds the whole exchange, from waiting for a connection to the answer's last byte:
asyncio can end an await at a deadline, where sync code can only bound each read.

A client belongs to the event loop that opened it: on another loop (each
``asyncio.run``) a new one is opened. ``aclose()`` closes it; otherwise it is closed
when its loop shuts down, so none is left unclosed at exit.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterable
from typing import Any

import httpx

from ..core.aio import on_loop_shutdown
from .http import (
    KEEPALIVE_EXPIRY,
    MAX_BODY_BYTES,
    Answer,
    PooledClient,
    Request,
    _Body,
    _in_memory,
    _Refused,
    refused,
    transport_errors,
)

#: Connections per client, and clients per event loop at most (104 connections, about the
#: sync client's 100). httpcore's pool matches every waiting request against every
#: connection each time one starts or ends, work that grows with the square of the
#: requests in flight: with 64 holders at once on the local Worker, Python's CPU per
#: round was 1.1 s on one client of 100 connections, 0.17 s on clients of 8 (2026-12-04).
CLIENT_CONNECTIONS = 8
CLIENTS = 13
_LIMITS = httpx.Limits(
    max_connections=CLIENT_CONNECTIONS,
    max_keepalive_connections=CLIENT_CONNECTIONS,
    keepalive_expiry=KEEPALIVE_EXPIRY,
)


class AsyncPooledClient:
    """The ``httpx.AsyncClient`` instances of a provider on the running event loop, each
    of :data:`CLIENT_CONNECTIONS` connections, opened as requests need them.

    A request goes to the first client with a free connection, so one caller at a time
    keeps to one connection, and many at once spread over several small pools.

    Args:
        pooled: the provider's sync client, whose settings (base URL, headers,
            timeout, ``verify``) and transport this one uses. A sync
            ``httpx.BaseTransport`` (an in-process fake) is called from the loop; an
            ``httpx.AsyncBaseTransport`` is used as is; without one, httpx's own
            (which also honours the proxies named in the environment).
    """

    def __init__(self, pooled: PooledClient) -> None:
        self.timeout = pooled.timeout
        self._settings: dict[str, Any] = dict(pooled._settings)
        transport = pooled._transport
        self._transport: httpx.AsyncBaseTransport | None
        if transport is None or isinstance(transport, httpx.AsyncBaseTransport):
            self._transport = transport
        else:
            self._transport = _SyncTransport(transport)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: list[httpx.AsyncClient] = []
        self._busy: list[int] = []  # requests in flight, per client
        self._watcher: AsyncGenerator[None, None] | None = None

    async def _pick(self) -> int:
        """The index of the client the next request goes to, on the running loop."""
        if self._loop is not asyncio.get_running_loop():
            await self._open()
        busy = self._busy
        for index, count in enumerate(busy):
            if count < CLIENT_CONNECTIONS:
                return index
        if len(busy) < CLIENTS:
            self._clients.append(self._new_client())
            busy.append(0)
            return len(busy) - 1
        return busy.index(min(busy))

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            **self._settings, transport=self._transport, limits=_LIMITS, follow_redirects=False
        )

    async def _open(self) -> None:
        # Clients of another loop cannot be used on this one (that loop's shutdown closes
        # them). Set before the next await, so that concurrent first calls share them.
        clients: list[httpx.AsyncClient] = []
        self._loop, self._clients, self._busy = asyncio.get_running_loop(), clients, []

        async def close() -> None:
            for client in clients:
                await client.aclose()

        self._watcher = await on_loop_shutdown(close)

    async def aclose(self) -> None:
        """Close the clients of the running loop (those of another loop close with it)."""
        watcher, loop = self._watcher, self._loop
        self.forget()
        if watcher is not None and loop is asyncio.get_running_loop():
            await watcher.aclose()  # runs their aclose now

    def forget(self) -> None:
        """Stop using the current clients (their loop's shutdown closes them)."""
        self._loop, self._clients, self._busy, self._watcher = None, [], [], None

    async def send(
        self,
        alias: str,
        what: str,
        method: str,
        url: str,
        *,
        secrets: Iterable[str] = (),
        max_bytes: int | None = None,
        **kwargs: Any,
    ) -> Answer:
        """:meth:`PooledClient.send <tslock_django.providers.http.PooledClient.send>`
        for asyncio code: the same bounds, the same errors, and ``timeout`` bounds the
        whole exchange."""
        limit = MAX_BODY_BYTES if max_bytes is None else max_bytes
        # The client's own timeouts are the whole of what is left: the deadline starts here.
        deadline = time.monotonic() + self.timeout
        with transport_errors(alias, what, secrets, timeout=self.timeout):
            index = await self._pick()
            client, busy = self._clients[index], self._busy
            busy[index] += 1
            exchange = _exchange(client, alias, what, method, url, limit, deadline, kwargs)
            try:
                if sys.version_info >= (3, 11):
                    async with asyncio.timeout(self.timeout):
                        return await exchange
                return await asyncio.wait_for(exchange, self.timeout)  # pragma: no cover - 3.10
            except (TimeoutError, asyncio.TimeoutError):  # two classes before Python 3.11
                raise httpx.TimeoutException("the request's deadline has passed") from None
            finally:
                busy[index] -= 1  # this loop's list, even if the clients were forgotten meanwhile

    def send_request(self, request: Request) -> Coroutine[Any, Any, Answer]:
        """:meth:`send` for a :class:`Request` (the asyncio edge of a provider's steps):
        its coroutine, with no frame of this method's around it."""
        return self.send(
            request.alias,
            request.what,
            request.method,
            request.url,
            secrets=request.secrets,
            max_bytes=request.max_bytes,
            **request.options,
        )


async def _exchange(
    client: httpx.AsyncClient,
    alias: str,
    what: str,
    method: str,
    url: str,
    limit: int,
    deadline: float,
    kwargs: dict[str, Any],
) -> Answer:
    # Read to its end, the answer's connection goes back to the pool when the block
    # ends; cut short (refused, timed out, cancelled), it is closed.
    async with client.stream(method, url, **kwargs) as response:
        try:
            body = _Body(response, limit, deadline)
            if body.streamed:
                async for chunk in response.aiter_raw():
                    body.feed(chunk)
            return body.answer()
        except _Refused as err:
            raise refused(alias, what, response, err) from None


class _SyncTransport(httpx.AsyncBaseTransport):
    """A sync transport (an in-process fake of a store, or one a test passes in) called
    from the event loop.

    An answer the transport streams is passed on piece by piece, as it reads them, so
    that the bounds of :meth:`AsyncPooledClient.send` hold between pieces as they do in
    sync code (each read blocks the loop: such transports are for tests and
    benchmarks)."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        answer = self._transport.handle_request(request)
        content = _in_memory(answer)
        if content is None:
            return httpx.Response(
                answer.status_code, headers=answer.headers.raw, stream=_Pieces(answer), request=request
            )
        # Read in memory, the content is decoded: its encoding and length headers no
        # longer apply.
        dropped = ("content-encoding", "content-length", "transfer-encoding")
        headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in dropped]
        return httpx.Response(answer.status_code, headers=headers, content=content, request=request)

    async def aclose(self) -> None:
        pass  # the sync transport belongs to the sync client


class _Pieces(httpx.AsyncByteStream):
    """A sync answer's raw body, for ``async for``."""

    def __init__(self, answer: httpx.Response) -> None:
        self._answer = answer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._answer.iter_raw():
            yield piece

    async def aclose(self) -> None:
        self._answer.close()
