"""Stores that are not on our side (issue 11): servers that echo the request back,
values that are not ours, and what the DEBUG page, SQL logs and the command line show.

The servers here are real TCP servers on 127.0.0.1 that write raw bytes, so that they
can send what no well-behaved HTTP server would (a status line holding the request's
Authorization header).
"""

from __future__ import annotations

import io
import json
import re
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import pytest
from django.core.management import CommandError, call_command

from tslock_django import LockConfiguration
from tslock_django.admin.rows import make_row
from tslock_django.conf import providers
from tslock_django.core import decode
from tslock_django.core.query import LockQuery
from tslock_django.core.records import LockRecord, UnreadableRecord
from tslock_django.core.scrubbing import MASK, scrub, secret_forms
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.providers.cloudflare_kv import KVLockProvider

#: A bearer token with every character an escaping form changes: backslash, both
#: quotes, percent and slash. MARKER is in it once, so finding MARKER anywhere in a
#: message means some form of the token got through.
MARKER = "Zq9marker"
TOKEN = "s3cr\\et'" + MARKER + '"%2F/tail'
LOCK_TOKEN_MARKER = "Lk7marker"


def leaked(text: str) -> bool:
    return MARKER in text or LOCK_TOKEN_MARKER in text


# -- a raw echoing server -------------------------------------------------------------------


class Request:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.method, self.target, _ = lines[0].split(" ", 2)
        self.headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()

    @property
    def authorization(self) -> str:
        return self.headers.get("authorization", "")


