"""A small client for one Workers KV namespace over the Cloudflare REST API.

It speaks the four calls a lock needs (read a value, write a value with metadata and a
TTL, delete a value, list keys with their metadata) and turns every answer that is not
the expected one into a :class:`~tslock_django.exceptions.LockProviderError`:

- a missing key is HTTP 404 with Cloudflare error code ``10009``: ``get`` returns
  ``None`` and ``delete`` treats it as done;
- HTTP 429 is :class:`~tslock_django.exceptions.LockRateLimited` (Workers KV allows one
  write per second per key, and the REST API has an account-wide request budget);
- everything else (``10013`` namespace not found, 4xx, 5xx, a body that is not the
  documented envelope, a timeout) is a ``LockProviderError`` naming the status and code.

Writes are never retried here: a PUT that timed out may or may not have landed, and
only the caller (the lock provider) knows whether repeating it is safe.

The API token travels in the ``Authorization`` header only. It is not part of any URL,
message, log line or repr, so an error report can be pasted into an issue as is.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Generator, Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
from django.views.decorators.debug import sensitive_variables

from ..core.clock import ClockProvider
from ..core.decode import Unreadable
from ..core.steps import drive
from ..exceptions import LockProviderError
from .http import Answer, PooledClient, Request, error_for_status, json_body, parse_json
from .http_async import AsyncPooledClient
from .store_options import KV_DEFAULT_BASE_URL

#: Where the Cloudflare API lives; tests and local runtimes pass another base URL.
DEFAULT_BASE_URL = KV_DEFAULT_BASE_URL

#: Cloudflare's error code for "this key does not exist" (with HTTP 404).
KEY_NOT_FOUND = 10009
#: Cloudflare's error code for "this namespace does not exist" (with HTTP 404).
NAMESPACE_NOT_FOUND = 10013

#: The largest value Workers KV stores (25 MiB): a value read may be that long, and is
#: then the decoder's to refuse with its reason; a longer answer is not from KV.
MAX_VALUE_BYTES = 25 * 1024 * 1024

#: The list endpoint accepts 10..1000 keys per page.
LIST_LIMIT_MIN = 10
LIST_LIMIT_MAX = 1000


@dataclass(frozen=True)
class KVKey:
    """One key of a listing.

    Attributes:
        name: the full storage key (any key prefix included).
        expiration: when KV drops the key, in epoch seconds, or ``None``.
        metadata: the JSON metadata stored with the key, or ``None`` when it has none.
    """

    name: str
    expiration: int | None = None
    metadata: Any = None
    has_metadata: bool = field(default=False, repr=False)


@dataclass(frozen=True)
class KVPage:
    """One page of a listing; ``cursor`` is empty on the last page. A page can be empty
    and still have a cursor: keep going until the cursor is empty."""

    keys: list[KVKey]
    cursor: str


@dataclass(frozen=True)
class CloudflareError:
    """The first entry of Cloudflare's ``errors`` array (code 0 when there was none)."""

    code: int
    message: str

    def describe(self) -> str:
        if not self.code and not self.message:
            return ""
        return f"Cloudflare error {self.code}: {self.message}" if self.code else self.message


def cloudflare_error(response: Answer) -> CloudflareError:
    """Read ``{"success": false, "errors": [{"code", "message"}]}``; tolerant of bodies
    that are not that envelope (a proxy's HTML page, an empty body)."""
    try:
        body = parse_json(response)
    except Unreadable:
        return CloudflareError(0, "")
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        code = errors[0].get("code")
        message = errors[0].get("message")
        return CloudflareError(
            code if isinstance(code, int) and not isinstance(code, bool) else 0,
            # Whole: the caller scrubs secrets before cutting it (a cut secret is not found).
            str(message) if message is not None else "",
        )
    return CloudflareError(0, "")


def encode_key(key: str) -> str:
    """Percent-encode a storage key as one path segment. Every reserved character is
    encoded (``/``, ``?``, ``%``, ``:``, spaces, non-ASCII) so that any key round-trips."""
    return quote(key, safe="")


