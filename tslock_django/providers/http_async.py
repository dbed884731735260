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
import sys
import time
from collections.abc import AsyncGenerator, Iterable
from typing import Any

import httpx

from ..core.aio import on_loop_shutdown
from .http import (
    MAX_BODY_BYTES,
    POOL_LIMITS,
    PooledClient,
    Request,
    _Body,
    _in_memory,
    _Refused,
    refused,
    transport_errors,
)


class AsyncPooledClient:
    """One ``httpx.AsyncClient`` per event loop for a provider, opened on first use.

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
        self._client: httpx.AsyncClient | None = None
        self._watcher: AsyncGenerator[None, None] | None = None

    async def get(self) -> httpx.AsyncClient:
        """The client of the running loop, opened if there is none."""
        loop = asyncio.get_running_loop()
        client = self._client
        if client is None or self._loop is not loop:
            client = httpx.AsyncClient(
                **self._settings,
                transport=self._transport,
                limits=POOL_LIMITS,
                follow_redirects=False,
            )
            self._loop, self._client = loop, client
            self._watcher = await on_loop_shutdown(client.aclose)
        return client

    async def aclose(self) -> None:
        """Close the client of the running loop (others close with their loop)."""
        watcher, loop = self._watcher, self._loop
        self.forget()
        if watcher is not None and loop is asyncio.get_running_loop():
            await watcher.aclose()  # runs the client's aclose now

    def forget(self) -> None:
        """Stop using the current client (its loop's shutdown closes it)."""
        self._loop, self._client, self._watcher = None, None, None

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
            client = await self.get()
            exchange = self._exchange(client, alias, what, method, url, limit, deadline, kwargs)
            try:
                if sys.version_info >= (3, 11):
                    async with asyncio.timeout(self.timeout):
                        return await exchange
                return await asyncio.wait_for(exchange, self.timeout)  # pragma: no cover - 3.10
            except TimeoutError:
                raise httpx.TimeoutException("the request's deadline has passed") from None

    async def send_request(self, request: Request) -> httpx.Response:
        """:meth:`send` for a :class:`Request` (the asyncio edge of a provider's steps)."""
        return await self.send(
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