def http_response(status: int, body: object, reason: str = "X") -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode() + data


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@contextmanager
def raw_server(answer: Callable[[Request], bytes]) -> Iterator[str]:
    """A server on 127.0.0.1 that answers each request with ``answer(request)``; yields
    its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    # accept() is not woken by close() on Linux: poll so the thread ends with the test.
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            with conn:
                raw = _read_request(conn)
                if raw:
                    conn.sendall(answer(Request(raw)))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)


def kv_provider(url: str) -> KVLockProvider:
    return KVLockProvider(
        "hostile-kv",
        account_id="acct",
        namespace_id="ns",
        api_token=TOKEN,
        acknowledge_advisory_lock=True,
        base_url=url,
        timeout=5,
        list_cache_seconds=0,
    )


def kv_setting(url: str) -> dict[str, Any]:
    """The TSLOCK_PROVIDERS entry of a KV provider on the hostile server at ``url``."""
    return {
        "BACKEND": "tslock_django.providers.cloudflare_kv.KVLockProvider",
        "OPTIONS": {
            "account_id": "acct",
            "namespace_id": "ns",
            "api_token": TOKEN,
            "acknowledge_advisory_lock": True,
            "base_url": url,
            "timeout": 5,
        },
    }


def do_provider(url: str) -> DurableObjectLockProvider:
    return DurableObjectLockProvider("hostile-do", url=url, token=TOKEN, timeout=5)


def config(name: str = "job") -> LockConfiguration:
    return LockConfiguration(name=name, lock_at_most_for=timedelta(minutes=1))


# -- the scrubber itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    "echo",
    [
        TOKEN,
        json.dumps(TOKEN),
        json.dumps(json.dumps(TOKEN)),
        json.dumps(TOKEN, ensure_ascii=False),
        repr(TOKEN),
        repr({"t": TOKEN}),
        str([TOKEN]),
        quote(TOKEN, safe=""),
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(TOKEN, safe="")),
        quote(TOKEN),
    ],
    ids=[
        "literal",
        "json",
        "json-in-json",
        "json-unicode",
        "repr",
        "dict-repr",
        "list-str",
        "percent",
        "percent-lower",
        "percent-path",
    ],
)
def test_scrub_masks_every_escaped_form_of_a_secret(echo: str) -> None:
    text = f"the server said: Bearer {echo} (end)"
    scrubbed = scrub(text, [TOKEN])
    assert not leaked(scrubbed), scrubbed
    assert (
        MASK in scrubbed and scrubbed.startswith("the server said: Bearer ") and scrubbed.endswith(" (end)")
    )


def test_scrub_leaves_text_without_secrets_alone() -> None:
    assert scrub("HTTP 500; nothing to hide", [TOKEN, ""]) == "HTTP 500; nothing to hide"
    assert "" not in secret_forms("abc")


# -- Workers KV: the error envelope echoes the header -------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        lambda auth: auth,
        lambda auth: json.dumps(auth)[1:-1],
        lambda auth: repr(auth),
        lambda auth: quote(auth, safe=""),
    ],
    ids=["literal", "json-escaped", "repr", "percent"],
)
def test_kv_error_message_echoing_the_authorization_header_is_scrubbed(form: Callable[[str], str]) -> None:
    def answer(request: Request) -> bytes:
        assert MARKER in request.authorization  # the token did travel
        message = f"bad request with Authorization: {form(request.authorization)}"
        return http_response(400, {"success": False, "errors": [{"code": 10000, "message": message}]})

    with raw_server(answer) as url:
        provider = kv_provider(url)
        with pytest.raises(LockProviderError) as caught:
            provider.lock(config())
    message = str(caught.value)
    assert "HTTP 400" in message and "Cloudflare error 10000" in message
    assert not leaked(message), message


def test_kv_error_echoing_the_written_value_hides_the_lock_token() -> None:
    # Reads find no key; the write is answered with the request body (which holds the
    # new lock token) echoed in the error.
    def answer(request: Request) -> bytes:
        if request.method == "GET":
            return http_response(404, {"success": False, "errors": [{"code": 10009, "message": "not found"}]})
        return http_response(
            500, {"success": False, "errors": [{"code": 10001, "message": request.body.decode("latin-1")}]}
        )

    with raw_server(answer) as url:
        provider = kv_provider(url)
        with pytest.raises(LockProviderError) as caught:
            provider.lock(config())
    message = str(caught.value)
    assert "HTTP 500" in message
    # The body holds {"lockUntil":..,"token":"<uuid>"}: no 8-4-4-4-12 uuid may survive.
    assert '"token":"' not in message or '"token":"***"' in message, message
    assert not leaked(message)


def test_status_line_echoing_the_authorization_header_is_scrubbed() -> None:
    # An unparsable status line: httpx's protocol error quotes it (bytes repr: \\ and \').
    def answer(request: Request) -> bytes:
        return b"HTTP/1.1 2x0 " + request.authorization.encode() + b"\r\nContent-Length: 0\r\n\r\n"

    with raw_server(answer) as url:
        provider = kv_provider(url)
        with pytest.raises(LockProviderError) as caught:
            provider.lock(config())
    message = str(caught.value)
    assert "could not reach the store" in message and "ProtocolError" in message, message
    assert not leaked(message), message


# -- Durable Object Worker: the "error" field ----------------------------------------------


def test_do_error_field_holding_a_json_object_with_the_token_is_scrubbed() -> None:
    def answer(request: Request) -> bytes:
        return http_response(
            500, {"error": {"echo": request.authorization, "nested": [request.authorization]}}
        )

    with raw_server(answer) as url, pytest.raises(LockProviderError) as caught:
        do_provider(url).lock(config())
    message = str(caught.value)
    assert "HTTP 500" in message and "echo" in message
    assert not leaked(message), message


def _do_record(name: str, token: str) -> dict[str, object]:
    return {
        "name": name,
        "locked_at_ms": 1_700_000_000_000,
        "lock_until_ms": 4_000_000_000_000,
        "at_least_until_ms": 1_700_000_000_000,
        "fencing_token": 1,
        "locked_by": "host:1",
        "token_fingerprint": "abcdef01",
        "released": False,
        "token": token,
    }


def test_do_error_echoing_the_lock_token_of_an_unlock_is_scrubbed() -> None:
    lock_token = "lt\\'" + LOCK_TOKEN_MARKER + '"x'

    def answer(request: Request) -> bytes:
        if request.target.startswith("/v1/acquire"):
            return http_response(200, {"acquired": True, "record": _do_record("job", lock_token)})
        sent = json.loads(request.body)
        return http_response(409, {"error": f"refused {sent!r} and {json.dumps(sent)}"})

    with raw_server(answer) as url:
        provider = do_provider(url)
        held = provider.lock(config())
        assert held is not None and held.token == lock_token
        with pytest.raises(LockProviderError) as caught:
            held.unlock()
    message = str(caught.value)
    assert "HTTP 409" in message and "refused" in message
    assert not leaked(message), message


def test_do_record_named_after_the_authorization_header_is_scrubbed() -> None:
    def answer(request: Request) -> bytes:
        record = _do_record(request.authorization, "t")
        record["lock_until_ms"] = "soon"
        return http_response(200, {"acquired": False, "record": record})

    with raw_server(answer) as url, pytest.raises(LockProviderError) as caught:
        do_provider(url).lock(config())
    message = str(caught.value)
    assert "lock_until_ms" in message
    assert not leaked(message), message


# -- the command line ------------------------------------------------------------------


def test_tslock_list_prints_a_hostile_error_message_without_terminal_controls(settings: Any) -> None:
    def answer(request: Request) -> bytes:
        message = f"\x1b[2J\x07cleared\r\nforged-row  held\u202e {request.authorization}"
        return http_response(500, {"success": False, "errors": [{"code": 10001, "message": message}]})

    with raw_server(answer) as url:
        settings.TSLOCK_PROVIDERS = {"kv": kv_setting(url)}
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(CommandError):
            call_command("tslock", "list", stdout=out, stderr=err)
    printed = err.getvalue()
    assert "kv: lock provider 'kv'" in printed and "HTTP 500" in printed
    assert "\\x1b[2J\\x07cleared\\r\\nforged-row" in printed
    for raw in ("\x1b", "\x07", "\r", "\u202e"):
        assert raw not in printed
    assert len(printed.strip().splitlines()) == 1  # the newline forged no line
    assert not leaked(printed)


@pytest.mark.parametrize("number", ["99999999999999999999999", "9223372036854775808", "-1", "1e3", "0x10"])
def test_release_with_an_out_of_range_fencing_token_is_a_usage_error(number: str) -> None:
    with pytest.raises(
        CommandError, match=r"--fencing-token: must be a whole number from 0 to 9223372036854775807"
    ):
        call_command("tslock", "release", "job", "--provider", "default", "--fencing-token", number)


@pytest.mark.django_db(transaction=True)
def test_release_with_the_largest_fencing_token_reaches_the_database() -> None:
    # SQLite raised OverflowError for numbers past 64 bits; the largest one that fits is
    # an ordinary "not held with that fencing token".
    with pytest.raises(CommandError, match="not released: it is not held"):
        call_command("tslock", "release", "job", "--provider", "default", "--fencing-token", str(2**63 - 1))


# -- values that are not ours --------------------------------------------------------------

HUGE_NUMBER = '{"lockUntil":' + "9" * 5000 + ',"lockedAt":0,"lockedBy":"h","token":"t"}'
DEEP = "[" * 30_000 + "]" * 30_000  # under the size bound, far past the recursion limit
# Within the 25 MiB Workers KV stores (a longer answer is refused before it is decoded).
HUGE_HOLDER = '{"lockUntil":1,"lockedAt":0,"lockedBy":"' + "h" * (25 * 1024 * 1024 - 100) + '","token":"t"}'
BAD_VALUES = {
    "5000-digit lockUntil": (HUGE_NUMBER, "a number of 5,000 digits"),
    "nested 30000 deep": (DEEP, "nests 30000 levels deep"),
    "25 MiB lockedBy": (HUGE_HOLDER, "more than the 65,536 a lock record can be"),
    "NaN": ('{"lockUntil":NaN,"lockedAt":0,"lockedBy":"h","token":"t"}', "NaN"),
    "not JSON": ("\x00\x01", "not JSON"),
}


def kv_store(values: dict[str, bytes]) -> Callable[[Request], bytes]:
    """A Workers KV REST API serving ``values`` (full keys), without metadata, as
    ``@tslock/cloudflare-kv`` writes them."""

    def answer(request: Request) -> bytes:
        path = request.target.split("?", 1)[0]
        if path.endswith("/keys"):
            keys = [{"name": key} for key in sorted(values)]
            return http_response(200, {"success": True, "result": keys, "result_info": {"cursor": ""}})
        key = unquote(path.rsplit("/values/", 1)[1])
        if key not in values:
            return http_response(
                404, {"success": False, "errors": [{"code": 10009, "message": "key not found"}]}
            )
        return http_response(200, values[key])

    return answer


def future_ms(minutes: int = 10) -> int:
    return int(datetime.now(tz=timezone.utc).timestamp() * 1000) + minutes * 60_000


@pytest.mark.parametrize("bad", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_a_value_that_is_not_ours_is_an_error_for_its_lock_and_a_row_for_the_listing(bad: str) -> None:
    value, reason = BAD_VALUES[bad]
    good = {"lockUntil": future_ms(), "lockedAt": future_ms(-1), "lockedBy": "ts-host", "token": "tk"}
    store = {"tslock:bad": value.encode(), "tslock:good": json.dumps(good).encode()}
    with raw_server(kv_store(store)) as url:
        provider = kv_provider(url)
        with pytest.raises(LockProviderError, match="'tslock:bad'") as caught:
            provider.lock(config("bad"))
        assert reason in str(caught.value)
        page = provider.query(LockQuery())
    rows = {record.name: record for record in page.records}
    assert list(rows) == ["bad", "good"]
    assert reason in rows["bad"].unreadable and rows["bad"].locked_by.startswith("unreadable: ")
    assert len(rows["bad"].locked_by) < 1000  # nothing of the value itself is shown
    assert rows["good"].locked_by == "ts-host" and not rows["good"].unreadable


def test_a_fractional_lock_until_from_the_typescript_package_is_held() -> None:
    # @tslock/cloudflare-kv writes Date.now() + duration as is: a fraction for a
    # non-integer duration. TypeScript reads it as held; so must we.
    until = future_ms() + 0.7
    value = json.dumps({"lockUntil": until, "lockedAt": future_ms(-1), "lockedBy": "ts-host", "token": "tk"})
    with raw_server(kv_store({"tslock:job": value.encode()})) as url:
        provider = kv_provider(url)
        assert provider.lock(config("job")) is None
        [listed] = provider.query(LockQuery()).records
    assert listed.name == "job" and not listed.unreadable
    assert listed.lock_until == datetime.fromtimestamp(int(until) / 1000, tz=timezone.utc)


def test_decoder_caps_strings_for_display_and_refuses_oversized_fields() -> None:
    assert decode.shown("x" * 5000).endswith("(2,952 more characters)")
    with pytest.raises(decode.Unreadable, match="lockedBy is 70,000 characters long"):
        decode.text("h" * 70_000, "lockedBy")
    assert decode.epoch_ms(1796051977497.7, "lockUntil") == 1796051977497
    for bad in (float("inf"), -1, 253_402_300_800_000, True, "1"):
        with pytest.raises(decode.Unreadable):
            decode.epoch_ms(bad, "lockUntil")


def test_tslock_list_shows_the_unreadable_row_and_every_other_provider(settings: Any) -> None:
    good = {"lockUntil": future_ms(), "lockedAt": future_ms(-1), "lockedBy": "ts-host", "token": "tk"}
    store = {"tslock:bad": HUGE_NUMBER.encode(), "tslock:good": json.dumps(good).encode()}
    with raw_server(kv_store(store)) as url:
        settings.TSLOCK_PROVIDERS = {
            "kv": kv_setting(url),
            "mem": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
        }
        assert providers["mem"].lock(config("in-memory")) is not None
        out, err = io.StringIO(), io.StringIO()
        call_command("tslock", "list", stdout=out, stderr=err)  # no CommandError: nothing failed
    lines = out.getvalue().splitlines()
    by_name = {line.split()[2 if "(advisory)" in line else 1]: line for line in lines[1:]}
    assert set(by_name) == {"bad", "good", "in-memory"}
    assert " unknown " in by_name["bad"] and "unreadable: key 'tslock:bad'" in by_name["bad"]
    assert " held " in by_name["good"] and " held " in by_name["in-memory"]
    row = make_row("kv", "advisory", UnreadableRecord("bad", "kv", "why"), datetime.now(tz=timezone.utc))
    assert row.state == "unknown" and row.record.locked_by == "unreadable: why"  # the admin's row


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"acquired": ' + b"1" * 5000 + b"}", "a number of 5,000 digits"),
        (b"[" * 30_000 + b"]" * 30_000, "nests 30000 levels deep"),
        (b'{"acquired": true, "record": {"lock_until_ms": 1e999}}', "too large to be finite"),
    ],
    ids=["5000 digits", "30000 deep", "infinite"],
)
@pytest.mark.parametrize("status", [200, 500])
def test_answers_that_are_not_ours_are_store_errors(body: bytes, reason: str, status: int) -> None:
    # Answers and error bodies both pass the bounded decoder: never a ValueError or
    # RecursionError out of the provider.
    with raw_server(lambda request: http_response(status, body)) as url:
        for provider in (do_provider(url), kv_provider(url)):
            with pytest.raises(LockProviderError) as caught:
                provider.lock(config())
            message = str(caught.value)
            if status == 500:
                assert "HTTP 500" in message
            else:
                # For KV a 200 answer to a read is the stored value itself.
                assert reason in message
                assert ("HTTP 200" in message) == isinstance(provider, DurableObjectLockProvider)


# -- listings that would not end ---------------------------------------------------------


def test_kv_listing_stops_when_the_store_keeps_answering_the_same_cursor() -> None:
    lists = []

    def answer(request: Request) -> bytes:
        lists.append(request.target)
        return http_response(200, {"success": True, "result": [], "result_info": {"cursor": "same"}})

    with raw_server(answer) as url:
        provider = kv_provider(url)
        with pytest.raises(LockProviderError, match="listing cursor it had already given"):
            list(provider.pages(LockQuery()))
    assert len(lists) == 2  # the first page, then the repeat: not 430 requests in 20 s


def test_kv_listing_page_spends_at_most_its_request_budget() -> None:
    # Ever new cursors and never a key: each page stops at list_request_budget requests.
    lists = []

    def answer(request: Request) -> bytes:
        lists.append(request.target)
        return http_response(
            200, {"success": True, "result": [], "result_info": {"cursor": f"c{len(lists)}"}}
        )

    with raw_server(answer) as url:
        provider = kv_provider(url)
        page = provider.query(LockQuery())
    assert len(lists) == provider.options["list_request_budget"] == 10
    assert page.records == [] and page.next_cursor and any("10 REST requests" in note for note in page.notes)


def test_a_huge_holder_from_a_worker_is_cut_for_display() -> None:
    def answer(request: Request) -> bytes:
        record = _do_record("tslock:job", "t")
        record["locked_by"] = "h" * 1_000_000
        return http_response(200, {"acquired": False, "record": record})

    with raw_server(answer) as url:
        holder = do_provider(url).attempt(config()).holder
    assert isinstance(holder, LockRecord)
    assert holder.locked_by.startswith("hhhh") and holder.locked_by.endswith("(997,952 more characters)")


# -- Durable Object listing pages holding records that are not ours ---------------------------


NOW_MS = 1_800_000_000_000


def do_entry(lock: str, until_ms: int, **changes: object) -> dict[str, object]:
    """A good record of the Worker's listing, with ``changes`` (``None`` removes a field)."""
    record = _do_record(lock, "")
    del record["token"]
    record.update(lock_until_ms=until_ms, at_least_until_ms=NOW_MS - 1)
    record.update(changes)
    return {k: v for k, v in record.items() if v is not None}


