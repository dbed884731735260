"""An in-process fake of the Workers KV REST API, with Cloudflare's limits and its
failure modes on demand: this repository's tests and benchmarks run the KV provider on it.

:class:`FakeKVTransport` is an ``httpx.BaseTransport``: pass it as ``transport=`` to
:class:`~tslock_django.providers.cloudflare_kv.KVLockProvider` (or to any httpx client)
and requests never leave the process. Time comes from a shared
:class:`~tslock_django.core.clock.ClockProvider` (a ``MutableClock`` in tests), so the
same clock can drive the provider and the store.

What it enforces, as Cloudflare documents it:

- the REST paths ``.../accounts/{a}/storage/kv/namespaces/{n}/values/{key}`` and
  ``.../keys``, the ``{"success", "errors", "messages", "result"}`` envelope, HTTP 404
  with code 10009 for a missing key and 10013 for an unknown namespace, 401 for a wrong
  token;
- keys of 1..512 UTF-8 bytes (not ``.`` or ``..``), metadata of at most 1,024 bytes,
  ``expiration_ttl`` of at least 60 seconds, list ``limit`` between 10 and 1,000 with
  opaque cursors, and expiry on the fake's clock;
- one write (PUT or DELETE) per key per second: the second one inside a second of the
  clock is HTTP 429.

What it injects when asked, per *location* (``transport.location("eu")`` returns a view of
the same namespace as seen from another Cloudflare location, itself an
``httpx.BaseTransport``):

- a read cache (``cache_ttl``): reads, misses included, are served from the location's
  cache for that many seconds; the location's own writes refresh its cache;
- delayed delete visibility (``delete_delay``): a key deleted through another location is
  still returned here for that many seconds;
- 5xx answers, timeouts (``httpx.ReadTimeout``, optionally after the write landed),
  bodies that are not the envelope, empty list pages with a cursor, and a broken
  listing that keeps answering the cursor it was sent.

Every request is counted per location and kind (``"GET value"``, ``"PUT value"``,
``"DELETE value"``, ``"GET keys"``) so tests and benchmarks can count requests per
operation.

The error codes the fake uses for limits Cloudflare documents without a public code
(TTL floor, key and metadata size, list limit, rate limit) are named constants below;
clients should rely on the HTTP status, as the provider does.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, unquote

import httpx

from tslock_django.core.clock import ClockProvider, MutableClock

CODE_AUTHENTICATION = 10000
CODE_INTERNAL = 10001
CODE_KEY_NOT_FOUND = 10009
CODE_NAMESPACE_NOT_FOUND = 10013
CODE_INVALID_EXPIRATION = 10019
CODE_KEY_TOO_LONG = 10033
CODE_METADATA_TOO_LARGE = 10023
CODE_INVALID_REQUEST = 10021
CODE_RATE_LIMITED = 10048

MAX_KEY_BYTES = 512
MAX_METADATA_BYTES = 1024
MIN_EXPIRATION_TTL = 60
LIST_LIMIT_MIN, LIST_LIMIT_MAX = 10, 1000
#: One write per key per this interval of the fake's clock.
WRITE_INTERVAL = timedelta(seconds=1)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ROUTE = re.compile(
    r"^(?P<base>.*?)/accounts/(?P<account>[^/]+)/storage/kv/namespaces/(?P<namespace>[^/]+)"
    r"/(?:(?P<keys>keys)|values/(?P<key>[^/]*))$"
)
_NO_METADATA = object()


@dataclass
class _Entry:
    value: bytes
    metadata: Any = _NO_METADATA
    expiration: int | None = None  # epoch seconds

    def expired(self, now: datetime) -> bool:
        return self.expiration is not None and _epoch_seconds(now) >= self.expiration


@dataclass
class _Tombstone:
    entry: _Entry
    deleted_at: datetime
    location: str


@dataclass
class _Fault:
    kind: str  # "status" | "timeout" | "malformed"
    times: int
    method: str | None = None
    status: int = 503
    code: int = CODE_INTERNAL
    message: str = "Internal error (injected by the fake)"
    after_write: bool = False
    after: int = 0  # let this many matching requests through first
    body: bytes = b"<html><body>502 Bad Gateway</body></html>"


def _epoch_seconds(moment: datetime) -> int:
    return int((moment - _EPOCH).total_seconds())


def envelope(result: Any = None, *, result_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Cloudflare's success envelope."""
    body: dict[str, Any] = {"success": True, "errors": [], "messages": [], "result": result}
    if result_info is not None:
        body["result_info"] = result_info
    return body


