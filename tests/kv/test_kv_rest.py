"""The REST namespace client: paths, key encoding, the multipart write, listing, and how
each Cloudflare answer becomes a result or a LockProviderError."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.exceptions import LockProviderError, LockRateLimited
from tslock_django.providers.http import transport_errors
from tslock_django.providers.kv_rest import KVRestNamespace

from .conftest import ACCOUNT_ID, API_TOKEN, NAMESPACE_ID

AWKWARD_KEYS = [
    "tslock:plain",
    "tslock:a/b/c",
    "tslock:what?x=1&y=2",
    "tslock:100%25 done %",
    "tslock:with spaces and #hash",
    "tslock:Zürich-日本-🔒",
    "tslock:..",
    "tslock:+plus+",
]


def namespace(transport: httpx.BaseTransport, **kwargs: object) -> KVRestNamespace:
    options: dict[str, object] = {
        "account_id": ACCOUNT_ID,
        "namespace_id": NAMESPACE_ID,
        "api_token": API_TOKEN,
        "alias": "kv",
        **kwargs,
    }
    return KVRestNamespace(transport=transport, **options)  # type: ignore[arg-type]


class Recorder(httpx.BaseTransport):
    """Keeps every request and answers with a fixed response."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.seen: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.seen.append(request)
        return self.response


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_any_key_round_trips(kv: FakeKVTransport, key: str) -> None:
    ns = namespace(kv)
    ns.put(key, "value of " + key, expiration_ttl=60)
    assert kv.keys() == [key]
    assert ns.get(key) == "value of " + key
    assert [k.name for k in ns.list(prefix=key).keys] == [key]
    kv.clock.advance(1)  # type: ignore[attr-defined]
    ns.delete(key)
    assert ns.get(key) is None


def test_requests_have_the_documented_shape() -> None:
    rec = Recorder(httpx.Response(200, json={"success": True, "errors": [], "messages": [], "result": {}}))
    ns = namespace(rec, base_url="https://api.example.test/client/v4/")
    ns.put("tslock:a/b?c", '{"x":1}', expiration_ttl=61, metadata={"x": 1, "ü": "é"})
    put = rec.seen[-1]
    assert put.method == "PUT"
    assert put.url.raw_path == (
        b"/client/v4/accounts/test-account/storage/kv/namespaces/test-namespace/values/tslock%3Aa%2Fb%3Fc"
        b"?expiration_ttl=61"
    )
    assert put.headers["authorization"] == f"Bearer {API_TOKEN}"
    assert put.headers["content-type"].startswith("multipart/form-data; boundary=")
    body = put.content
    assert b'name="value"\r\n\r\n{"x":1}\r\n' in body
    assert 'name="metadata"\r\n\r\n{"x":1,"ü":"é"}\r\n'.encode() in body
    assert API_TOKEN.encode() not in bytes(put.url.raw_path)

    ns.delete("tslock:k")
    assert rec.seen[-1].method == "DELETE"
    assert rec.seen[-1].url.path.endswith("/values/tslock:k")

    rec.response = httpx.Response(
        200,
        json={
            "success": True,
            "errors": [],
            "messages": [],
            "result": [],
            "result_info": {"count": 0, "cursor": ""},
        },
    )
    ns.list(prefix="tslock:", limit=10, cursor="abc")
    listed = rec.seen[-1]
    assert listed.url.path == "/client/v4/accounts/test-account/storage/kv/namespaces/test-namespace/keys"
    assert dict(listed.url.params) == {"prefix": "tslock:", "limit": "10", "cursor": "abc"}


def test_missing_key_is_none_and_deleting_it_is_fine(kv: FakeKVTransport) -> None:
    ns = namespace(kv)
    assert ns.get("tslock:nothing") is None
    ns.delete("tslock:nothing")
    # A 404/10009 on delete (some API versions answer so) is also "done".
    ns404 = namespace(
        Recorder(
            httpx.Response(
                404, json={"success": False, "errors": [{"code": 10009, "message": "key not found"}]}
            )
        )
    )
    ns404.delete("tslock:nothing")


