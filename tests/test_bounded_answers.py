"""Answers from the Durable Object Worker and the KV REST API are read within bounds
(issue 19): a body past the size limit is refused while it streams in, not after it has
all been read, and the ``timeout`` option bounds a request, so a server that drips its
answer cannot hold ``lock()`` or a listing for longer than that. On the asyncio edge it
bounds the whole exchange; sync httpx can only bound each read while the head arrives
(httpx has no whole-request timeout, encode/httpx#1450), and the body between pieces.

The servers are real TCP servers on 127.0.0.1 in a thread, writing raw HTTP, so that
they can misbehave the way no test transport can (send forever, or a byte at a time).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tslock_django import LockConfiguration
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.providers.cloudflare_kv import KVLockProvider
from tslock_django.providers.http import MAX_BODY_BYTES
from tslock_django.providers.kv_rest import MAX_VALUE_BYTES

TOKEN = "bounded-secret-token-Zq9"
MIB = 1024 * 1024
#: What the hostile servers offer: far more than the limit, little enough that the
#: code before the fix (which read it all) finishes and fails the assertions.
HUGE = 100 * MIB


# -- a raw server ----------------------------------------------------------------------------


@dataclass
class Server:
    """What a test server saw: connections accepted, body bytes it managed to send."""

    url: str = ""
    connections: int = 0
    requests: int = 0
    sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    #: Counts are kept by one thread per connection: += is not atomic across them.
    counting: threading.Lock = field(default_factory=threading.Lock)


def _read_head(conn: socket.socket, pending: bytes) -> tuple[bytes, bytes] | None:
    """One request (head and body, read by Content-Length) and what followed it."""
    data = pending
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[length:]


@contextmanager
def serve(answer: Callable[[socket.socket, Server], None]) -> Iterator[Server]:
    """A server on 127.0.0.1 that calls ``answer(conn, server)`` for each request, on
    one connection for as long as the client keeps it open."""
    server = Server()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)  # accept() is not woken by close(): poll for the stop

    def connection(conn: socket.socket) -> None:
        conn.settimeout(30)
        pending = b""
        try:
            with conn:
                while not server.stop.is_set():
                    request = _read_head(conn, pending)
                    if request is None:
                        return
                    pending = request[1]
                    with server.counting:
                        server.requests += 1
                    answer(conn, server)
        except OSError:
            pass  # the client closed the connection: that is what the tests provoke
        finally:
            server.done.set()

    def accept() -> None:
        while not server.stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server.connections += 1
            threading.Thread(target=connection, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        yield server
    finally:
        server.stop.set()
        listener.close()
        thread.join(timeout=5)


def huge_answer(*, declared: bool) -> Callable[[socket.socket, Server], None]:
    """An answer of ``HUGE`` bytes, its length declared or sent chunked, counting what
    the client accepted before it closed the connection."""
    block = b"x" * MIB

    def answer(conn: socket.socket, server: Server) -> None:
        if declared:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            conn.sendall(f"Content-Length: {HUGE}\r\n\r\n".encode())
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            conn.sendall(b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(HUGE // MIB):
            if server.stop.is_set():
                return
            conn.sendall(block if declared else b"%x\r\n" % len(block) + block + b"\r\n")
            server.sent += len(block)
        if not declared:
            conn.sendall(b"0\r\n\r\n")

    return answer


def gzip_bomb_answer() -> Callable[[socket.socket, Server], None]:
    # 100 MiB of zeros in about 100 KB: small on the wire, huge once decoded. Made here,
    # before the test measures the client's allocations.
    body = gzip.compress(b"\0" * HUGE, compresslevel=9)

    def answer(conn: socket.socket, server: Server) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        server.sent += len(body)

    return answer


#: The drip: one byte every DRIP_EVERY seconds, DRIP_BYTES of them (20 s in all).
DRIP_EVERY = 0.5
DRIP_BYTES = 40


def drip_answer(phase: str) -> Callable[[socket.socket, Server], None]:
    """An answer whose headers (``phase="headers"``) or body arrive one byte at a time,
    each byte well within a read timeout of 1 s; or (``phase="stalled head"``) whose
    headers stop coming after their first line."""

    def answer(conn: socket.socket, server: Server) -> None:
        if phase == "stalled head":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            server.stop.wait(DRIP_EVERY * DRIP_BYTES)
            return
        if phase == "headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            dripped = b"a" * DRIP_BYTES
        else:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {DRIP_BYTES}\r\n\r\n".encode()
            )
            dripped = b" " * DRIP_BYTES
        for byte in dripped:
            if server.stop.wait(DRIP_EVERY):
                return
            conn.sendall(bytes([byte]))
            server.sent += 1
        conn.close()

    return answer


# -- the providers and what they are asked ---------------------------------------------------


def do_provider(url: str, timeout: float = 5, **kwargs: object) -> DurableObjectLockProvider:
    return DurableObjectLockProvider("bounded-do", url=url, token=TOKEN, timeout=timeout, **kwargs)  # type: ignore[arg-type]


def kv_provider(url: str, timeout: float = 5, **kwargs: object) -> KVLockProvider:
    return KVLockProvider(
        "bounded-kv",
        account_id="acct",
        namespace_id="ns",
        api_token=TOKEN,
        acknowledge_advisory_lock=True,
        base_url=url,
        timeout=timeout,
        list_cache_seconds=0,
        **kwargs,
    )


def lock(provider: DurableObjectLockProvider | KVLockProvider) -> object:
    return provider.lock(LockConfiguration(name="job", lock_at_most_for=timedelta(minutes=1)))


def listing(provider: DurableObjectLockProvider | KVLockProvider) -> object:
    return provider.list_locks()


def alock(provider: DurableObjectLockProvider | KVLockProvider) -> object:
    """``lock`` through the asyncio edge (``httpx.AsyncClient``)."""

    async def main() -> object:
        try:
            return await provider.alock(LockConfiguration(name="job", lock_at_most_for=timedelta(minutes=1)))
        finally:
            await provider.aclose()

    return asyncio.run(main())


CALLS = [
    pytest.param(do_provider, lock, id="do-lock"),
    pytest.param(kv_provider, lock, id="kv-lock"),
    pytest.param(do_provider, listing, id="do-listing"),
    pytest.param(kv_provider, listing, id="kv-listing"),
    pytest.param(do_provider, alock, id="do-alock"),
    pytest.param(kv_provider, alock, id="kv-alock"),
]


# -- 1. answers past the size limit are refused while they stream in ---------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("make", "call"), CALLS)
def test_an_answer_past_the_size_limit_is_refused_before_it_is_all_read(
    make: Callable[..., DurableObjectLockProvider | KVLockProvider],
    call: Callable[[DurableObjectLockProvider | KVLockProvider], object],
    declared: bool,
) -> None:
    with serve(huge_answer(declared=declared)) as server:
        provider = make(server.url)
        tracemalloc.start()
        try:
            with pytest.raises(LockProviderError) as caught:
                call(provider)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            provider.close()
        assert server.done.wait(10), "the server did not see the client close the connection"
    # What was read stays near the limit (plus what the sockets buffer), far from the
    # 100 MiB offered; the code before the fix read all of it.
    assert server.sent < 48 * MIB, f"the server got {server.sent:,} bytes out"
    assert peak < 48 * MIB, f"the client's allocations peaked at {peak:,} bytes"
    message = str(caught.value)
    assert f"lock provider {provider.alias!r}" in message
    # A KV lock reads a value first, and Workers KV stores values of up to 25 MiB.
    limit = MAX_VALUE_BYTES if make is kv_provider and call in (lock, alock) else MAX_BODY_BYTES
    assert "answer is larger than" in message and f"{limit:,} bytes" in message
    assert TOKEN not in message


@pytest.mark.parametrize(("make", "call"), [*CALLS[:2], *CALLS[4:]])
def test_a_compressed_answer_is_bounded_by_its_decoded_size(
    make: Callable[..., DurableObjectLockProvider | KVLockProvider],
    call: Callable[[DurableObjectLockProvider | KVLockProvider], object],
) -> None:
    with serve(gzip_bomb_answer()) as server:
        provider = make(server.url)
        tracemalloc.start()
        try:
            with pytest.raises(LockProviderError) as caught:
                call(provider)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            provider.close()
    assert peak < 48 * MIB, f"the client's allocations peaked at {peak:,} bytes"
    assert "answer is larger than" in str(caught.value)


def test_an_answer_within_the_limit_compressed_or_not_is_read() -> None:
    answer = json.dumps({"released": True}).encode()
    body = gzip.compress(answer)

    def compressed(conn: socket.socket, server: Server) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    with serve(compressed) as server:
        provider = do_provider(server.url)
        try:
            assert provider.force_unlock("job", expected=None) is True
        finally:
            provider.close()


# -- 2. the timeout bounds the whole request -------------------------------------------------


SYNC_CALLS, ASYNC_CALLS = CALLS[:4], CALLS[4:]


def _drips(calls: list[Any], phase: str) -> list[Any]:
    """``calls`` with ``phase`` added to each."""
    return [pytest.param(*p.values, phase, id=f"{p.id}-{phase}") for p in calls]


@pytest.mark.parametrize(
    ("make", "call", "phase"),
    [
        *_drips(CALLS, "body"),
        # The asyncio edge bounds the whole exchange, its head included.
        *_drips(ASYNC_CALLS, "headers"),
        # Sync httpx bounds each read of the head: one that stops coming times out.
        *_drips(SYNC_CALLS, "stalled head"),
    ],
)
def test_a_dripping_answer_times_out_after_the_timeout_option(
    make: Callable[..., DurableObjectLockProvider | KVLockProvider],
    call: Callable[[DurableObjectLockProvider | KVLockProvider], object],
    phase: str,
) -> None:
    with serve(drip_answer(phase)) as server:
        provider = make(server.url, timeout=1)
        started = time.monotonic()
        try:
            with pytest.raises(LockProviderError) as caught:
                call(provider)
        finally:
            elapsed = time.monotonic() - started
            provider.close()
    message = str(caught.value)
    assert f"lock provider {provider.alias!r}" in message
    assert "timed out after 1 s" in message, message
    assert TOKEN not in message
    # The drip takes 20 s to finish; each byte came well within the 1 s read timeout,
    # so before the fix the call lasted the whole drip.
    assert elapsed < DRIP_EVERY * DRIP_BYTES / 2, f"the call took {elapsed:.1f} s"


@pytest.mark.parametrize(("make", "call"), CALLS)
def test_a_dripping_answer_times_out_through_a_transport_of_the_callers(
    make: Callable[..., DurableObjectLockProvider | KVLockProvider],
    call: Callable[[DurableObjectLockProvider | KVLockProvider], object],
) -> None:
    # A transport passed in (tests, benchmarks) does its own reads: the deadline is then
    # checked between the pieces of the answer.
    with serve(drip_answer("body")) as server:
        provider = make(server.url, timeout=1, transport=httpx.HTTPTransport())
        started = time.monotonic()
        try:
            with pytest.raises(LockProviderError, match="timed out after 1 s"):
                call(provider)
        finally:
            elapsed = time.monotonic() - started
            provider.close()
    assert elapsed < DRIP_EVERY * DRIP_BYTES / 2, f"the call took {elapsed:.1f} s"


# -- connections are still reused ------------------------------------------------------------


def keep_alive_answer(
    status: int, body: object, *, gzipped: bool = False
) -> Callable[[socket.socket, Server], None]:
    data = json.dumps(body).encode()
    encoding = b""
    if gzipped:
        data, encoding = gzip.compress(data), b"Content-Encoding: gzip\r\n"

    def answer(conn: socket.socket, server: Server) -> None:
        conn.sendall(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n".encode()
            + encoding
            + f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )

    return answer


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_the_do_provider_sends_every_request_on_one_kept_alive_connection(gzipped: bool) -> None:
    # The Worker's runtime compresses its answers: a gzip answer must be read to its end
    # too, or its connection is closed instead of going back to the pool.
    with serve(keep_alive_answer(200, {"released": True}, gzipped=gzipped)) as server:
        provider = do_provider(server.url)
        try:
            for _ in range(5):
                assert provider.force_unlock("job", expected=None) is True
        finally:
            provider.close()
    assert (server.requests, server.connections) == (5, 1)


def test_the_kv_provider_sends_every_request_on_one_kept_alive_connection() -> None:
    missing = {"success": False, "errors": [{"code": 10009, "message": "key not found"}]}
    with serve(keep_alive_answer(404, missing)) as server:
        provider = kv_provider(server.url)
        try:
            for _ in range(5):
                assert provider.namespace.get("tslock:job") is None
        finally:
            provider.close()
    assert (server.requests, server.connections) == (5, 1)


def test_the_async_edge_keeps_one_caller_to_one_connection_and_reuses_a_bursts_connections() -> None:
    answer = keep_alive_answer(200, {"released": True})

    def slow_answer(conn: socket.socket, server: Server) -> None:
        time.sleep(0.2)  # long enough for every request of the burst to be in flight at once
        answer(conn, server)

    burst = 12

    async def main(provider: DurableObjectLockProvider, server: Server) -> None:
        try:
            for _ in range(3):
                assert await provider.aforce_unlock("job", expected=None) is True
            assert (server.requests, server.connections) == (3, 1)
            for _ in range(2):  # the second burst finds the first one's connections idle
                done = await asyncio.gather(
                    *(provider.aforce_unlock(f"job{i}", expected=None) for i in range(burst))
                )
                assert all(done)
        finally:
            await provider.aclose()

    with serve(slow_answer) as server:
        provider = do_provider(server.url)
        try:
            asyncio.run(main(provider, server))
        finally:
            provider.close()
    assert (server.requests, server.connections) == (3 + 2 * burst, burst)