def do_listing(entries: list[tuple[str, int, Any]]) -> Callable[[Request], bytes]:
    """A Worker answering ``GET /v1/locks`` over ``entries`` (its sort name, its sort
    time in ms, the record it sends: a JSON value, or raw JSON bytes for what Python
    cannot write), in name or lock_until order, either way, from after_key/after_name.
    Records are sent as they are: this Worker does not check them."""

    def answer(request: Request) -> bytes:
        params = dict(parse_qsl(urlsplit(request.target).query, keep_blank_values=True))
        by_name = params["order"] == "name"
        descending, limit = params["desc"] == "1", int(params["limit"])

        def key(entry: tuple[str, int, Any]) -> tuple[Any, str]:
            return (entry[0], entry[0]) if by_name else (entry[1], entry[0])

        ordered = sorted(entries, key=key, reverse=descending)
        if "after_name" in params:
            after = params["after_key"] if by_name else int(params["after_key"])
            mark = (after, params["after_name"])
            ordered = [e for e in ordered if (key(e) < mark if descending else key(e) > mark)]
        page = [e[2] if isinstance(e[2], bytes) else json.dumps(e[2]).encode() for e in ordered[:limit]]
        more = b"true" if len(ordered) > limit else b"false"
        body = b'{"locks":[' + b",".join(page) + b'],"more":' + more + b',"now_ms":%d}' % NOW_MS
        return http_response(200, body)

    return answer