def error_response(status: int, code: int, message: str) -> httpx.Response:
    """Cloudflare's error envelope with one error."""
    body = {"success": False, "errors": [{"code": code, "message": message}], "messages": [], "result": None}
    return httpx.Response(status, json=body)


class FakeKVLocation(httpx.BaseTransport):
    """The namespace as seen from one Cloudflare location. Create with
    :meth:`FakeKVTransport.location`.

    Attributes:
        name: the location's name.
        cache_ttl: seconds a read (hit or miss) is served from this location's cache
            (0: every read is fresh).
        delete_delay: seconds a delete made through another location stays invisible here.
        requests: a ``Counter`` of this location's requests by kind.
    """

    def __init__(self, store: FakeKVTransport, name: str) -> None:
        self.store = store
        self.name = name
        self.cache_ttl: float = 0.0
        self.delete_delay: float = 0.0
        self.requests: Counter[str] = Counter()
        self._cache: dict[str, tuple[_Entry | None, datetime]] = {}
        self._faults: list[_Fault] = []
        self._empty_pages = 0
        self._empty_served = 0
        self._stuck_pages = 0

    def __repr__(self) -> str:
        return f"<FakeKVLocation {self.name!r} cache_ttl={self.cache_ttl} delete_delay={self.delete_delay}>"

    # -- fault injection ---------------------------------------------------------------

    def fail_next(
        self,
        status: int = 503,
        *,
        times: int = 1,
        method: str | None = None,
        code: int = CODE_INTERNAL,
        message: str = "Internal error (injected by the fake)",
        after: int = 0,
    ) -> None:
        """Answer the next ``times`` requests (of ``method``, if given; after letting
        ``after`` of them through) with ``status`` and Cloudflare's error envelope;
        nothing is changed in the store."""
        self._faults.append(
            _Fault("status", times, method, status=status, code=code, message=message, after=after)
        )

    def timeout_next(
        self, *, times: int = 1, method: str | None = None, after_write: bool = False, after: int = 0
    ) -> None:
        """Raise ``httpx.ReadTimeout`` for the next ``times`` requests. With
        ``after_write=True`` a write is applied first (the answer is what gets lost)."""
        self._faults.append(_Fault("timeout", times, method, after_write=after_write, after=after))

    def malformed_next(
        self, *, times: int = 1, method: str | None = None, body: bytes | None = None, after: int = 0
    ) -> None:
        """Answer the next ``times`` requests with HTTP 200 and a body that is not the
        envelope (an HTML page by default), as a misbehaving proxy would."""
        fault = _Fault("malformed", times, method, after=after)
        if body is not None:
            fault.body = body
        self._faults.append(fault)

    def empty_list_pages(self, count: int) -> None:
        """The next ``count`` list requests return no keys but a cursor to continue
        from (Cloudflare documents that a page can be empty before the end)."""
        self._empty_pages += count

    def repeat_list_cursor(self, count: int) -> None:
        """The next ``count`` list requests return no keys and the cursor they were sent
        (a first request gets a cursor that the following ones then repeat): a store
        that would make a naive reader loop forever."""
        self._stuck_pages += count

    def clear_cache(self) -> None:
        self._cache.clear()

    def _take_fault(self, method: str) -> _Fault | None:
        for fault in self._faults:
            if fault.method is None or fault.method == method:
                if fault.after > 0:
                    fault.after -= 1
                    return None
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    # -- requests --------------------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.store._mutex:
            return self._handle(request)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        raw_path, _, raw_query = request.url.raw_path.decode("ascii").partition("?")
        route = _ROUTE.match(raw_path)
        kind = "keys" if route and route["keys"] else "value"
        self.requests[f"{request.method} {kind}"] += 1
        fault = self._take_fault(request.method)
        if fault is not None and fault.kind == "timeout" and not fault.after_write:
            raise httpx.ReadTimeout("the fake KV location did not answer (injected)", request=request)
        if fault is not None and fault.kind == "status":
            return error_response(fault.status, fault.code, fault.message)
        if fault is not None and fault.kind == "malformed":
            return httpx.Response(200, content=fault.body, headers={"content-type": "text/html"})
        response = self._route(request, route, parse_qs(raw_query, keep_blank_values=True))
        if fault is not None and fault.kind == "timeout":
            raise httpx.ReadTimeout("the fake KV location did not answer (injected)", request=request)
        return response

    def _route(
        self, request: httpx.Request, route: re.Match[str] | None, query: dict[str, list[str]]
    ) -> httpx.Response:
        store = self.store
        if route is None:
            return error_response(404, 7003, "Could not route to this path (fake KV REST API)")
        if (
            store.api_token is not None
            and request.headers.get("authorization") != f"Bearer {store.api_token}"
        ):
            return error_response(401, CODE_AUTHENTICATION, "Authentication error")
        if (
            not store.namespace_exists
            or unquote(route["account"]) != store.account_id
            or unquote(route["namespace"]) != store.namespace_id
        ):
            return error_response(404, CODE_NAMESPACE_NOT_FOUND, "namespace not found")
        if route["keys"]:
            if request.method != "GET":
                return error_response(405, CODE_INVALID_REQUEST, "method not allowed")
            return self._list(query)
        key = unquote(route["key"], errors="strict")
        problem = _key_problem(key)
        if problem:
            return problem
        if request.method == "GET":
            return self._get(key)
        if request.method == "PUT":
            return self._put(request, key, query)
        if request.method == "DELETE":
            return self._delete(key)
        return error_response(405, CODE_INVALID_REQUEST, "method not allowed")

    def _visible(self, key: str) -> _Entry | None:
        now = self.store.clock.now()
        cached = self._cache.get(key)
        if cached is not None and now < cached[1]:
            entry = cached[0]
            return None if entry is None or entry.expired(now) else entry
        entry = self.store._live(key, now)
        if entry is None and self.delete_delay > 0:
            tomb = self.store._tombstones.get(key)
            if (
                tomb is not None
                and tomb.location != self.name
                and now < tomb.deleted_at + timedelta(seconds=self.delete_delay)
                and not tomb.entry.expired(now)
            ):
                entry = tomb.entry
        if self.cache_ttl > 0:
            self._cache[key] = (entry, now + timedelta(seconds=self.cache_ttl))
        return entry

    def _get(self, key: str) -> httpx.Response:
        entry = self._visible(key)
        if entry is None:
            return error_response(404, CODE_KEY_NOT_FOUND, "get: 'key not found'")
        return httpx.Response(200, content=entry.value, headers={"content-type": "application/octet-stream"})

    def _rate_limited(self, key: str, now: datetime) -> httpx.Response | None:
        last = self.store._last_write.get(key)
        if self.store.enforce_write_rate and last is not None and now - last < WRITE_INTERVAL:
            return error_response(429, CODE_RATE_LIMITED, "Too many requests: one write per second per key")
        return None

    def _put(self, request: httpx.Request, key: str, query: dict[str, list[str]]) -> httpx.Response:
        now = self.store.clock.now()
        expiration: int | None = None
        if "expiration_ttl" in query:
            raw = query["expiration_ttl"][-1]
            if not raw.isdigit() or int(raw) <= 0:
                return error_response(
                    400,
                    CODE_INVALID_EXPIRATION,
                    f"Invalid expiration_ttl of {raw}. Please specify integer greater than 0.",
                )
            if int(raw) < MIN_EXPIRATION_TTL:
                return error_response(
                    400,
                    CODE_INVALID_EXPIRATION,
                    f"Invalid expiration_ttl of {raw}. Expiration TTL must be at least {MIN_EXPIRATION_TTL}.",
                )
            expiration = _epoch_seconds(now) + int(raw)
        elif "expiration" in query:
            raw = query["expiration"][-1]
            if not raw.isdigit() or int(raw) < _epoch_seconds(now) + MIN_EXPIRATION_TTL:
                return error_response(
                    400,
                    CODE_INVALID_EXPIRATION,
                    f"Invalid expiration of {raw}. "
                    "Expiration times must be at least 60 seconds in the future.",
                )
            expiration = int(raw)
        parts = _parse_body(request)
        if isinstance(parts, httpx.Response):
            return parts
        value, metadata = parts
        limited = self._rate_limited(key, now)
        if limited:
            return limited
        entry = _Entry(value, metadata, expiration)
        self.store._write(key, entry, now)
        if self.cache_ttl > 0:
            self._cache[key] = (entry, now + timedelta(seconds=self.cache_ttl))
        return httpx.Response(200, json=envelope({}))

    def _delete(self, key: str) -> httpx.Response:
        now = self.store.clock.now()
        limited = self._rate_limited(key, now)
        if limited:
            return limited
        self.store._remove(key, now, self.name)
        if self.cache_ttl > 0:
            self._cache[key] = (None, now + timedelta(seconds=self.cache_ttl))
        return httpx.Response(200, json=envelope(None))

    def _list(self, query: dict[str, list[str]]) -> httpx.Response:
        now = self.store.clock.now()
        raw_limit = query.get("limit", [str(LIST_LIMIT_MAX)])[-1]
        if not raw_limit.isdigit() or not LIST_LIMIT_MIN <= int(raw_limit) <= LIST_LIMIT_MAX:
            return error_response(
                400,
                CODE_INVALID_REQUEST,
                f"Invalid key_count_limit of {raw_limit}: it must be between 10 and 1000",
            )
        limit = int(raw_limit)
        prefix = query.get("prefix", [""])[-1]
        cursor = query.get("cursor", [""])[-1]
        after = ""
        if cursor:
            # Cursors are "k:<last key>", with "e<n>:" before it on empty pages so that
            # each page's cursor differs, as Cloudflare's do.
            try:
                decoded = base64.urlsafe_b64decode(cursor.encode()).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                decoded = ""
            decoded = re.sub(r"^e\d+:", "", decoded)
            if not decoded.startswith("k:"):
                return error_response(400, CODE_INVALID_REQUEST, "Invalid cursor")
            after = decoded[2:]
        if self._stuck_pages > 0:
            self._stuck_pages -= 1
            again = cursor or base64.urlsafe_b64encode(b"k:").decode()
            return httpx.Response(200, json=envelope([], result_info={"count": 0, "cursor": again}))
        if self._empty_pages > 0:
            self._empty_pages -= 1
            self._empty_served += 1
            again = base64.urlsafe_b64encode(f"e{self._empty_served}:k:{after}".encode()).decode()
            return httpx.Response(200, json=envelope([], result_info={"count": 0, "cursor": again}))
        names = sorted(
            (
                k
                for k in self.store._keys(now)
                if k.startswith(prefix) and (not after or _utf8(k) > _utf8(after))
            ),
            key=_utf8,
        )
        page, rest = names[:limit], names[limit:]
        result = []
        for name in page:
            entry = self.store._entries[name]
            item: dict[str, Any] = {"name": name}
            if entry.expiration is not None:
                item["expiration"] = entry.expiration
            if entry.metadata is not _NO_METADATA:
                item["metadata"] = entry.metadata
            result.append(item)
        next_cursor = base64.urlsafe_b64encode(f"k:{page[-1]}".encode()).decode() if rest else ""
        return httpx.Response(
            200, json=envelope(result, result_info={"count": len(result), "cursor": next_cursor})
        )


