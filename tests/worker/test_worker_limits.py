"""Request limits on the real runtime: bodies over MAX_BODY_BYTES are refused with 413
before parsing (by Content-Length, and by counting when it is absent), and the token is
checked before anything else, so an unauthenticated caller learns nothing but 401."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tslock_django.worker.runtime import LocalWorker

LIMIT = 16 * 1024


def test_a_large_body_is_refused_with_413_unread(local_worker: LocalWorker, api: httpx.Client) -> None:
    # A 1 MiB acquire body is announced and only its first KiB is sent: the answer comes
    # anyway, so the Worker refused it by its Content-Length without reading it. (Sending
    # all of it races the refusal: the runtime may reset the connection mid-upload.)
    address = urlsplit(local_worker.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    try:
        connection.putrequest("POST", "/v1/acquire")
        connection.putheader("Authorization", f"Bearer {local_worker.token}")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(1024 * 1024))
        connection.endheaders()
        connection.send(b'{"name": "big", "lock_at_most_for_ms": 1000, "locked_by": "' + b"x" * 1024)
        response = connection.getresponse()
        assert response.status == 413
        assert f"{LIMIT} bytes" in json.loads(response.read())["error"]
    finally:
        connection.close()
    # Nothing was taken.
    taken = api.post("/v1/acquire", json={"name": "big", "lock_at_most_for_ms": 1000}).json()
    assert taken["acquired"] is True


def chunks(total: int) -> Iterator[bytes]:
    # A valid JSON object padded with spaces, sent without Content-Length (chunked).
    head = b'{"name": "chunked", "lock_at_most_for_ms": 1000'
    yield head
    left = total - len(head) - 1
    while left > 0:
        step = min(left, 4096)
        yield b" " * step
        left -= step
    yield b"}"


def test_a_body_without_content_length_is_counted_while_read(api: httpx.Client) -> None:
    response = api.post("/v1/acquire", content=chunks(LIMIT + 1))
    assert response.status_code == 413
    assert api.post("/v1/acquire", content=chunks(LIMIT)).json()["acquired"] is True


def test_a_body_at_the_limit_is_accepted(api: httpx.Client) -> None:
    text = json.dumps({"name": "edge", "lock_at_most_for_ms": 1000})
    padded = text[:-1] + " " * (LIMIT - len(text)) + "}"
    assert len(padded.encode()) == LIMIT
    response = api.post("/v1/acquire", content=padded, headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.json()["acquired"] is True


def test_the_largest_valid_request_fits(api: httpx.Client) -> None:
    # Python's json escapes every non-ASCII character (six bytes each); names may not hold
    # control characters, so a 512-byte name of two-byte letters and 255 astral characters
    # of locked_by are the worst case.
    body = {"name": "\u00e9" * 256, "lock_at_most_for_ms": 1000, "locked_by": "\U0001f600" * 255}
    assert len(json.dumps(body).encode()) < LIMIT
    assert api.post("/v1/acquire", json=body).json()["acquired"] is True


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/nowhere"),
        ("GET", "/"),
        ("GET", "/v1/acquire"),
        ("DELETE", "/v1/locks"),
        ("POST", "/v1/health"),
        ("GET", "/v1/locks"),
        ("POST", "/v1/acquire"),
        ("POST", "/v1/reindex"),
    ],
)
def test_without_the_token_everything_but_health_is_401(
    local_worker: LocalWorker, method: str, path: str
) -> None:
    with httpx.Client(base_url=local_worker.url, timeout=10) as anonymous:
        response = anonymous.request(method, path, json={"name": "x"})
        assert response.status_code == 401
        assert response.json()["error"] == "missing or wrong bearer token"
        too_big = anonymous.request(method, path, content=b"x" * (LIMIT * 4))
        assert too_big.status_code == 401
        assert anonymous.get("/v1/health").status_code == 200


def test_with_the_token_routes_and_methods_are_told_apart(api: httpx.Client) -> None:
    assert api.post("/v1/nowhere", json={}).status_code == 404
    wrong = api.post("/v1/health")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
