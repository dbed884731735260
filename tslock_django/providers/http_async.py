"""The asyncio edge of the HTTP providers: ``AsyncPooledClient`` sends the same
:class:`~tslock_django.providers.http.Request` as ``PooledClient`` does, on an
``httpx.AsyncClient``, with the same bounds (answer size, whole-request deadline, gzip
undone in pieces: :class:`~tslock_django.providers.http._Body`) and the same errors
(:func:`~tslock_django.providers.http.transport_errors`). Only the send differs.

A client belongs to the event loop that opened it: on another loop (each
``asyncio.run``) a new one is opened. ``aclose()`` closes it; otherwise it is closed
when its loop shuts down, so none is left unclosed at exit.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections.abc import AsyncGenerator, Coroutine, Iterable
from typing import Any

import httpcore
import httpx

from ..core.aio import on_loop_shutdown
from .http import (
    MAX_BODY_BYTES,
    PooledClient,
    Request,
    _Body,
    _in_memory,
    _Refused,
    refused,
    transport_errors,
)

#: Connections per ``httpx.AsyncClient``, and how many clients a provider opens at most
#: on one loop (together about the sync client's 100 connections).
POOL_SIZE = 8
POOLS = 12
#: Bytes a connection holds back before sending them without waiting for a read (see
#: ``_Stream``): more than a lock request's head and body.
HELD_BACK = 64 * 1024


class AsyncPooledClient:
    """The ``httpx.AsyncClient`` instances of a provider on the running event loop,
    opened on first use.

    Several small pools rather than one large one: httpcore's pool does work quadratic
    in its connections each time a request starts or ends (measured with 64 requests
    at once against the local Worker, Python's CPU time for 64 acquires and releases:
    0.7-1.0 s on one pool of 64 connections, 0.18 s on pools of 16, 0.14 s on pools of
    8). A request goes to the first pool with a free connection, so one caller at a
    time keeps to one connection, and 64 callers at once spread over eight pools.

    Args:
        pooled: the provider's sync client, whose settings (base URL, headers,
            timeout) and transport this one uses. A sync ``httpx.BaseTransport`` (an
            in-process fake) is called from the loop; an ``httpx.AsyncBaseTransport``
            is used as is.
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
        #: Requests in progress on each client.
        self._busy: list[int] = []
        self._watchers: list[AsyncGenerator[None, None]] = []

    async def get(self) -> httpx.AsyncClient:
        """The client of the running loop with the fewest requests in progress (the
        first with a free connection), opened if there is none."""
        return self._clients[await self._pick()]

    async def _pick(self) -> int:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Clients of another loop cannot be used on this one (that loop's shutdown
            # closes them).
            self._loop, self._clients, self._busy, self._watchers = loop, [], [], []
        busy = self._busy
        for index, count in enumerate(busy):
            if count < POOL_SIZE:
                return index
        if len(busy) >= POOLS:
            return busy.index(min(busy))
        client = httpx.AsyncClient(
            **self._settings,
            transport=self._transport,
            limits=httpx.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE),
            follow_redirects=False,
        )
        if self._transport is None and sys.version_info >= (3, 11):
            _on_asyncio_streams(client)
        self._clients.append(client)
        busy.append(0)
        self._watchers.append(await on_loop_shutdown(client.aclose))
        return len(busy) - 1

    async def aclose(self) -> None:
        """Close the clients of the running loop (others close with their loop)."""
        watchers, loop = self._watchers, self._loop
        self.forget()
        if loop is asyncio.get_running_loop():
            for watcher in watchers:
                await watcher.aclose()  # runs the client's aclose now

    def forget(self) -> None:
        """Stop using the current clients (their loop's shutdown closes them)."""
        self._loop, self._clients, self._busy, self._watchers = None, [], [], []

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
    ) -> httpx.Response:
        """:meth:`PooledClient.send <tslock_django.providers.http.PooledClient.send>`
        for asyncio code: the same bounds, the same errors."""
        limit = MAX_BODY_BYTES if max_bytes is None else max_bytes
        deadline = time.monotonic() + self.timeout
        with transport_errors(alias, what, secrets, timeout=self.timeout):
            index = await self._pick()
            client, busy = self._clients[index], self._busy
            exchange = self._exchange(client, alias, what, method, url, limit, deadline, kwargs)
            busy[index] += 1
            try:
                if sys.version_info >= (3, 11):
                    async with asyncio.timeout(self.timeout):
                        return await exchange
                return await asyncio.wait_for(exchange, self.timeout)  # pragma: no cover - 3.10
            except TimeoutError:
                raise httpx.TimeoutException("the request's deadline has passed") from None
            finally:
                busy[index] -= 1  # this loop's list, even if the clients were forgotten meanwhile

    def send_request(self, request: Request) -> Coroutine[Any, Any, httpx.Response]:
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

    @staticmethod
    async def _exchange(
        client: httpx.AsyncClient,
        alias: str,
        what: str,
        method: str,
        url: str,
        limit: int,
        deadline: float,
        kwargs: dict[str, Any],
    ) -> httpx.Response:
        response = await client.send(client.build_request(method, url, **kwargs), stream=True)
        try:
            content = _in_memory(response)
            body = _Body(response, limit, deadline, decoded=content is not None)
            if content is not None:
                body.feed(content)
            else:
                async for chunk in response.aiter_raw():
                    body.feed(chunk)
            data = body.finish()
        except _Refused as err:
            raise refused(alias, what, response, err) from None
        finally:
            # Read to its end, the connection goes back to the pool; cut short, closed.
            await response.aclose()
        response._content = data
        return response