def _utf8(key: str) -> bytes:
    return key.encode("utf-8")


def _key_problem(key: str) -> httpx.Response | None:
    if key in ("", ".", ".."):
        return error_response(400, CODE_INVALID_REQUEST, f"Invalid key name {key!r}")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return error_response(414, CODE_KEY_TOO_LONG, f"Key names are limited to {MAX_KEY_BYTES} bytes")
    return None


def _parse_body(request: httpx.Request) -> tuple[bytes, Any] | httpx.Response:
    """``(value, metadata)`` from a multipart body (parts ``value`` and ``metadata``) or
    a plain body (the value, no metadata)."""
    content_type = request.headers.get("content-type", "")
    body = request.read()
    if not content_type.startswith("multipart/form-data"):
        return body, _NO_METADATA
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not match:
        return error_response(400, CODE_INVALID_REQUEST, "multipart body without a boundary")
    parts: dict[str, bytes] = {}
    for chunk in body.split(b"--" + match.group(1).encode())[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, content = chunk.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]*)"', head)
        if name:
            parts[name.group(1).decode()] = content[:-2] if content.endswith(b"\r\n") else content
    if "value" not in parts:
        return error_response(400, CODE_INVALID_REQUEST, "multipart body without a 'value' part")
    if "metadata" not in parts:
        return parts["value"], _NO_METADATA
    if len(parts["metadata"]) > MAX_METADATA_BYTES:
        return error_response(
            413,
            CODE_METADATA_TOO_LARGE,
            f"Metadata length of {len(parts['metadata'])} exceeds the limit of 1024",
        )
    try:
        metadata = json.loads(parts["metadata"])
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, CODE_INVALID_REQUEST, "metadata is not valid JSON")
    return parts["value"], metadata


