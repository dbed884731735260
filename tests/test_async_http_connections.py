"""The asyncio edge's connections (``httpx.AsyncClient``, httpx's own transport), against
real TCP servers on 127.0.0.1 writing raw HTTP: kept alive and reused while they can
serve a request, never after they failed, were cut short or cancelled, and a failure is
a store failure, never "held"."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from tests.test_bounded_answers import Server, do_provider, keep_alive_answer, serve
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.providers.http import KEEPALIVE_EXPIRY

pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")

T = TypeVar("T")

RELEASED = json.dumps({"released": True}).encode()


def released(conn: socket.socket, server: Server) -> None:
    keep_alive_answer(200, {"released": True})(conn, server)


def on_provider(url: str, main: Callable[[DurableObjectLockProvider], Awaitable[T]]) -> T:
    """``main(provider)`` on a fresh loop, for a Durable Object provider of ``url``; its
    async and sync clients are closed afterwards."""
    provider = do_provider(url)

    async def run() -> T:
        try:
            return await main(provider)
        finally:
            await provider.aclose()

    try:
        return asyncio.run(run())
    finally:
        provider.close()


def force_unlocks(
    url: str, times: int, *, pause: float = 0.0, until: threading.Event | None = None
) -> list[bool]:
    """``aforce_unlock`` ``times`` times in a row on one provider and one loop, pausing
    ``pause`` seconds after each (after ``until`` is set, if given, and cleared again)."""

    async def main(provider: DurableObjectLockProvider) -> list[bool]:
        done = []
        for _ in range(times):
            done.append(await provider.aforce_unlock("job", expected=None))
            if until is not None:
                assert await asyncio.to_thread(until.wait, 10)
                until.clear()
            await asyncio.sleep(pause)
        return done

    return on_provider(url, main)


def test_a_connection_the_server_closed_while_idle_is_replaced_not_used() -> None:
    closed = threading.Event()

    def answer_then_close(conn: socket.socket, server: Server) -> None:
        released(conn, server)
        conn.shutdown(socket.SHUT_RDWR)
        closed.set()

    with serve(answer_then_close) as server:
        # After the server's close, a moment for the loop to read the end of the stream.
        assert force_unlocks(server.url, 3, pause=0.05, until=closed) == [True] * 3
    assert (server.requests, server.connections) == (3, 3)


def test_an_answer_that_asks_to_close_is_not_kept() -> None:
    def closing(conn: socket.socket, server: Server) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(RELEASED)}\r\n\r\n".encode()
            + RELEASED
        )  # and the connection stays open: the client must not send on it again

    with serve(closing) as server:
        assert force_unlocks(server.url, 3) == [True] * 3
    assert (server.requests, server.connections) == (3, 3)


def test_a_chunked_answer_is_read_to_its_end_and_its_connection_kept() -> None:
    def chunked(conn: socket.socket, server: Server) -> None:
        half = len(RELEASED) // 2
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % half
            + RELEASED[:half]
            + b"\r\n%x\r\n" % (len(RELEASED) - half)
            + RELEASED[half:]
            + b"\r\n0\r\n\r\n"
        )

    with serve(chunked) as server:
        assert force_unlocks(server.url, 3) == [True] * 3
    assert (server.requests, server.connections) == (3, 1)


def test_a_cancelled_request_closes_its_connection_and_the_next_request_opens_another() -> None:
    arrived, answer_now = threading.Event(), threading.Event()

    def held_back(conn: socket.socket, server: Server) -> None:
        if not arrived.is_set():
            arrived.set()
            answer_now.wait(10)  # the first answer comes only once its request was cancelled
        released(conn, server)

    async def main(provider: DurableObjectLockProvider) -> bool:
        waiting = asyncio.ensure_future(provider.aforce_unlock("job", expected=None))
        assert await asyncio.to_thread(arrived.wait, 10)  # the request is out, unanswered
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        answer_now.set()
        return await provider.aforce_unlock("job", expected=None)

    with serve(held_back) as server:
        assert on_provider(server.url, main) is True
    # The cancelled request's answer would have come on its connection: never read as
    # the second request's answer, because that connection was closed.
    assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"", id="closed-without-answer"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + RELEASED, id="cut-short"),
        pytest.param(b"NOT HTTP AT ALL\r\n\r\n", id="not-http"),
    ],
)
def test_a_broken_answer_is_a_store_failure_and_its_connection_is_not_used_again(answer: bytes) -> None:
    calls = []

    def broken_once(conn: socket.socket, server: Server) -> None:
        calls.append(1)
        if len(calls) == 1:
            conn.sendall(answer)
            conn.shutdown(socket.SHUT_RDWR)
        else:
            released(conn, server)

    async def main(provider: DurableObjectLockProvider) -> bool:
        with pytest.raises(LockProviderError) as caught:
            await provider.aforce_unlock("job", expected=None)
        message = str(caught.value)
        assert "could not reach the store (RemoteProtocolError" in message, message
        assert "held" not in message
        return await provider.aforce_unlock("job", expected=None)

    with serve(broken_once) as server:
        assert on_provider(server.url, main) is True
    assert (server.requests, server.connections) == (2, 2)


def test_nothing_listening_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there

    async def main(provider: DurableObjectLockProvider) -> None:
        with pytest.raises(LockProviderError, match=r"could not reach the store \(ConnectError"):
            await provider.aforce_unlock("job", expected=None)

    on_provider(f"http://127.0.0.1:{port}", main)


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_connection_idle_near_the_servers_limit_is_not_reused(side: str) -> None:
    # workerd (and Node, and Apache) close a connection idle for 5 s, httpx's default
    # expiry: reusing one at that moment loses the request to the server's close. The
    # clients drop idle connections well before, so the second request, sent after a
    # pause past KEEPALIVE_EXPIRY, goes on a new connection; the third, sent at once,
    # reuses the second's.
    assert KEEPALIVE_EXPIRY <= 4.0
    pauses = [KEEPALIVE_EXPIRY + 0.4, 0.0]
    with serve(released) as server:
        if side == "async":

            async def main(provider: DurableObjectLockProvider) -> list[bool]:
                done = [await provider.aforce_unlock("job", expected=None)]
                for pause in pauses:
                    await asyncio.sleep(pause)
                    done.append(await provider.aforce_unlock("job", expected=None))
                return done

            assert on_provider(server.url, main) == [True] * 3
        else:
            provider = do_provider(server.url)
            try:
                done = [provider.force_unlock("job", expected=None)]
                for pause in pauses:
                    time.sleep(pause)
                    done.append(provider.force_unlock("job", expected=None))
            finally:
                provider.close()
            assert done == [True] * 3
    assert (server.requests, server.connections) == (3, 2)
