"""A redis-server process of the tests' own, on a free port of 127.0.0.1, that a test
can stop, start again (without persistence: it forgets everything), pause with SIGSTOP
and resume."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """``redis-server`` on a free port, with a password unless ``password=""``; no RDB,
    no AOF: a restart loses every key, as a cache-only production Redis would.

    Args:
        folder: where the server runs (its log goes there).
        password: the ``requirepass`` (empty for none).
        replica_of: the port of a primary on 127.0.0.1 to replicate (``--replicaof``).
    """

    def __init__(self, folder: Path, *, password: str = "", replica_of: int | None = None) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.folder = folder
        self.password = password
        self.replica_of = replica_of
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def admin(self) -> redis.Redis:
        """A plain client for the test itself (never the provider's)."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password or None, socket_timeout=5)

    def start(self) -> RedisServer:
        assert self.process is None, "already running"
        args = [
            str(REDIS_SERVER),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.folder),
            "--logfile", str(self.folder / f"redis-{self.port}.log"),
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.admin().ping():
                    return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server (SIGTERM; it saves nothing, having no persistence)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart(self) -> None:
        """Stop, then start on the same port with nothing in memory."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing answers."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