class _SyncTransport(httpx.AsyncBaseTransport):
    """A sync transport (an in-process fake of a store) called from the event loop."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        answer = self._transport.handle_request(request)
        content = answer.read()
        # The content is decoded: its encoding and length headers no longer apply.
        dropped = ("content-encoding", "content-length", "transfer-encoding")
        headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in dropped]
        return httpx.Response(answer.status_code, headers=headers, content=content, request=request)

    async def aclose(self) -> None:
        pass  # the sync transport belongs to the sync client


# -- the network under httpcore's pool -------------------------------------------------------


def _on_asyncio_streams(client: httpx.AsyncClient) -> None:
    """Have the connection pools httpx built for ``client`` (direct, and through the
    proxies httpx took from the environment) open their connections as asyncio streams.

    httpcore's default network under asyncio is anyio's, which puts each read and each
    write in a cancel scope of its own with its own timeout (measured against the local
    Worker, in alternating rounds: an acquire and release took 1.18x the sync client's
    time through anyio's network, 1.10x through these streams). The
    request's deadline is kept by :meth:`AsyncPooledClient.send` for the whole exchange,
    connecting included. ``StreamWriter.start_tls`` (for https) is Python 3.11's; on
    3.10 httpx's default stays. Should a later httpx build its pools differently,
    nothing is changed (as ``http._bound_connections`` does for the sync client)."""
    mounts: dict[Any, Any] = getattr(client, "_mounts", {})
    for transport in (getattr(client, "_transport", None), *mounts.values()):
        pool = getattr(transport, "_pool", None)
        if isinstance(getattr(pool, "_network_backend", None), httpcore.AsyncNetworkBackend):
            pool._network_backend = _StreamBackend()  # type: ignore[union-attr]


class _StreamBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network as asyncio streams; failures are httpcore's errors, as anyio's
    backend reports them (httpx turns them into its own)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            local = None if local_address is None else (local_address, 0)
            reader, writer = await asyncio.open_connection(host, port, local_addr=local)
        except OSError as err:
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _Stream(reader, writer)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except OSError as err:
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        return _Stream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _Stream(httpcore.AsyncNetworkStream):
    """One connection. ``timeout`` arguments are left to the request's deadline.

    What httpcore writes is held back until it reads (or writes more than
    :data:`HELD_BACK` bytes, or closes): a request's head and body, which httpcore
    writes one after the other, then leave in one segment rather than two (measured
    against the local Worker: two sends and two wake-ups of the runtime per request
    otherwise). httpcore always reads the answer after writing a request, so nothing
    waits in the buffer for long."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._held: list[bytes] = []
        self._held_bytes = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            await self._flush()
        try:
            return await self._reader.read(max_bytes)  # b"" at the end, as httpcore expects
        except OSError as err:
            raise httpcore.ReadError(str(err) or type(err).__name__) from err

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        if self._held_bytes > HELD_BACK:
            await self._flush()

    async def _flush(self) -> None:
        held, self._held, self._held_bytes = self._held, [], 0
        try:
            self._writer.write(held[0] if len(held) == 1 else b"".join(held))
            await self._writer.drain()
        except OSError as err:
            raise httpcore.WriteError(str(err) or type(err).__name__) from err

    async def aclose(self) -> None:
        # As anyio closes a socket stream: close, let the loop run once, then drop
        # whatever is left (a TLS goodbye the other side never answers).
        self._held, self._held_bytes = [], 0  # a request given up on is not sent now
        transport = self._writer.transport
        if not transport.is_closing():
            transport.close()
            await asyncio.sleep(0)
        transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if self._held:
            await self._flush()  # what was written before TLS goes out before it
        try:
            await self._writer.start_tls(ssl_context, server_hostname=server_hostname)  # type: ignore[attr-defined, unused-ignore]
        except OSError as err:  # ssl.SSLError included
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        return self

    def get_extra_info(self, info: str) -> Any:
        writer = self._writer
        if info == "ssl_object":
            return writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return writer.get_extra_info("sockname")
        if info == "server_addr":
            return writer.get_extra_info("peername")
        if info == "socket":
            return writer.get_extra_info("socket")
        if info == "is_readable":
            # What httpcore asks before reusing an idle connection: did the server say
            # something (most likely, that it closed it)? asyncio has read it already.
            reader = self._reader
            return reader.at_eof() or bool(getattr(reader, "_buffer", b"")) or writer.transport.is_closing()
        return None
