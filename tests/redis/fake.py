"""A fake Redis for the failures a real one cannot be made to show: a server (or a proxy
in front of one) that echoes the arguments of a command in its error reply, or answers
with something redis-py does not expect.

It speaks just enough RESP: it reads commands (arrays of bulk strings), records them,
and sends back whatever :attr:`FakeRedis.answer` returns for each, as raw RESP bytes
(nothing: it hangs up).
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable
from types import TracebackType

Command = list[bytes]
Answer = Callable[[Command], bytes]


def ok(command: Command) -> bytes:
    """``+OK`` to everything, ``HELLO`` included (redis-py expects a map there)."""
    return b"+OK\r\n"


def echo(command: Command) -> bytes:
    """An error that quotes every argument, as Redis's "unknown command" error does
    (a real Redis never does it for ``AUTH``; a hostile server or proxy may)."""
    quoted = b" ".join(b"'" + word + b"'" for word in command[1:])
    return b"-ERR unknown command '" + command[0] + b"', with args beginning with: " + quoted + b"\r\n"


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        while True:
            command = self._read_command()
            if command is None:
                return
            fake = self.server.fake
            with fake.mutex:
                fake.commands.append(command)
            reply = fake.answer(command)
            if not reply:
                return  # no answer: hang up, as a server that died or a cut connection
            self.wfile.write(reply)
            self.wfile.flush()

    def _read_command(self) -> Command | None:
        head = self.rfile.readline()
        if not head.startswith(b"*"):
            return None  # closed, or not a command array: hang up
        words: Command = []
        for _ in range(int(head[1:])):
            size = self.rfile.readline()
            if not size.startswith(b"$"):
                return None
            words.append(self.rfile.read(int(size[1:]) + 2)[:-2])
        return words


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeRedis


class FakeRedis:
    """A fake Redis on a free port of 127.0.0.1, answering with ``answer`` (which a test
    may replace while it runs); :attr:`commands` holds every command received."""

    def __init__(self, answer: Answer = echo) -> None:
        self.answer = answer
        self.commands: list[Command] = []
        self.mutex = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, auth: str = "", query: str = "") -> str:
        """``redis://{auth}@127.0.0.1:{port}/0?{query}`` (``auth`` as written in a URL)."""
        userinfo = f"{auth}@" if auth else ""
        return f"redis://{userinfo}127.0.0.1:{self.port}/0" + (f"?{query}" if query else "")

    def received(self, word: bytes) -> bool:
        """Whether any command received had ``word`` as an argument."""
        with self.mutex:
            return any(word in command for command in self.commands)

    def __enter__(self) -> FakeRedis:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