class KVRestNamespace:
    """One Workers KV namespace reached through the Cloudflare REST API.

    Args:
        account_id: the Cloudflare account id.
        namespace_id: the KV namespace id.
        api_token: an API token with "Workers KV Storage: Edit" on the account.
        base_url: the API root (default :data:`DEFAULT_BASE_URL`).
        timeout: seconds one request may take, answer included (see
            :meth:`~tslock_django.providers.http.PooledClient.send`).
        alias: the provider alias, used in error messages.
        transport: an ``httpx.BaseTransport`` to use instead of the network (tests).
    """

    @sensitive_variables("api_token")
    def __init__(
        self,
        *,
        account_id: str,
        namespace_id: str,
        api_token: str,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 10.0,
        alias: str = "kv",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.account_id = account_id
        self.namespace_id = namespace_id
        self.base_url = base_url.rstrip("/")
        self.alias = alias
        # The token, for scrubbing echoes of the Authorization header from error texts.
        self._secrets: tuple[str, ...] = (api_token,)
        self._prefix = f"/accounts/{encode_key(account_id)}/storage/kv/namespaces/{encode_key(namespace_id)}"
        self._apool: AsyncPooledClient | None = None
        self._pool = PooledClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"<KVRestNamespace {self.base_url} account={self.account_id} namespace={self.namespace_id}>"

    def _http(self) -> httpx.Client:
        return self._pool.get()

    def close(self) -> None:
        """Close the pooled connections; the next call opens a new client."""
        self._pool.close()
        if self._apool is not None:
            self._apool.forget()  # an async client closes on its loop (aclose, or its shutdown)

    async def aclose(self) -> None:
        """Close the HTTP clients, the asyncio one of the running loop included."""
        if self._apool is not None:
            await self._apool.aclose()
        self.close()

    async def asend(self, request: Request) -> Answer:
        """Send one request of the steps below with an ``httpx.AsyncClient``."""
        if self._apool is None:
            self._apool = AsyncPooledClient(self._pool)
        return await self._apool.send_request(request)

    def _value_path(self, key: str) -> str:
        return f"{self._prefix}/values/{encode_key(key)}"

    # -- the four calls ------------------------------------------------------------

    def get(self, key: str) -> str | None:
        """The value stored under ``key`` (decoded as UTF-8), or ``None`` if it is missing.

        Raises:
            LockProviderError: any other answer, including a value that is not UTF-8.
        """
        content = self.get_bytes(key)
        if content is None:
            return None
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError as err:
            raise LockProviderError(
                f"read key {key!r}: the stored value is not UTF-8 text", alias=self.alias
            ) from err

    def get_bytes(self, key: str) -> bytes | None:
        """The value stored under ``key`` as stored, or ``None`` if it is missing.

        Raises:
            LockProviderError: any other answer.
        """
        return drive(self.get_bytes_steps(key), self._pool.send_request)

    # The calls a lock makes are written once, as steps (see core.steps): the methods
    # above and below send them with the pooled httpx.Client; the provider's async
    # primitives send them with an httpx.AsyncClient.

    def get_bytes_steps(self, key: str) -> Generator[Request, Answer, bytes | None]:
        """:meth:`get_bytes` as steps."""
        what = f"read key {key!r}"
        response = yield Request(
            self.alias, what, "GET", self._value_path(key), self._secrets, max_bytes=MAX_VALUE_BYTES
        )
        if response.status_code == 200:
            return response.content
        if response.status_code == 404 and cloudflare_error(response).code == KEY_NOT_FOUND:
            return None
        raise self._error(what, response)

    def put(
        self,
        key: str,
        value: str,
        *,
        expiration_ttl: int | None = None,
        metadata: Any = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        """Write ``value`` (and ``metadata``, JSON, when given) under ``key``.

        Args:
            expiration_ttl: seconds until KV drops the key (Cloudflare requires >= 60).
            secrets: what the value holds that no error message may repeat (the lock
                token), should the server echo the request.

        Raises:
            LockRateLimited: HTTP 429 (a second write to the key within a second, or the
                API's request budget is spent).
            LockProviderError: any other failure. Never retried: the write may have landed.
        """
        steps = self.put_steps(key, value, expiration_ttl=expiration_ttl, metadata=metadata, secrets=secrets)
        drive(steps, self._pool.send_request)

    def put_steps(
        self,
        key: str,
        value: str,
        *,
        expiration_ttl: int | None = None,
        metadata: Any = None,
        secrets: tuple[str, ...] = (),
    ) -> Generator[Request, Answer, None]:
        """:meth:`put` as steps."""
        what = f"write key {key!r}"
        files: dict[str, tuple[None, bytes]] = {"value": (None, value.encode("utf-8"))}
        if metadata is not None:
            files["metadata"] = (
                None,
                json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode(),
            )
        params = {"expiration_ttl": str(expiration_ttl)} if expiration_ttl is not None else None
        secrets = self._secrets + secrets
        options = {"params": params, "files": files}
        response = yield Request(self.alias, what, "PUT", self._value_path(key), secrets, options=options)
        self._expect_success(what, response, secrets)

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error.

        Raises:
            LockRateLimited: HTTP 429.
            LockProviderError: any other failure.
        """
        drive(self.delete_steps(key), self._pool.send_request)

    def delete_steps(self, key: str) -> Generator[Request, Answer, None]:
        """:meth:`delete` as steps."""
        what = f"delete key {key!r}"
        response = yield Request(self.alias, what, "DELETE", self._value_path(key), self._secrets)
        if response.status_code == 404 and cloudflare_error(response).code == KEY_NOT_FOUND:
            return
        self._expect_success(what, response)

    def list(self, *, prefix: str = "", limit: int = LIST_LIMIT_MAX, cursor: str = "") -> KVPage:
        """One page of keys starting with ``prefix``, in key order, with their metadata.

        Raises:
            ValueError: ``limit`` outside 10..1000.
            LockProviderError: the store failed or answered something else than a listing.
        """
        if not LIST_LIMIT_MIN <= limit <= LIST_LIMIT_MAX:
            raise ValueError(f"limit must be between {LIST_LIMIT_MIN} and {LIST_LIMIT_MAX}, got {limit}")
        what = f"list keys with prefix {prefix!r}"
        params: dict[str, str | int] = {"limit": limit}
        if prefix:
            params["prefix"] = prefix
        if cursor:
            params["cursor"] = cursor
        response = self._pool.send(
            self.alias, what, "GET", f"{self._prefix}/keys", secrets=self._secrets, params=params
        )
        body = self._expect_success(what, response)
        result = body.get("result")
        info = body.get("result_info") or {}
        if not isinstance(result, list) or not isinstance(info, dict):
            raise self._malformed(what, response, "a listing without a result array")
        keys = []
        for item in result:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise self._malformed(what, response, "a listing entry without a name")
            expiration = item.get("expiration")
            keys.append(
                KVKey(
                    name=item["name"],
                    expiration=expiration if isinstance(expiration, int) else None,
                    metadata=item.get("metadata"),
                    has_metadata="metadata" in item and item["metadata"] is not None,
                )
            )
        next_cursor = info.get("cursor") or ""
        if not isinstance(next_cursor, str):
            raise self._malformed(what, response, "a cursor that is not a string")
        return KVPage(keys, next_cursor)

    # -- answers ---------------------------------------------------------------------

    def _expect_success(self, what: str, response: Answer, secrets: tuple[str, ...] = ()) -> dict[str, Any]:
        if response.status_code != 200:
            raise self._error(what, response, secrets)
        body = json_body(self.alias, what, response)
        if not isinstance(body, dict) or body.get("success") is not True:
            raise self._malformed(what, response, "an answer without success: true")
        return body

    def _error(self, what: str, response: Answer, secrets: tuple[str, ...] = ()) -> LockProviderError:
        error = cloudflare_error(response)
        detail = error.describe()
        if error.code == NAMESPACE_NOT_FOUND:
            detail += f"; check OPTIONS namespace_id ({self.namespace_id}) and account_id ({self.account_id})"
        # The message of a server that echoes the request holds the Authorization header.
        return error_for_status(self.alias, what, response, detail, self._secrets + secrets)

    def _malformed(self, what: str, response: Answer, problem: str) -> LockProviderError:
        return LockProviderError(
            f"{what}: HTTP {response.status_code} with {problem} (not the Cloudflare API envelope)",
            alias=self.alias,
            status_code=response.status_code,
        )


#: What :meth:`ListingCache.get` returns for a key it does not hold (``None`` is a value:
#: a key found missing).
MISS: Any = object()


class ListingCache:
    """Answers of the REST API kept for a few seconds, so that repeated listings (an
    operator reloading the admin) do not spend the API token's request budget.

    Entries are keyed by what was asked (callers include the prefix and the cursor in
    the key), live ``seconds`` on ``clock`` and are bounded by ``max_weight`` (the
    caller weighs each answer: a list page by its keys, a value by its kilobytes): the
    least recently used go first.
    Thread-safe.

    :meth:`clear` empties it and starts a new *generation*: an answer fetched before a
    ``clear`` (a listing that raced a write) is not stored afterwards, so a process
    never caches what it read before its own write.

    Args:
        clock: where time comes from (the provider's, so tests move it).
        seconds: how long an answer is served; ``0`` stores nothing.
        max_weight: the most keys and values held at once.
    """

    def __init__(self, clock: ClockProvider, seconds: float, max_weight: int = 10_000) -> None:
        self.clock = clock
        self.ttl = timedelta(seconds=seconds)
        self.max_weight = max_weight
        self._entries: OrderedDict[Hashable, tuple[datetime, Any, int]] = OrderedDict()
        self._weight = 0
        self._generation = 0
        self._mutex = threading.Lock()

    def __len__(self) -> int:
        with self._mutex:
            return len(self._entries)

    @property
    def generation(self) -> int:
        """Read before fetching; pass to :meth:`put` with the answer."""
        with self._mutex:
            return self._generation

    def get(self, key: Hashable) -> Any:
        """The answer stored under ``key`` if it is still fresh, else :data:`MISS`."""
        now = self.clock.now()
        with self._mutex:
            entry = self._entries.get(key)
            if entry is None:
                return MISS
            stored_at, value, weight = entry
            # A clock that went back is treated as stale too: never serve longer than ttl.
            if not stored_at <= now < stored_at + self.ttl:
                del self._entries[key]
                self._weight -= weight
                return MISS
            self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any, *, generation: int, weight: int = 1) -> None:
        """Keep ``value`` under ``key``, unless the cache was cleared since
        ``generation`` was read, caching is off, or it alone exceeds the bound."""
        weight = max(1, weight)
        if self.ttl <= timedelta(0) or weight > self.max_weight:
            return
        now = self.clock.now()
        with self._mutex:
            if generation != self._generation:
                return
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[2]
            self._entries[key] = (now, value, weight)
            self._weight += weight
            while self._weight > self.max_weight:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._weight -= dropped

    def clear(self) -> None:
        """Forget every answer and refuse those fetched before now."""
        with self._mutex:
            self._entries.clear()
            self._weight = 0
            self._generation += 1
