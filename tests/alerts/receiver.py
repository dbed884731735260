"""A webhook receiver on 127.0.0.1 (port 0): counts the POSTs it gets, with their
``X-Tslock-Notification-Id``, and answers each with the status it is set to."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    url: str = ""
    #: The status every request is answered with.
    status: int = 200
    #: (notification id, JSON body) of each request, in order.
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@contextmanager
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    mutex = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with mutex:
                found.requests.append((self.headers.get("X-Tslock-Notification-Id", ""), json.loads(body)))
            self.send_response(found.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet in test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