HUGE_TIME = (
    b'{"name":"b-digits","locked_at_ms":1700000000000,"lock_until_ms":' + b"9" * 5000 + b","
    b'"at_least_until_ms":1,"fencing_token":1,"locked_by":"h","token_fingerprint":"ab","released":false}'
)

#: The Worker's page: (sort name, sort time, record); the bad ones and what their row says.
DO_ENTRIES: list[tuple[str, int, Any]] = [
    ("a-good", NOW_MS + 1_000, do_entry("a-good", NOW_MS + 1_000)),
    ("b-digits", NOW_MS + 2_000, HUGE_TIME),
    ("c-types", NOW_MS + 3_000, do_entry("c-types", NOW_MS + 3_000, locked_by=123, released="no")),
    ("d-nested", NOW_MS + 4_000, do_entry("d-nested", NOW_MS + 4_000, locked_by={"x": [[[1]]]})),
    ("e-missing", NOW_MS + 5_000, do_entry("e-missing", NOW_MS + 5_000, fencing_token=None)),
    ("f-huge-holder", NOW_MS + 6_000, do_entry("f-huge-holder", NOW_MS + 6_000, locked_by="h" * 100_000)),
    ("g-not-an-object", NOW_MS + 7_000, "\x1b[2J a string"),
    ("h-good", NOW_MS + 8_000, do_entry("h-good", NOW_MS + 8_000)),
    ("i-name-a-number", NOW_MS + 9_000, do_entry("i", NOW_MS + 9_000, name=5, fencing_token="1")),
    ("j-good", NOW_MS + 10_000, do_entry("j-good", NOW_MS + 10_000)),
    ("k-long-name", NOW_MS + 11_000, do_entry("x" * 600, NOW_MS + 11_000)),
    ("l-good", NOW_MS + 12_000, do_entry("l-good", NOW_MS + 12_000)),
]
DO_UNREADABLE = {
    "b-digits": "lock_until_ms holds a number of 5,000 digits",
    "c-types": "locked_by, released missing, of the wrong type",
    "d-nested": "locked_by missing, of the wrong type",
    "e-missing": "fencing_token missing",
}
DO_NAMELESS = {"the record is not a JSON object", "name missing", "name (longer than 512 UTF-8 bytes)"}


