"""An **advisory** lock provider on a Workers KV namespace, over the Cloudflare REST API.

Workers KV is eventually consistent, caches reads (a missing key too) for about a
minute, has no compare-and-swap and accepts one write per second per key. A lock built
on it cannot guarantee one holder: two callers in different locations can both acquire
the same name. This provider exists so that a Django app can share lock names with
Workers that already use ``@tslock/cloudflare-kv``, and for jobs where an occasional
overlapping run is harmless. Use
:class:`~tslock_django.providers.cloudflare_do.DurableObjectLockProvider` when it is not.

The storage format is the one of ``@tslock/cloudflare-kv``, byte for byte:

- key: ``key_prefix + name`` (default prefix ``tslock:``), 1..512 UTF-8 bytes;
- value: ``{"lockUntil":<epoch ms>,"lockedAt":<epoch ms>,"lockedBy":"...","token":"..."}``
  (compact JSON, that key order);
- ``expiration_ttl = max(60, floor(remaining_ms / 1000) + 1)``: KV refuses TTLs under 60 s,
  so the key can outlive a short lock; ``lockUntil`` is what decides, never the key's
  existence.

The same JSON is also stored as the key's metadata so that listing needs one request per
1,000 locks; keys written without metadata (by the TypeScript package) are read one by one.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import httpx

from ..core.clock import ClockProvider
from ..core.configuration import LockConfiguration
from ..core.durations import to_milliseconds
from ..core.provider import REQUIRED, LockProvider, SimpleLock
from ..core.records import LockRecord, fingerprint
from ..exceptions import LockProviderError
from .epoch import epoch_ms_in_range, from_epoch_ms, to_epoch_ms
from .http import BEARER_TOKEN_RULE, valid_bearer_token
from .kv_rest import DEFAULT_BASE_URL, LIST_LIMIT_MAX, KVKey, KVRestNamespace

#: The name this module has always exported for ``to_epoch_ms`` (tests and callers use it).
epoch_ms = to_epoch_ms

#: Workers KV refuses an ``expiration_ttl`` below this many seconds.
MIN_EXPIRATION_TTL = 60
#: Workers KV stores at most this many bytes of metadata per key.
MAX_METADATA_BYTES = 1024
#: The fields of a record, in the order ``@tslock/cloudflare-kv`` writes them.
RECORD_FIELDS = ("lockUntil", "lockedAt", "lockedBy", "token")


def expiration_ttl(lock_until_ms: int, now_ms: int) -> int:
    """The TTL the TypeScript package uses: a second past ``lockUntil``, at least 60 s."""
    remaining_ms = max(0, lock_until_ms - now_ms)
    return max(MIN_EXPIRATION_TTL, math.floor(remaining_ms / 1000) + 1)


@dataclass(frozen=True)
class KVRecord:
    """A lock record as stored in KV (times in epoch milliseconds)."""

    lock_until: int
    locked_at: int
    locked_by: str
    # The ownership token: whoever has it can unlock or extend, so a repr must not show it.
    token: str = field(repr=False)

    def encode(self) -> str:
        """The exact text ``JSON.stringify`` produces for this record in TypeScript."""
        return json.dumps(self.as_json(), separators=(",", ":"), ensure_ascii=False)

    def as_json(self) -> dict[str, Any]:
        return {
            "lockUntil": self.lock_until,
            "lockedAt": self.locked_at,
            "lockedBy": self.locked_by,
            "token": self.token,
        }

    @classmethod
    def from_json(cls, data: Any) -> KVRecord | None:
        """The record in ``data`` (a decoded JSON value), or ``None`` if it is not one.

        Epoch times must be integers (a float with no fraction is accepted: JavaScript
        has one number type) from 1970 up to year 9999, the range a ``datetime`` holds;
        ``lockedBy`` and ``token`` must be strings. Extra fields are ignored so that a
        newer writer can add some.
        """
        if not isinstance(data, dict):
            return None
        times = []
        for key in ("lockUntil", "lockedAt"):
            value = data.get(key)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool) or not epoch_ms_in_range(value):
                return None
            times.append(value)
        locked_by, token = data.get("lockedBy"), data.get("token")
        if not isinstance(locked_by, str) or not isinstance(token, str):
            return None
        return cls(times[0], times[1], locked_by, token)

    @classmethod
    def decode(cls, text: str, *, key: str, alias: str) -> KVRecord:
        """Parse a stored value.

        Raises:
            LockProviderError: naming ``key`` when the value is not JSON or lacks a field.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise LockProviderError(
                f"key {key!r} holds a value that is not JSON, so it is not a lock record of "
                "@tslock/cloudflare-kv; delete the key or use another key_prefix",
                alias=alias,
            ) from err
        record = cls.from_json(data)
        if record is None:
            raise LockProviderError(
                f"key {key!r} holds JSON that is not a lock record (it needs lockUntil and lockedAt as "
                "integer epoch milliseconds between 1970 and year 9999, and string lockedBy and token); "
                "delete the key or use another key_prefix",
                alias=alias,
            )
        return record