class FakeKVTransport(httpx.BaseTransport):
    """One fake KV namespace; as a transport it is the ``"default"`` location.

    Args:
        clock: the store's clock (a ``MutableClock`` by default); share it with the
            provider so that tests move time for both.
        account_id, namespace_id: the ids requests must name (else 404 / 10013).
        api_token: the token requests must carry (``None`` accepts any).
        enforce_write_rate: answer 429 to a second write to a key within a second.

    Attributes:
        namespace_exists: set to ``False`` to make every request fail with 10013.
    """

    def __init__(
        self,
        clock: ClockProvider | None = None,
        *,
        account_id: str = "test-account",
        namespace_id: str = "test-namespace",
        api_token: str | None = "test-api-token",
        enforce_write_rate: bool = True,
    ) -> None:
        self.clock: ClockProvider = clock or MutableClock()
        self.account_id = account_id
        self.namespace_id = namespace_id
        self.api_token = api_token
        self.enforce_write_rate = enforce_write_rate
        self.namespace_exists = True
        self._mutex = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._tombstones: dict[str, _Tombstone] = {}
        self._last_write: dict[str, datetime] = {}
        self._locations: dict[str, FakeKVLocation] = {}
        self.default = self.location("default")

    def __repr__(self) -> str:
        return f"<FakeKVTransport {len(self._entries)} keys, locations {sorted(self._locations)}>"

    def location(
        self, name: str, *, cache_ttl: float | None = None, delete_delay: float | None = None
    ) -> FakeKVLocation:
        """The view from location ``name`` (created on first use; same object afterwards).
        ``cache_ttl`` and ``delete_delay`` set that location's faults (seconds)."""
        with self._mutex:
            loc = self._locations.get(name)
            if loc is None:
                loc = self._locations[name] = FakeKVLocation(self, name)
            if cache_ttl is not None:
                loc.cache_ttl = cache_ttl
            if delete_delay is not None:
                loc.delete_delay = delete_delay
            return loc

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.default.handle_request(request)

    # fault injection on the default location, for brevity in tests
    def fail_next(self, status: int = 503, **kwargs: Any) -> None:
        self.default.fail_next(status, **kwargs)

    def timeout_next(self, **kwargs: Any) -> None:
        self.default.timeout_next(**kwargs)

    def malformed_next(self, **kwargs: Any) -> None:
        self.default.malformed_next(**kwargs)

    # -- counters --------------------------------------------------------------------

    @property
    def requests(self) -> Counter[str]:
        """All requests of all locations by kind (``"GET value"``, ``"PUT value"``,
        ``"DELETE value"``, ``"GET keys"``)."""
        total: Counter[str] = Counter()
        for loc in self._locations.values():
            total.update(loc.requests)
        return total

    def request_count(self) -> int:
        return sum(self.requests.values())

    def reset_counts(self) -> None:
        for loc in self._locations.values():
            loc.requests.clear()

    # -- direct access (bypasses the API's limits; for arranging and asserting) ---------

    def put_raw(
        self, key: str, value: str | bytes, *, metadata: Any = _NO_METADATA, expiration_ttl: int | None = None
    ) -> None:
        """Store a value as another client would have, without rate or size checks."""
        with self._mutex:
            now = self.clock.now()
            data = value.encode() if isinstance(value, str) else value
            expiration = _epoch_seconds(now) + expiration_ttl if expiration_ttl is not None else None
            self._entries[key] = _Entry(data, metadata, expiration)
            self._tombstones.pop(key, None)

    def get_raw(self, key: str) -> str | None:
        """The live value of ``key`` (no cache, no delay), or ``None``."""
        with self._mutex:
            entry = self._live(key, self.clock.now())
            return None if entry is None else entry.value.decode("utf-8")

    def metadata_of(self, key: str) -> Any:
        """The metadata of ``key``; ``None`` when the key is missing or has none."""
        with self._mutex:
            entry = self._live(key, self.clock.now())
            return None if entry is None or entry.metadata is _NO_METADATA else entry.metadata

    def expiration_of(self, key: str) -> datetime | None:
        """When KV will drop ``key`` (aware UTC), or ``None``."""
        with self._mutex:
            entry = self._live(key, self.clock.now())
            if entry is None or entry.expiration is None:
                return None
            return _EPOCH + timedelta(seconds=entry.expiration)

    def keys(self) -> list[str]:
        with self._mutex:
            return sorted(self._keys(self.clock.now()), key=_utf8)

    # -- the store -------------------------------------------------------------------

    def _live(self, key: str, now: datetime) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expired(now):
            del self._entries[key]
            return None
        return entry

    def _keys(self, now: datetime) -> list[str]:
        return [k for k in list(self._entries) if self._live(k, now) is not None]

    def _write(self, key: str, entry: _Entry, now: datetime) -> None:
        self._entries[key] = entry
        self._tombstones.pop(key, None)
        self._last_write[key] = now

    def _remove(self, key: str, now: datetime, location: str) -> None:
        entry = self._live(key, now)
        self._entries.pop(key, None)
        self._last_write[key] = now
        if entry is not None:
            self._tombstones[key] = _Tombstone(entry, now, location)


__all__ = ["FakeKVLocation", "FakeKVTransport", "envelope", "error_response"]