@pytest.mark.parametrize("order", ["name", "lock_until"])
@pytest.mark.parametrize("descending", [False, True])
def test_do_listing_makes_each_bad_record_one_unreadable_row_and_pages_past_it(
    order: str, descending: bool
) -> None:
    with raw_server(do_listing(DO_ENTRIES)) as url:
        pages = list(do_provider(url).pages(LockQuery(order=order, descending=descending, limit=3)))
    rows = [record for page in pages for record in page.records]
    readable = [r.name for r in rows if isinstance(r, LockRecord)]
    good = ["a-good", "f-huge-holder", "h-good", "j-good", "l-good"]
    assert readable == (good[::-1] if descending else good), "each good record once, in order"
    named = {r.name: r.reason for r in rows if isinstance(r, UnreadableRecord) and r.name}
    assert set(named) == set(DO_UNREADABLE), "each bad record with a readable name is listed"
    counts = Counter(r.name for r in rows if isinstance(r, UnreadableRecord) and r.name)
    # Placed by its name or its readable time, each is listed once; b-digits has no
    # readable lock_until, so in that order it takes the place of the row before it
    # and may show again at the top of the next page.
    placeless = {"b-digits"} if order == "lock_until" else set()
    assert all(counts[name] == 1 for name in set(DO_UNREADABLE) - placeless), counts
    for name, words in DO_UNREADABLE.items():
        assert words in named[name] and named[name].startswith("the Worker answered a record"), named[name]
    nameless = [r.reason for r in rows if isinstance(r, UnreadableRecord) and not r.name]
    # Without a name it has no place: it may show again at the top of the next page.
    assert {next(w for w in DO_NAMELESS if w in reason) for reason in nameless} == DO_NAMELESS
    for row in rows:
        assert isinstance(row, LockRecord) or (row.state(datetime.now(tz=timezone.utc)) == "unknown")
        assert (
            len(row.locked_by) < 2_200 and "\x1b" not in row.locked_by and "hhhh" * 600 not in row.locked_by
        )
    holder = next(r for r in rows if r.name == "f-huge-holder")
    assert holder.locked_by.endswith("(97,952 more characters)")  # readable, cut for display


