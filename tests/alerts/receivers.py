"""Local receivers for the channels' tests: real HTTP servers on 127.0.0.1 in a thread.

- :class:`WebhookReceiver`: a receiver as ``docs/howto/alerts.md`` tells users to write
  one: it checks ``X-Tslock-Signature`` over the raw body with the shared secret and
  answers 401 when it does not match, keeps what it got, and answers what the test asks.
- :class:`SlackReceiver`: Slack's incoming webhooks as their public docs describe them
  (api.slack.com, "Sending messages using incoming webhooks" and its error table): a
  POST of JSON with a non-empty ``text`` to a hook's path answers ``200 ok``; a body that
  is not such JSON ``400 invalid_payload``; a hook that is removed or unknown
  ``404 no_service``; one whose channel is archived ``410 channel_is_archived``; past
  its rate limit (about one message a second) ``429`` with ``Retry-After``.
- :func:`raw_server`: a TCP server writing raw bytes, to misbehave the way no HTTP
  library would let a server (answer after 10 s, drip a byte at a time).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: bytes
    signature_valid: bool | None = None


@dataclass
class WebhookReceiver:
    secret: str | None = None
    #: What to answer: status and body.
    status: int = 204
    answer: bytes = b""
    extra_headers: dict[str, str] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    url: str = ""

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        valid = None
        if self.secret is not None:
            expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            valid = hmac.compare_digest(expected, headers.get("x-tslock-signature", ""))
        self.received.append(Received(path, headers, body, valid))
        if valid is False:
            return 401, b"bad signature", {}
        return self.status, self.answer, self.extra_headers


@dataclass
class SlackReceiver:
    #: hook path -> "active", "removed", "archived" or "rate_limited".
    hooks: dict[str, str] = field(default_factory=dict)
    messages: list[dict[str, object]] = field(default_factory=list)
    url: str = ""

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        state = self.hooks.get(path, "removed")
        if state == "removed":
            return 404, b"no_service", {}
        if state == "archived":
            return 410, b"channel_is_archived", {}
        if state == "rate_limited":
            return 429, b"rate_limited", {"Retry-After": "30"}
        try:
            message = json.loads(body)
        except ValueError:
            return 400, b"invalid_payload", {}
        if not isinstance(message, dict) or not isinstance(message.get("text"), str) or not message["text"]:
            return 400, b"invalid_payload", {}
        self.messages.append(message)
        return 200, b"ok", {}


@contextmanager
def http_server(app: WebhookReceiver | SlackReceiver, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1; yields its base URL (``http://127.0.0.1:PORT``, or
    ``https://`` with ``tls``, a certificate and its key)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            headers = {key.lower(): value for key, value in self.headers.items()}
            status, answer, extra = app.handle(self.path, headers, body)
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(answer)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def raw_server(behaviour: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A TCP server calling ``behaviour(conn, stop)`` for each connection after reading
    the request's head; yields its base URL. ``stop`` is set when the test is done, so a
    behaviour that waits or drips can end."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            with contextlib.suppress(OSError):  # the client gave up: what the tests want
                behaviour(conn, stop)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def answer_after(seconds: float) -> Callable[[socket.socket, threading.Event], None]:
    """A receiver that answers ``200 ok`` only after ``seconds``."""

    def behaviour(conn: socket.socket, stop: threading.Event) -> None:
        if not stop.wait(seconds):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    return behaviour


def hang_up(conn: socket.socket, stop: threading.Event) -> None:
    """A receiver that closes the connection without a word."""
    conn.shutdown(socket.SHUT_RDWR)


def drip_body(conn: socket.socket, stop: threading.Event) -> None:
    """An answer whose head comes at once and whose body comes a byte every 0.1 s."""
    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.1):
        conn.sendall(b"x")


def drip_head(conn: socket.socket, stop: threading.Event) -> None:
    """An answer whose head comes a byte every 0.1 s, without end."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.wait(0.1):
        conn.sendall(b"X")


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
