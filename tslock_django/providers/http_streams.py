"""HTTP/1.1 on asyncio streams: the transport under the asyncio edge's ``httpx.AsyncClient``
(see :mod:`~tslock_django.providers.http_async`) for direct connections to a store.

httpx's own asyncio transport is httpcore's pool, written for both asyncio and trio
through anyio. For the small request and answer of a lock operation, that generality
is most of the client's cost: each request takes an anyio lock twice, and each take
yields to the event loop once (a whole turn of the loop, with its ``epoll`` call),
opens cancel scopes, asks sniffio which library runs, and walks the pool's list of
connections twice. Measured against the local Worker, Python's CPU time per
acquire and release was about a quarter higher than the sync client's.

This transport keeps only what a store's client needs: h11 for the protocol (as
httpcore uses it), a list of idle keep-alive connections per origin taken and given
back in constant time, and a bound on the connections open at once. A request whose
answer is waiting costs one write and the reads of its answer. There are no
timeouts here: the asyncio edge bounds the whole exchange, connecting included, by
the provider's ``timeout``. Requests through a proxy (from the environment, as httpx
reads it) keep httpx's own transports.

Failures are httpx's: ``ConnectError``, ``WriteError``, ``ReadError`` and
``RemoteProtocolError``, which :func:`~tslock_django.providers.http.transport_errors`
turns into ``LockProviderError``. A connection that failed, was cut short or was
cancelled half-way is closed, never given to the next request.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

#: How long an idle connection is kept (seconds): less than the idle timeouts of
#: Cloudflare's edge and of common proxies, so that a kept connection is rarely one the
#: other side has just closed. httpcore's default is the same.
KEEPALIVE_EXPIRY = 5.0
#: The most bytes read from the network at once.
READ_BYTES = 64 * 1024

Origin = tuple[bytes, bytes, int]


class StreamTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests over asyncio streams, keeping connections alive.

    Belongs to one event loop (the asyncio edge opens one per loop).

    Args:
        verify: what ``httpx.AsyncClient`` takes as ``verify`` (``True``, a CA bundle's
            path, or an ``ssl.SSLContext``), for ``https`` origins.
        max_connections: the most requests in flight at once, each on a connection of
            its own (so with one origin, as a provider has, the most connections in
            use); a request beyond them waits for one to end.
    """

    def __init__(self, *, verify: Any = True, max_connections: int = 100) -> None:
        self._verify = verify
        self._context: ssl.SSLContext | None = None
        self._idle: dict[Origin, list[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.raw_scheme == b"https" else 80)
        origin: Origin = (url.raw_scheme, url.raw_host, port)
        body = await request.aread()
        await self._slots.acquire()
        conn: _Connection | None = None
        try:
            conn = self._idle_connection(origin) or await self._connect(origin)
            head = await conn.exchange(request, body)
        except BaseException:
            if conn is not None:
                conn.abort()
            self._slots.release()
            raise
        stream = _Answer(self, conn)
        return httpx.Response(
            head.status_code,
            headers=head.headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        # The list runs from the longest idle to the last given back. Those idle too long
        # are closed from its start, so that connections a burst opened do not stay
        # open, and are not closed by the server under us, while one caller at a time
        # keeps using the last one.
        while idle and now - idle[0].idle_since >= KEEPALIVE_EXPIRY:
            idle.pop(0).abort()
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest to be alive
            if conn.reusable():
                return conn
            conn.abort()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        hostname = host.decode("ascii")
        context = self._ssl_context() if scheme == b"https" else None
        try:
            reader, writer = await asyncio.open_connection(
                hostname, port, ssl=context, server_hostname=hostname if context else None
            )
        except OSError as err:  # ssl.SSLError included: a certificate not trusted
            raise httpx.ConnectError(str(err) or type(err).__name__) from err
        return _Connection(origin, reader, writer)

    def _ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            verify = self._verify
            if not isinstance(verify, ssl.SSLContext):
                verify = httpx.create_ssl_context(verify=verify)
            verify.set_alpn_protocols(["http/1.1"])  # as httpcore does for HTTP/1.1
            self._context = verify
        return self._context

    def _given_back(self, conn: _Connection, complete: bool) -> None:
        """The answer on ``conn`` was read to its end (``complete``) or given up on."""
        self._slots.release()
        if complete and not self._closed and conn.next_cycle():
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.abort()

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their answer does."""
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for conn in connections:
                await conn.close()


class _Connection:
    """One HTTP/1.1 connection: its streams and h11's state of it."""

    __slots__ = ("h11", "idle_since", "origin", "reader", "writer")

    def __init__(self, origin: Origin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.origin = origin
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    async def exchange(self, request: httpx.Request, body: bytes) -> h11.Response:
        """Send ``request`` with its ``body`` (in one write) and read the answer's head."""
        protocol = self.h11
        try:
            data = protocol.send(
                h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
            )
            if body:
                data += protocol.send(h11.Data(data=body))
            data += protocol.send(h11.EndOfMessage())
        except h11.LocalProtocolError as err:
            raise httpx.LocalProtocolError(str(err)) from err
        try:
            self.writer.write(data)  # type: ignore[arg-type]
        except OSError as err:
            raise httpx.WriteError(str(err) or type(err).__name__) from err
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                # The connection switched protocols (h11 pauses) or was closed: no
                # HTTP answer will come on it.
                raise httpx.RemoteProtocolError(f"no answer from the server ({type(event).__name__})")
            # An informational answer (100 Continue): the real one follows.

    async def next_event(self) -> Any:
        """h11's next event, reading from the network as long as it needs more."""
        protocol = self.h11
        while True:
            try:
                event = protocol.next_event()
            except h11.RemoteProtocolError as err:
                raise httpx.RemoteProtocolError(str(err)) from err
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.reader.read(READ_BYTES)
            except OSError as err:
                raise httpx.ReadError(str(err) or type(err).__name__) from err
            try:
                protocol.receive_data(data)  # b"": the other side closed
            except h11.RemoteProtocolError as err:
                raise httpx.RemoteProtocolError(str(err)) from err

    def next_cycle(self) -> bool:
        """Make the connection ready for the next request; False if it cannot serve one
        (the server asked to close it, or either side's message did not end cleanly)."""
        protocol = self.h11
        if protocol.our_state is not h11.DONE or protocol.their_state is not h11.DONE:
            return False
        if protocol.trailing_data[0]:
            # Bytes past the answer's end (a body after a HEAD, 204 or 304 answer, or
            # longer than its length said): they would be read as the next answer.
            return False
        protocol.start_next_cycle()
        return True

    def reusable(self) -> bool:
        """Still worth a request (idle for less than the expiry, which the transport
        checks): not closed by the other side, and with nothing unasked-for waiting to
        be read."""
        reader = self.reader
        return (
            not reader.at_eof()
            and not getattr(reader, "_buffer", b"")
            and not self.writer.transport.is_closing()
        )

    def abort(self) -> None:
        """Close at once, dropping whatever was not sent."""
        self.writer.transport.abort()

    async def close(self) -> None:
        """Close in order, as far as one turn of the loop allows, then drop the rest (a
        TLS goodbye that the other side may never answer)."""
        transport = self.writer.transport
        if not transport.is_closing():
            transport.close()
            await asyncio.sleep(0)
        transport.abort()


class _Answer(httpx.AsyncByteStream):
    """An answer's body as it arrives; closing it gives the connection back."""

    def __init__(self, transport: StreamTransport, conn: _Connection) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            while True:
                event = await conn.next_event()
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._complete = True
                    return
                elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                    raise httpx.RemoteProtocolError("the server closed the connection mid-answer")
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._transport._given_back(conn, self._complete)