def test_do_listing_page_of_nothing_but_nameless_records_is_an_error_not_a_loop() -> None:
    entries = [(f"n{i}", NOW_MS + i, "not a record") for i in range(3)]
    with (
        raw_server(do_listing(entries)) as url,
        pytest.raises(LockProviderError, match="cannot go past them") as caught,
    ):
        list(do_provider(url).pages(LockQuery(limit=2)))
    assert caught.value.alias == "hostile-do"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"locks": {"a": 1}, "more": false, "now_ms": 1800000000000}',
        b'{"locks": [], "more": "no", "now_ms": 1800000000000}',
        b'{"locks": [], "more": false, "now_ms": ' + b"1" * 5000 + b"}",
        b"[" * 40 + b"]" * 40,
    ],
    ids=["not JSON", "locks not a list", "more not a boolean", "now_ms 5000 digits", "too deep"],
)
def test_do_listing_answer_that_is_not_a_page_is_a_store_error_naming_the_alias(body: bytes) -> None:
    with (
        raw_server(lambda request: http_response(200, body)) as url,
        pytest.raises(LockProviderError) as caught,
    ):
        do_provider(url).query(LockQuery())
    assert caught.value.alias == "hostile-do" and "hostile-do" in str(caught.value)


def test_tslock_list_shows_do_unreadable_rows_and_the_good_ones(settings: Any) -> None:
    with raw_server(do_listing(DO_ENTRIES)) as url:
        settings.TSLOCK_PROVIDERS = {
            "do": {
                "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
                "OPTIONS": {"url": url, "token": TOKEN, "timeout": 5},
            }
        }
        out, err, as_json = io.StringIO(), io.StringIO(), io.StringIO()
        call_command("tslock", "list", stdout=out, stderr=err)
        call_command("tslock", "list", "--json", stdout=as_json)
    text = out.getvalue()
    assert "\x1b" not in text and not leaked(text) and err.getvalue() == ""
    lines = {line.split()[1]: line for line in text.splitlines()[1:] if line.split()[1] != "(no"}
    assert {"a-good", "h-good", "b-digits", "c-types"} <= set(lines)
    assert " unknown " in lines["b-digits"] and "unreadable: the Worker answered" in lines["b-digits"]
    assert " held " in lines["a-good"]
    assert "(no readable name)" in text
    rows = json.loads(as_json.getvalue())
    assert {row["state"] for row in rows if row["unreadable"]} == {"unknown"}
    assert all(row["locked_by"] is None for row in rows if row["unreadable"])