def test_a_plain_404_without_code_10009_is_an_error_not_a_miss() -> None:
    ns = namespace(Recorder(httpx.Response(404, text="<html>not found</html>")))
    with pytest.raises(LockProviderError, match="HTTP 404"):
        ns.get("tslock:x")


def test_namespace_not_found_names_status_code_and_ids(clock: MutableClock) -> None:
    kv = FakeKVTransport(clock, account_id=ACCOUNT_ID, namespace_id="another-namespace", api_token=API_TOKEN)
    ns = namespace(kv)
    for call in (lambda: ns.get("tslock:x"), lambda: ns.put("tslock:x", "v"), lambda: ns.list()):
        with pytest.raises(LockProviderError) as caught:
            call()
        text = str(caught.value)
        assert "HTTP 404" in text and "10013" in text and NAMESPACE_ID in text
        assert caught.value.status_code == 404
        assert API_TOKEN not in text


def test_wrong_token_is_401_with_a_hint_and_without_the_token(kv: FakeKVTransport) -> None:
    ns = namespace(kv, api_token="not-the-right-token")
    with pytest.raises(LockProviderError) as caught:
        ns.get("tslock:x")
    assert caught.value.status_code == 401
    assert "check the token" in str(caught.value)
    assert "not-the-right-token" not in str(caught.value)


def test_ttl_floor_is_refused_by_the_store(kv: FakeKVTransport) -> None:
    ns = namespace(kv)
    with pytest.raises(LockProviderError, match="Expiration TTL must be at least 60") as caught:
        ns.put("tslock:x", "v", expiration_ttl=59)
    assert caught.value.status_code == 400
    assert not isinstance(caught.value, LockRateLimited)


def test_second_write_within_a_second_is_rate_limited(kv: FakeKVTransport, clock: MutableClock) -> None:
    ns = namespace(kv)
    ns.put("tslock:x", "1", expiration_ttl=60)
    with pytest.raises(LockRateLimited) as caught:
        ns.put("tslock:x", "2", expiration_ttl=60)
    assert caught.value.status_code == 429
    with pytest.raises(LockRateLimited):
        ns.delete("tslock:x")
    assert ns.get("tslock:x") == "1"
    clock.advance(1)
    ns.delete("tslock:x")
    assert ns.get("tslock:x") is None


def test_listing_pages_with_cursors_and_empty_pages(kv: FakeKVTransport) -> None:
    for i in range(25):
        kv.put_raw(f"tslock:job-{i:02}", "v", metadata={"i": i})
    kv.put_raw("other:job", "v")
    kv.default.empty_list_pages(2)
    ns = namespace(kv)
    names: list[str] = []
    metas: list[object] = []
    cursor = ""
    pages = 0
    while True:
        page = ns.list(prefix="tslock:", limit=10, cursor=cursor)
        pages += 1
        names += [k.name for k in page.keys]
        metas += [k.metadata for k in page.keys]
        cursor = page.cursor
        if not cursor:
            break
    assert names == [f"tslock:job-{i:02}" for i in range(25)]
    assert metas == [{"i": i} for i in range(25)]
    assert pages == 5  # two empty pages, then 10 + 10 + 5


@pytest.mark.parametrize("limit", [9, 1001])
def test_list_limit_is_checked_before_asking(kv: FakeKVTransport, limit: int) -> None:
    with pytest.raises(ValueError, match="between 10 and 1000"):
        namespace(kv).list(limit=limit)
    assert kv.request_count() == 0


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_server_errors_timeouts_and_garbage_are_provider_errors(kv: FakeKVTransport, method: str) -> None:
    ns = namespace(kv)
    calls: dict[str, Callable[[], object]] = {
        "GET": lambda: ns.list(),
        "PUT": lambda: ns.put("tslock:x", "v", expiration_ttl=60),
        "DELETE": lambda: ns.delete("tslock:x"),
    }
    kv.fail_next(502, method=method)
    with pytest.raises(LockProviderError, match="HTTP 502") as caught:
        calls[method]()
    assert not isinstance(caught.value, LockRateLimited)
    kv.timeout_next(method=method)
    with pytest.raises(LockProviderError, match="did not answer in time") as timed_out:
        calls[method]()
    assert isinstance(timed_out.value.__cause__, httpx.TimeoutException)
    kv.malformed_next(method=method)
    with pytest.raises(LockProviderError, match="not JSON"):
        calls[method]()


