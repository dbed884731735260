"""The async HTTP edge over TLS (``httpx.AsyncClient`` with httpx's own transport and the
provider's TLS settings): a certificate the client trusts is used on one kept-alive
connection, one it does not is a store failure, never "held"."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CI
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider

pytestmark = [
    pytest.mark.filterwarnings("error::ResourceWarning"),
]

ANSWER = b'{"released": true}'


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None and not CI:
        # Under CI the machine has it: the certificate step then fails loudly instead.
        pytest.skip("openssl is not installed (it makes the test's certificate; required when CI is set)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


class TLSServer:
    """Answers every request with ANSWER, keeping the connection; counts both."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = self.requests = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                raw, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self.serve, args=(raw,), daemon=True).start()

    def serve(self, raw: socket.socket) -> None:
        try:
            with self.context.wrap_socket(raw, server_side=True) as conn:
                self.connections += 1
                pending = b""
                while True:
                    while b"\r\n\r\n" not in pending:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        pending += chunk
                    head, _, pending = pending.partition(b"\r\n\r\n")
                    lengths = [
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ]
                    length = int(lengths[0]) if lengths else 0
                    while len(pending) < length:
                        pending += conn.recv(65536)
                    pending = pending[length:]
                    self.requests += 1
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(ANSWER)}\r\n\r\n".encode()
                        + ANSWER
                    )
        except (OSError, ssl.SSLError):
            return

    def __enter__(self) -> TLSServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.listener.close()


@pytest.fixture
def server(certificate: tuple[Path, Path]) -> Iterator[TLSServer]:
    with TLSServer(*certificate) as running:
        yield running


def provider_trusting(url: str, cafile: Path | None) -> DurableObjectLockProvider:
    provider = DurableObjectLockProvider("tls", url=url, token="t" * 32, timeout=5)
    if cafile is not None:
        # The async clients take the sync client's settings when first used.
        provider._pool._settings["verify"] = ssl.create_default_context(cafile=str(cafile))
    return provider


def test_requests_over_tls_share_one_kept_alive_connection(
    server: TLSServer, certificate: tuple[Path, Path]
) -> None:
    provider = provider_trusting(server.url, certificate[0])

    async def main() -> list[bool]:
        try:
            return [await provider.aforce_unlock("job", expected=None) for _ in range(3)]
        finally:
            await provider.aclose()

    try:
        assert asyncio.run(main()) == [True, True, True]
    finally:
        provider.close()
    assert (server.requests, server.connections) == (3, 1)


def test_a_certificate_the_client_does_not_trust_is_a_store_failure(server: TLSServer) -> None:
    provider = provider_trusting(server.url, None)

    async def main() -> None:
        try:
            with pytest.raises(LockProviderError) as caught:
                await provider.aforce_unlock("job", expected=None)
            assert "held" not in str(caught.value)
        finally:
            await provider.aclose()

    try:
        asyncio.run(main())
    finally:
        provider.close()
    assert server.requests == 0