class KVLockProvider(LockProvider):
    """Advisory locks in a Workers KV namespace, compatible with ``@tslock/cloudflare-kv``.

    OPTIONS:
        account_id, namespace_id, api_token: where the namespace is and a token with
            "Workers KV Storage: Edit" (required).
        acknowledge_advisory_lock: must be exactly ``True``: the statement that two
            callers can both acquire a lock and that this is acceptable for your jobs.
        key_prefix: prepended to every lock name (default ``"tslock:"``, as TypeScript).
        confirm_write: re-read after writing and report "not acquired" when another
            token is seen (default ``True``; one more request per acquisition).
        base_url: the API root (default ``https://api.cloudflare.com/client/v4``).
        timeout: seconds per request (default 10).

    Keyword Args:
        transport: an ``httpx.BaseTransport`` used instead of the network (tests, e.g.
            :class:`tslock_django.testing.kv_fake.FakeKVTransport`).

    Raises:
        InvalidLockProvider: a missing or wrong option; without the acknowledgement.
    """

    guarantee = "advisory"
    default_options: ClassVar[dict[str, Any]] = {
        "account_id": REQUIRED,
        "namespace_id": REQUIRED,
        "api_token": REQUIRED,
        "acknowledge_advisory_lock": False,
        "key_prefix": "tslock:",
        "confirm_write": True,
        "base_url": DEFAULT_BASE_URL,
        "timeout": 10.0,
    }
    secret_options = frozenset({"api_token"})
    max_key_bytes = 512
    #: Workers KV accepts one write per second per key and keep-alive writes every
    #: ``lock_at_most_for / 2``; below this ``lock_at_most_for`` the extension can
    #: collide with the previous write and be refused (HTTP 429). Checks and the
    #: keep-alive use it to refuse such configurations.
    min_keep_alive_at_most_for: ClassVar[timedelta] = timedelta(seconds=2)

    def __init__(
        self,
        alias: str = "default",
        *,
        clock: ClockProvider | None = None,
        transport: httpx.BaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(alias, clock=clock, **options)
        self._validate_options()
        opts = self.options
        self.key_prefix: str = opts["key_prefix"]
        self.confirm_write: bool = opts["confirm_write"]
        self.namespace = KVRestNamespace(
            account_id=opts["account_id"],
            namespace_id=opts["namespace_id"],
            api_token=opts["api_token"],
            base_url=opts["base_url"],
            timeout=float(opts["timeout"]),
            alias=alias,
            transport=transport,
        )

    def _validate_options(self) -> None:
        opts = self.options
        if opts["acknowledge_advisory_lock"] is not True:
            raise self.option_error(
                "acknowledge_advisory_lock",
                f"must be True, got {opts['acknowledge_advisory_lock']!r}. Workers KV is eventually "
                "consistent and has no compare-and-swap, so two processes can both acquire the same "
                "lock; set it to True only if an occasional overlapping run is acceptable, otherwise "
                "use tslock_django.providers.cloudflare_do.DurableObjectLockProvider (Durable Objects "
                "give one holder at a time)",
            )
        for key in ("account_id", "namespace_id", "api_token"):
            if not isinstance(opts[key], str) or not opts[key].strip():
                # Never echo the value: api_token is secret, the others may be pasted wrongly.
                raise self.option_error(key, "must be a non-empty string from the Cloudflare dashboard")
        if not valid_bearer_token(opts["api_token"]):
            # Checked here because the HTTP library would refuse the header only at the first
            # request, with an error that quotes the header, secret included.
            raise self.option_error("api_token", BEARER_TOKEN_RULE)
        if not isinstance(opts["key_prefix"], str):
            raise self.option_error(
                "key_prefix", f"must be a string, got {type(opts['key_prefix']).__name__}"
            )
        if len(opts["key_prefix"].encode("utf-8")) >= self.max_key_bytes:
            raise self.option_error("key_prefix", f"must be shorter than {self.max_key_bytes} UTF-8 bytes")
        if not isinstance(opts["confirm_write"], bool):
            raise self.option_error("confirm_write", f"must be True or False, got {opts['confirm_write']!r}")
        base_url = opts["base_url"]
        if not isinstance(base_url, str) or not base_url.startswith(("https://", "http://")):
            raise self.option_error("base_url", f"must be an http(s) URL such as {DEFAULT_BASE_URL!r}")
        timeout = opts["timeout"]
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 300:
            raise self.option_error(
                "timeout", f"must be a number of seconds between 0 and 300, got {timeout!r}"
            )

    # -- keys ------------------------------------------------------------------------

    def key_for(self, name: str) -> str:
        return self.key_prefix + name

    def validate_name(self, name: str) -> None:
        super().validate_name(name)
        if self.key_for(name) in (".", ".."):
            raise ValueError(f"lock name {name!r} gives the storage key {name!r}, which Workers KV refuses")

    def close(self) -> None:
        self.namespace.close()

    # -- store access ----------------------------------------------------------------

    def _now_ms(self) -> int:
        return epoch_ms(self.clock.now())

    def _read(self, key: str) -> KVRecord | None:
        text = self.namespace.get(key)
        return None if text is None else KVRecord.decode(text, key=key, alias=self.alias)

    def _write(self, key: str, record: KVRecord, now_ms: int) -> None:
        metadata: dict[str, Any] | None = record.as_json()
        if len(record.encode().encode("utf-8")) > MAX_METADATA_BYTES:
            # A very long locked_by would break the write; listing then reads the value.
            metadata = None
        self.namespace.put(
            key, record.encode(), expiration_ttl=expiration_ttl(record.lock_until, now_ms), metadata=metadata
        )

    def _record(self, name: str, stored: KVRecord, *, with_token: bool) -> LockRecord:
        return LockRecord(
            name=name,
            lock_until=from_epoch_ms(stored.lock_until),
            locked_at=from_epoch_ms(stored.locked_at),
            locked_by=stored.locked_by,
            token=stored.token if with_token else "",
            fencing_token=None,
            provider=self.alias,
            token_fingerprint=fingerprint(stored.token) if stored.token else "",
        )

    # -- the primitives --------------------------------------------------------------

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        key = self.key_for(config.name)
        now_ms = self._now_ms()
        current = self._read(key)
        # lockUntil decides, not the key's existence: the 60 s TTL floor keeps keys
        # around after short locks have ended.
        if current is not None and current.lock_until > now_ms:
            return self._record(config.name, current, with_token=False)
        mine = KVRecord(
            lock_until=now_ms + to_milliseconds(config.lock_at_most_for),
            locked_at=now_ms,
            locked_by=self.locked_by,
            token=str(uuid.uuid4()),
        )
        self._write(key, mine, now_ms)
        if self.confirm_write:
            seen = self._read(key)
            if seen is None or seen.token != mine.token:
                # Someone else wrote in between (or our write is not visible here yet).
                # Deleting could remove their record, so we only step back.
                return None if seen is None else self._record(config.name, seen, with_token=False)
        return self.handle(self._record(config.name, mine, with_token=True), config)

    def _unlock(self, held: SimpleLock) -> bool:
        key = self.key_for(held.name)
        now_ms = self._now_ms()
        current = self._read(key)
        if current is None or current.token != held.token or current.lock_until <= now_ms:
            return False
        at_least_ms = epoch_ms(held.lock_at_least_until)
        if at_least_ms <= now_ms:
            self.namespace.delete(key)
        else:
            self._write(
                key, KVRecord(at_least_ms, current.locked_at, current.locked_by, current.token), now_ms
            )
        return True

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        key = self.key_for(held.name)
        now = self.clock.now()
        now_ms = epoch_ms(now)
        current = self._read(key)
        if current is None or current.token != held.token or current.lock_until <= now_ms:
            return None
        extended = KVRecord(
            now_ms + to_milliseconds(config.lock_at_most_for),
            current.locked_at,
            current.locked_by,
            current.token,
        )
        self._write(key, extended, now_ms)
        return self.handle(
            self._record(held.name, extended, with_token=True),
            config,
            lock_at_least_until=from_epoch_ms(now_ms) + config.lock_at_least_for,
        )

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        if isinstance(expected, int):
            raise ValueError(
                f"provider {self.alias!r} (Workers KV) has no fencing tokens, so it cannot release "
                f"{name!r} conditional on fencing token {expected}; pass the holder's token (or the "
                "token fingerprint shown in the admin) as a string, or None to release unconditionally"
            )
        key = self.key_for(name)
        current = self._read(key)
        if current is None:
            return False
        if expected is not None and expected not in (current.token, fingerprint(current.token)):
            return False
        self.namespace.delete(key)
        return current.lock_until > self._now_ms()

    def list_locks(self, prefix: str = "") -> list[LockRecord]:
        """Every record under ``key_prefix + prefix`` (expired ones included, until KV
        drops them), without tokens. One request per 1,000 keys, plus one per key that
        was written without metadata.

        Raises:
            LockProviderError: the store failed or a key holds something that is not a record.
        """
        records: list[LockRecord] = []
        cursor = ""
        while True:
            page = self.namespace.list(prefix=self.key_prefix + prefix, limit=LIST_LIMIT_MAX, cursor=cursor)
            for entry in page.keys:
                record = self._listed(entry)
                if record is not None:
                    records.append(record)
            cursor = page.cursor
            if not cursor:
                return records

    def _listed(self, entry: KVKey) -> LockRecord | None:
        if not entry.name.startswith(self.key_prefix):
            return None
        name = entry.name[len(self.key_prefix) :]
        stored = KVRecord.from_json(entry.metadata) if entry.has_metadata else None
        if stored is None:
            # Written without (our) metadata, e.g. by @tslock/cloudflare-kv: read the value.
            stored = self._read(entry.name)
            if stored is None:  # deleted between the listing and the read
                return None
        return self._record(name, stored, with_token=False)
