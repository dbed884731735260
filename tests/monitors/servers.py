"""Local stand-ins for the outside monitors, written from their public API documentation
(test-only, threads, 127.0.0.1 port 0).

:class:`HealthchecksServer` answers Healthchecks' Pinging API by slug
(``/ping/<ping-key>/<slug>``, ``.../start``, ``.../fail``): ``200 OK`` for a known
slug, ``201 Created`` for an unknown one pinged with ``create=1`` (it then exists),
``404 not found`` for an unknown slug without it or for another ping key. Each request is
recorded as it arrives (method, path, query, body). ``delay`` holds every answer that long;
``status`` answers every ping with that status instead.

:class:`SentryServer` is a Sentry DSN's ingest endpoint: it takes
``POST /api/<project_id>/envelope/``, undoes the transport's gzip, and records each
envelope's items (``check_ins()`` gives the check-in payloads).
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

_PING = re.compile(r"^/ping/(?P<key>[^/]+)/(?P<slug>[a-z0-9_-]+)(?P<kind>/start|/fail)?$")


@dataclass(frozen=True)
class Ping:
    """One request the Healthchecks server received."""

    method: str
    path: str
    query: dict[str, str]
    body: str
    status: int

    @property
    def kind(self) -> str:
        """``start``, ``fail`` or ``success`` (the bare slug URL)."""
        return self.path.rsplit("/", 1)[1] if self.path.endswith(("/start", "/fail")) else "success"

    @property
    def slug(self) -> str:
        found = _PING.match(self.path)
        return found["slug"] if found else ""


class _Server:
    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        """Stop holding answers back (see ``delay``)."""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class HealthchecksServer(_Server):
    """``with HealthchecksServer(ping_key="...") as hc: ... hc.pings``."""

    def __init__(self, ping_key: str, *, delay: float = 0.0, status: int | None = None) -> None:
        super().__init__()
        self.ping_key = ping_key
        self.delay = delay
        self.status = status
        self.slugs: set[str] = set()
        self.pings: list[Ping] = []
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def _answer(self, method: str, target: str, body: bytes) -> tuple[int, str]:
        parts = urlsplit(target)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        found = _PING.match(parts.path)
        with self.lock:
            if self.status is not None:
                status, text = self.status, "error"
            elif found is None or found["key"] != self.ping_key:
                status, text = 404, "not found"
            elif found["slug"] in self.slugs:
                status, text = 200, "OK"
            elif query.get("create") == "1":
                self.slugs.add(found["slug"])
                status, text = 201, "Created"
            else:
                status, text = 404, "not found"
            self.pings.append(Ping(method, parts.path, query, body.decode("utf-8", "replace"), status))
        return status, text

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, text = server._answer(self.command, self.path, body)  # recorded on arrival
                if server.delay:
                    server._released.wait(server.delay)
                payload = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_HEAD = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


class SentryServer(_Server):
    """``with SentryServer() as sentry: sentry.dsn ... sentry.check_ins()``."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[list[tuple[dict[str, Any], bytes]]] = []
        self.paths: list[str] = []

    @property
    def dsn(self) -> str:
        return self.url.replace("http://", "http://public-key@", 1) + "/1"

    def check_ins(self) -> list[dict[str, Any]]:
        """The payloads of every ``check_in`` item received, in order."""
        with self.lock:
            return [
                json.loads(payload)
                for envelope in self.envelopes
                for header, payload in envelope
                if header.get("type") == "check_in"
            ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                with server.lock:
                    server.paths.append(self.path)
                    if re.fullmatch(r"/api/\d+/envelope/", self.path):
                        server.envelopes.append(items(raw))
                payload = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def items(envelope: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """An envelope's items as (item header, payload): after the envelope's header line,
    each item is a JSON header line and a payload of the header's ``length`` bytes, or up
    to the next newline when the header has no length."""
    _, _, rest = envelope.partition(b"\n")
    found: list[tuple[dict[str, Any], bytes]] = []
    while rest.strip():
        line, _, rest = rest.partition(b"\n")
        header = json.loads(line)
        if "length" in header:
            payload, rest = rest[: header["length"]], rest[header["length"] :]
            rest = rest.removeprefix(b"\n")
        else:
            payload, _, rest = rest.partition(b"\n")
        found.append((header, payload))
    return found