@pytest.mark.parametrize(
    "answer",
    [
        {"acquired": False, "record": do_entry("job", NOW_MS + 1, locked_by=None)},
        {"acquired": False, "record": "held by someone"},
        {"acquired": True, "record": {**do_entry("job", NOW_MS + 1), "token": 5}},
    ],
    ids=["holder without locked_by", "holder not an object", "own holding without token"],
)
def test_do_acquire_answering_a_garbage_record_is_a_store_error_never_held(answer: dict[str, Any]) -> None:
    with (
        raw_server(lambda request: http_response(200, answer)) as url,
        pytest.raises(LockProviderError, match="cannot use") as caught,
    ):
        do_provider(url).attempt(config("job"))
    assert caught.value.alias == "hostile-do" and len(str(caught.value)) < 1000


def test_do_listing_records_echoing_the_bearer_token_do_not_show_it() -> None:
    echoed = "Bearer " + json.dumps(TOKEN)[1:-1]
    entries = [
        ("a-good", NOW_MS + 1, do_entry("a-good", NOW_MS + 1, locked_by="host " + TOKEN)),
        (echoed, NOW_MS + 2, do_entry(echoed, NOW_MS + 2)),
        (TOKEN, NOW_MS + 3, do_entry(TOKEN, NOW_MS + 3, fencing_token="x")),
        ("d-bad", NOW_MS + 4, {**do_entry("d-bad", NOW_MS + 4, fencing_token=None), TOKEN: 1e999}),
        ("e-good", NOW_MS + 5, do_entry("e-good", NOW_MS + 5)),
    ]
    with raw_server(do_listing(entries)) as url:
        rows = [r for page in do_provider(url).pages(LockQuery(limit=2)) for r in page.records]
    shown = repr([(r.name, r.locked_by) for r in rows])
    assert not leaked(shown), shown
    assert [r.name for r in rows if isinstance(r, LockRecord)] == ["a-good", "e-good"]
    assert next(r for r in rows if r.name == "a-good").locked_by == f"host {MASK}"
    # Named after the token: placed by the name, shown without it.
    assert sum(1 for r in rows if isinstance(r, UnreadableRecord) and not r.name) == 2
    bad = next(r for r in rows if r.name == "d-bad")
    assert isinstance(bad, UnreadableRecord) and f"{MASK} holds Infinity" in bad.reason
