"""A fault-injecting HTTP proxy for the companion Worker (test-only, threads, port 0).

Every request is answered according to ``proxy.mode``:

``pass``       forward to the Worker and return its answer;
``refuse``     close the connection without answering;
``reset``      forward (the Worker acts), then send half of the answer and reset the
               connection (RST);
``delay``      forward (the Worker acts), then hold the answer for ``delay`` seconds,
               longer than the client waits;
``500``        answer 500 with a JSON error, without forwarding;
``502``        forward (the Worker acts), then answer 502 with an HTML page instead, as a
               failing gateway does;
``malformed``  answer 200 with a body that is not JSON, without forwarding;
``fieldless``  forward (the Worker acts), then answer 200 with a JSON object that lacks
               the protocol's fields.

``FORWARDED`` lists the modes in which the Worker really carried out the request, so a
lock may be held by a token the client never saw: those are the cases in which
``lock_at_most_for`` must free the lock.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

MODES = ("pass", "refuse", "reset", "delay", "500", "502", "malformed", "fieldless")
FORWARDED = frozenset({"pass", "reset", "delay", "502", "fieldless"})


class FaultProxy:
    """``with FaultProxy(worker.url) as proxy: proxy.mode = "reset"; proxy.url``."""

    def __init__(self, upstream: str, *, mode: str = "pass", delay: float = 1.0) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.mode = mode
        self.delay = delay
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, str]:
        upstream = http.client.HTTPConnection(*self.upstream, timeout=10)
        try:
            upstream.request(method, path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            return answer.status, answer.read(), answer.getheader("content-type", "application/json")
        finally:
            upstream.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the tests assert on the client's side

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True

            def _serve(self) -> None:
                proxy.requests += 1
                mode = proxy.mode
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if mode == "refuse":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "500":
                    return self._answer(500, b'{"error": "injected internal error"}')
                if mode == "malformed":
                    return self._answer(200, b'{"acquired": tru', "application/json")
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "accept-encoding")
                }
                status, payload, content_type = proxy._forward(self.command, self.path, headers, body)
                if mode == "pass":
                    return self._answer(status, payload, content_type)
                if mode == "502":
                    return self._answer(502, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                if mode == "fieldless":
                    return self._answer(200, b'{"ok": true}')
                if mode == "delay":
                    time.sleep(proxy.delay)
                    return self._answer(status, payload, content_type)
                if mode == "reset":
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                raise AssertionError(f"unknown proxy mode {mode!r}")

        return Handler