def test_a_listing_without_the_envelope_is_an_error() -> None:
    for body in ({"success": True, "result": "nope"}, {"success": False, "result": []}, ["x"]):
        ns = namespace(Recorder(httpx.Response(200, json=body)))
        with pytest.raises(LockProviderError, match="envelope"):
            ns.list()


def test_repr_and_errors_never_show_the_token(kv: FakeKVTransport) -> None:
    ns = namespace(kv)
    assert API_TOKEN not in repr(ns)
    kv.fail_next(500)
    with pytest.raises(LockProviderError) as caught:
        ns.get("tslock:x")
    assert API_TOKEN not in str(caught.value) and API_TOKEN not in repr(caught.value)


def test_timeout_is_bounded() -> None:
    ns = namespace(httpx.MockTransport(lambda r: httpx.Response(200)), timeout=2.5)
    timeout = ns._http().timeout
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (2.5, 2.5, 2.5, 2.5)


def test_metadata_is_json_in_the_listing(kv: FakeKVTransport) -> None:
    ns = namespace(kv)
    ns.put("tslock:m", "v", expiration_ttl=120, metadata={"lockUntil": 1, "nested": [1, 2]})
    [key] = ns.list().keys
    assert key.metadata == {"lockUntil": 1, "nested": [1, 2]}
    assert key.expiration is not None and key.has_metadata
    assert ns.get("tslock:m") == "v"


# -- review fixes: a refused header never leaks the token; close() then use ------------------


@pytest.fixture
def listening_url() -> Iterator[str]:
    """A socket that accepts connections and never answers: enough for the client to get
    as far as writing the request headers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.parametrize(
    "bad_token", [API_TOKEN + "\n", API_TOKEN + "\r\nX-Injected: 1", "Zürich-" + API_TOKEN]
)
def test_a_token_the_http_library_refuses_is_a_provider_error_without_the_token(
    listening_url: str, bad_token: str
) -> None:
    # The namespace client itself does not validate the token (the provider does): this is
    # the last line of defence, where h11 refuses the header and quotes it in its error.
    ns = namespace(httpx.HTTPTransport(), base_url=listening_url, api_token=bad_token, timeout=5.0)
    try:
        for call in (lambda: ns.get("tslock:x"), lambda: ns.put("tslock:x", "v"), ns.list):
            with pytest.raises(LockProviderError) as caught:
                call()
            text = f"{caught.value} {caught.value!r} {caught.value.args!r}"
            assert API_TOKEN not in text and "Bearer" not in text
            assert "header value is invalid" in str(caught.value)
            assert "whitespace" in str(caught.value)
    finally:
        ns.close()


def test_transport_errors_never_repeat_the_text_of_a_local_protocol_error() -> None:
    with pytest.raises(LockProviderError) as caught, transport_errors("kv", "read key 'tslock:x'"):
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {API_TOKEN}\\n'")
    assert API_TOKEN not in str(caught.value)
    assert str(caught.value).startswith(
        "lock provider 'kv': read key 'tslock:x': the request could not be sent"
    )


def test_closed_then_used_again(kv: FakeKVTransport) -> None:
    ns = namespace(kv)
    ns.put("tslock:a", "1", expiration_ttl=60)
    ns.close()
    assert ns.get("tslock:a") == "1"  # a new client is opened
    ns.close()
    ns.close()


def test_a_client_closed_under_a_request_is_a_provider_error(kv: FakeKVTransport) -> None:
    ns = namespace(kv)
    ns._http().close()  # as if close() ran in another thread after this request took the client
    for call in (lambda: ns.get("tslock:x"), lambda: ns.delete("tslock:x"), ns.list):
        with pytest.raises(LockProviderError, match="closed meanwhile"):
            call()
