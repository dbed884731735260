"""``RedisLockProvider``: the lock operations as scripts (``scripts``) run through
redis-py's clients (``clients``), their answers read (``replies``), failures explained
(``errors``)."""

from __future__ import annotations

import asyncio
import math
import secrets
import threading
from collections.abc import Callable, Generator, Sequence
from datetime import timedelta
from typing import Any, ClassVar, NamedTuple

import redis
from django.views.decorators.debug import sensitive_variables

from ...core import decode
from ...core.configuration import LockConfiguration
from ...core.provider import Guarantee, LockProvider, SimpleLock
from ...core.query import ListingSupport, LockQuery, StorePage, fold
from ...core.records import ListedRecord, LockRecord, UnreadableRecord, fingerprint
from ...core.scrubbing import cache_passwords, cut, scrub, url_passwords
from ...core.steps import SteppedPrimitives, drive
from ...exceptions import LockProviderError
from ..epoch import EPOCH, MAX_EPOCH_US
from ..store_options import REDIS
from . import replies
from .clients import AsyncClient, deadline, pool_from_url, pool_like
from .errors import explain, scrub_chain
from .scripts import SCRIPTS

_MICROSECOND = timedelta(microseconds=1)
#: Index entries a listing script reads at most per call: Redis runs one script at a
#: time, so this bounds how long a listing can delay lock operations (a few ms).
QUERY_BUDGET = 4000
#: The largest purge batch (a script deletes one batch, then Redis serves others).
MAX_PURGE_BATCH = 1000


def _us(duration: timedelta) -> int:
    return duration // _MICROSECOND


class Command(NamedTuple):
    """One script to run: what the steps of an operation yield (see ``core.steps``),
    for the sync or the asyncio client to send."""

    script: str
    keys: Sequence[str]
    args: Sequence[object]


class RedisLockProvider(SteppedPrimitives, LockProvider):
    """A lock store on one Redis primary (Redis 7 or later).

    OPTIONS (exactly one of ``url`` and ``cache``):
        url: ``redis://[[user]:password@]host[:port][/db]`` or ``rediss://`` for TLS; a
            query string is passed to redis-py (e.g. ``?ssl_cert_reqs=none``). The
            password is never shown in a repr, a log line or an error message.
        cache: the alias of a ``CACHES`` entry using Django's ``RedisCache`` or
            django-redis: the provider connects as that cache's redis-py client does
            (server, credentials, TLS, timeouts; the cache's ``KEY_PREFIX`` does not
            apply, ``key_prefix`` does), on connections of its own without the cache's
            retries: this provider never sends a command twice. The password in the
            cache's ``LOCATION`` or ``OPTIONS`` is kept out of messages as the URL's is.
        key_prefix: prepended to the few keys this provider writes (see ``scripts``),
            so several projects can share one database. Default ``"tslock:"``.
        timeout: seconds to wait for Redis to connect or answer (``url`` only).
            Default 5.

    A failover to a replica can lose a lock (asynchronous replication); see the
    package docstring. Connections come from redis-py's pools (one per event loop for
    asyncio code); :meth:`close` and :meth:`aclose` close them.
    """

    guarantee: ClassVar[Guarantee] = "strong"
    default_options: ClassVar = REDIS.defaults
    max_key_bytes: ClassVar[int] = 1024
    listing: ClassVar = ListingSupport()
    #: The ``timeout`` used with ``url`` when none is given.
    default_timeout: ClassVar[float] = 5.0

    @sensitive_variables("kwargs", "url")
    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, **kwargs)
        #: The passwords this provider connects with, as configured and as sent: kept
        #: out of every message (see ``_scrub``).
        self._passwords: list[str] = []
        self._validate_options()
        prefix = str(self.options["key_prefix"])
        self._records, self._fencing = prefix + "records", prefix + "fencing"
        self._by_name, self._by_until = prefix + "by-name", prefix + "by-lock-until"
        self._by_at = prefix + "by-locked-at"
        #: The keys of the scripts that write one record, and of those that write all.
        self._one = [self._records, self._by_until]
        self._all = [self._records, self._fencing, self._by_name, self._by_until, self._by_at]
        self._mutex = threading.Lock()
        self._pool: redis.ConnectionPool | None = None
        self._client: tuple[redis.Redis, dict[str, Any]] | None = None
        self._async: AsyncClient | None = None
        self._locked_by_cache = ("", '""')
        #: How long an asyncio command waits for its answer (see ``clients``): the
        #: socket timeout of the sync pool, which bounds the sync commands.
        self._answer_within: float | None = None
        if self.options["url"] is not None:
            self._use(self._url_pool(str(self.options["url"])))

    # -- options -------------------------------------------------------------------

    @sensitive_variables("url")
    def _validate_options(self) -> None:
        # The checks live in providers.store_options, where the system checks run them too.
        self.options = REDIS.check(self.alias, self.options)
        url, cache = self.options["url"], self.options["cache"]
        if url is not None:
            self._passwords = url_passwords(str(url))
        else:
            from django.conf import settings

            self._passwords = cache_passwords(settings.CACHES[str(cache)])

    @sensitive_variables("url")
    def _url_pool(self, url: str) -> redis.ConnectionPool:
        try:
            return pool_from_url(url, self.options["timeout"] or self.default_timeout)
        except (ValueError, TypeError) as err:
            raise self.option_error(
                "url", f"could not be read by redis-py: {self._scrub(str(err))}"
            ) from None

    def _scrub(self, text: str, tokens: Sequence[str] = ()) -> str:
        """``text`` without the password nor ``tokens`` (the lock tokens a command
        sent), in any form an echo can give them (see
        :func:`tslock_django.core.scrubbing.scrub`)."""
        return scrub(text, [*self._passwords, *tokens])

    def __repr__(self) -> str:
        shown = dict(self.options)
        if self._passwords and shown["url"] is not None:
            shown["url"] = self._scrub(str(shown["url"]))
        return f"<{type(self).__name__} {self.alias!r} {dict(sorted(shown.items()))}>"

    # -- the clients ---------------------------------------------------------------

    def client(self) -> redis.Redis:
        """The redis-py client this provider runs its scripts on. Connecting happens
        on first use, not here."""
        return self._sync_client()[0]

    def _sync_client(self) -> tuple[redis.Redis, dict[str, Any]]:
        made = self._client
        if made is None:
            with self._mutex:
                made = self._client
                if made is None:
                    if self._pool is None:
                        self._use(pool_like(self._cache_client().connection_pool))
                    client = redis.Redis(connection_pool=self._pool)
                    scripts = {op: client.register_script(src) for op, src in SCRIPTS.items()}
                    made = self._client = (client, scripts)
        return made

    def _use(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        timeout = pool.connection_kwargs.get("socket_timeout")
        self._answer_within = float(timeout) if timeout else None

    def _cache_client(self) -> redis.Redis:
        """The write client of the ``cache`` option's Django cache."""
        from django.core.cache import caches

        cache: Any = caches[str(self.options["cache"])]
        if hasattr(cache, "client") and hasattr(cache.client, "get_client"):  # django-redis
            client = cache.client.get_client(write=True)
        else:
            # Django's RedisCache hands its client out through nothing public: its
            # RedisCacheClient (the _cache attribute) is the one way to the pool.
            client = cache._cache.get_client(write=True)
        if not isinstance(client, redis.Redis):
            raise LockProviderError(
                f"CACHES[{self.options['cache']!r}] did not hand out a redis-py client (it gave a "
                f"{type(client).__name__}); use OPTIONS['url'] instead",
                alias=self.alias,
            )
        # The password the cache's pool sends, however its settings spelled it.
        sent = client.connection_pool.connection_kwargs.get("password")
        if isinstance(sent, str) and sent and sent not in self._passwords:
            self._passwords = [*self._passwords, sent]
        return client

    async def _async_client(self) -> AsyncClient:
        """The asyncio client of the running loop (connections belong to the loop that
        opened them: each ``asyncio.run`` gets its own)."""
        made = self._async
        if made is None or made.loop is not asyncio.get_running_loop():
            self._sync_client()
            assert self._pool is not None
            made = self._async = AsyncClient(self._pool)
            await made.watch()
        return made

    def close(self) -> None:
        """Close this provider's connections (asyncio ones are closed by :meth:`aclose`
        or when their loop shuts down)."""
        with self._mutex:
            self._client, self._async = None, None
            pool = self._pool
        if pool is not None:
            pool.disconnect()

    async def aclose(self) -> None:
        """Close the asyncio connections (call it on the loop that used them), then
        what :meth:`close` closes."""
        made, self._async = self._async, None
        if made is not None and made.loop is asyncio.get_running_loop():
            await made.aclose()
        self.close()

    # -- sending -------------------------------------------------------------------

    def _send(self, command: Command) -> Any:
        return self._sync_client()[1][command.script](keys=command.keys, args=command.args)

    async def _asend(self, command: Command) -> Any:
        made = self._async
        if made is None or made.loop is not asyncio.get_running_loop():
            made = await self._async_client()
        try:
            async with deadline(self._answer_within):
                return await made.scripts[command.script](keys=command.keys, args=command.args)
        except asyncio.TimeoutError:
            raise redis.TimeoutError(
                f"Timeout reading from Redis (no answer in {self._answer_within} s)"
            ) from None

    def _failure(self, what: str, err: Exception, tokens: Sequence[str]) -> LockProviderError:
        """The ``LockProviderError`` for a failure of redis-py or of what it read: what
        happened and what to check, without the password or the lock ``tokens`` sent
        (a server, or a proxy in front of it, may echo them).

        ``err`` becomes the error's cause, and a cause's text is shown too (by Django's
        error page, by ``logging`` with the traceback): it is scrubbed in place."""
        scrub_chain(err, lambda text: self._scrub(text, tokens))
        detail = decode.visible(self._scrub(str(err), tokens)) or type(err).__name__
        if not isinstance(err, redis.RedisError):
            # Not an error redis-py reports but one it (or this provider) ran into, mostly
            # while reading an answer: an AttributeError for a HELLO answered "+OK".
            return LockProviderError(
                f"{what}: talking to Redis failed unexpectedly ({type(err).__name__}: {cut(detail, 200)}); "
                "when an answer could not be read: is the URL that of a Redis server (7 or later), with "
                "nothing in between that changes its answers?",
                alias=self.alias,
            )
        explained = explain(
            err,
            detail,
            password_missing=self.options["url"] is not None and not self._passwords,
            records=self._records,
            key_prefix=self.options["key_prefix"],
        )
        return LockProviderError(f"{what}: {explained}", alias=self.alias)

    def _run(
        self,
        command: Command,
        what: str,
        name: str,
        tokens: Sequence[str] = (),
        read: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Run one script and return its answer, read by ``read`` if given (see
        :meth:`_script`)."""
        return drive(self._script(command, what, name, tokens, read), self._send)

    def _script(
        self,
        command: Command,
        what: str,
        name: str,
        tokens: Sequence[str] = (),
        read: Callable[[Any], Any] | None = None,
    ) -> Generator[Command, Any, Any]:
        """One script as steps (see ``core.steps``), for the sync or the asyncio client.

        This is the provider's one edge with the network: whatever fails, in redis-py
        or in ``read`` (a server that answers something else than Redis would), is a
        ``LockProviderError`` naming the alias, its cause chained. ``what`` and
        ``name`` describe the operation for a message (formatted only when there is a
        failure to report); ``tokens`` are the lock tokens among the arguments, kept
        out of the message as the password is."""
        try:
            reply = yield command
            return reply if read is None else read(reply)
        except LockProviderError:
            raise
        except Exception as err:  # see the docstring: nothing raw gets past
            raise self._failure(f"{what} {name!r}" if name else what, err, tokens) from err

    # -- records -------------------------------------------------------------------

    def _malformed(self, what: str, problem: str) -> LockProviderError:
        return LockProviderError(
            f"{what}: Redis holds a record this provider cannot read ({problem}); was the key "
            f"{self._records!r} written by something else? Use another key_prefix or delete it",
            alias=self.alias,
        )

    def _stored(self, name: str, raw: object, *, with_token: bool = False) -> tuple[LockRecord, int]:
        """The record stored for ``name`` (JSON in the fixed layout, see
        ``scripts``; an int is the size of a value too large to send), with its
        token only when ``with_token`` (the caller's own holding), and its at-least
        deadline in epoch microseconds.

        Raises:
            decode.Unreadable: what is wrong with it (never quoting the value).
        """
        if isinstance(raw, int):
            raise decode.Unreadable(
                f"the value is {raw:,} bytes, more than the {decode.MAX_RECORD_BYTES:,} a lock record can be"
            )
        if not isinstance(raw, (bytes, str)):
            raise decode.Unreadable("the value is not JSON")
        # Bounded in size, depth and number length: a record written by something else
        # is unreadable, never a RecursionError.
        data = decode.load_json(raw)
        if not isinstance(data, dict):
            raise decode.Unreadable("the value is not a JSON object")
        try:
            numbers = [data["u"], data["a"], data["f"], data["l"]]
            stored_name, locked_by, token, state = data["n"], data["b"], data["t"], data["r"]
        except KeyError as err:
            raise decode.Unreadable(f"the field {err.args[0]!r} is missing") from None
        if not all(isinstance(n, str) and n.isascii() and n.isdigit() for n in numbers):
            raise decode.Unreadable("a time or the fencing token is not a string of digits")
        if max(len(n) for n in numbers) > decode.MAX_NUMBER_CHARS:
            raise decode.Unreadable(
                f"a time or the fencing token has more than {decode.MAX_NUMBER_CHARS} digits"
            )
        lock_until, locked_at, fencing, at_least = (int(n) for n in numbers)
        texts_ok = isinstance(stored_name, str) and isinstance(locked_by, str) and isinstance(token, str)
        if not texts_ok or isinstance(state, bool) or state not in (0, 1, 2):
            raise decode.Unreadable("a field has the wrong type")
        if not (
            0 <= lock_until <= MAX_EPOCH_US
            and 0 <= locked_at <= MAX_EPOCH_US
            and 0 <= at_least <= MAX_EPOCH_US
        ):
            raise decode.Unreadable("a time is out of range")
        if stored_name != name:
            raise decode.Unreadable("the record names another lock than the one it is stored under")
        if not replies.HEAD.match(replies.text(raw)):
            # The scripts read records at fixed places (see scripts): one in
            # another layout is refused there, so it is unreadable here too.
            raise decode.Unreadable("the value is not in the fixed layout tslock writes")
        record = LockRecord(
            name=name,
            lock_until=EPOCH + timedelta(microseconds=lock_until),
            locked_at=EPOCH + timedelta(microseconds=locked_at),
            locked_by=locked_by if with_token else decode.shown(locked_by),
            token=token if with_token else "",
            fencing_token=fencing,
            provider=self.alias,
            released=state != 0,
            token_fingerprint=fingerprint(token) if token else "",
        )
        return record, at_least

    def _held_record(self, what: str, name: str, raw: object, *, with_token: bool) -> tuple[LockRecord, int]:
        """:meth:`_stored` for a record an acquire or extend script sent back. The
        scripts check a record's layout (see ``scripts``); one that passes there
        and still cannot be read here is refused just the same, never read as held."""
        try:
            return self._stored(name, raw, with_token=with_token)
        except decode.Unreadable as err:
            raise LockProviderError(
                f"{what}: Redis holds a value for this lock in {self._records!r} that was written by "
                f"something else ({err}), so whether it is held cannot be told; delete that field of "
                "the hash (HDEL) or use another key_prefix",
                alias=self.alias,
            ) from None

    def _row(self, raw_name: object, raw: object) -> ListedRecord:
        """One listed record, or the unreadable row of a value that is not one (named
        when its name is UTF-8 within ``max_key_bytes``)."""
        name = ""
        try:
            if isinstance(raw_name, bytes) and len(raw_name) <= self.max_key_bytes:
                name = raw_name.decode("utf-8")
            elif isinstance(raw_name, str) and len(raw_name.encode()) <= self.max_key_bytes:
                name = raw_name
            else:
                raise decode.Unreadable("its name in the index is too long or not a string")
            return self._stored(name, raw)[0]
        except (decode.Unreadable, UnicodeError) as err:
            problem = "its name in the index is not UTF-8" if isinstance(err, UnicodeError) else str(err)
            return UnreadableRecord(
                name,
                self.alias,
                f"a field of {self._records!r} does not hold a lock record tslock wrote ({problem}); "
                "delete it (HDEL) or use another key_prefix",
            )

    def _locked_by_json(self) -> str:
        # Cached: the scripts take it as JSON and it rarely changes.
        cached = self._locked_by_cache
        if cached[0] != self.locked_by:
            cached = self._locked_by_cache = (self.locked_by, replies.json_text(self.locked_by))
        return cached[1]

    # -- the primitives --------------------------------------------------------------

    # Each primitive is written once, as steps (see core.steps); SteppedPrimitives
    # sends their commands with _send (redis.Redis) or _asend (redis.asyncio.Redis).

    def _acquire_steps(self, config: LockConfiguration) -> Generator[Command, Any, SimpleLock | LockRecord]:
        name, token = config.name, secrets.token_hex(16)
        at_most, at_least = max(1, _us(config.lock_at_most_for)), _us(config.lock_at_least_for)
        args = [name, at_most, at_least, token, replies.json_text(name), self._locked_by_json()]
        reply = yield from self._script(
            Command("acquire", self._all, args),
            "acquire",
            name,
            tokens=[token],
            read=replies.acquire_answer,
        )
        if isinstance(reply, list):  # {1, record}: ours already; {0, record}: the holder's
            acquired, raw = reply
            record, at_least_us = self._held_record(f"acquire {name!r}", name, raw, with_token=bool(acquired))
            if not acquired:
                return record
            return self.handle(
                record, config, lock_at_least_until=EPOCH + timedelta(microseconds=at_least_us)
            )
        # Acquired: "locked_at|fencing"; the rest is what this call sent.
        try:
            at, fencing = replies.text(reply).split("|")
            locked_at = int(at)
            record = LockRecord(
                name=name,
                lock_until=EPOCH + timedelta(microseconds=locked_at + at_most),
                locked_at=EPOCH + timedelta(microseconds=locked_at),
                locked_by=self.locked_by,
                token=token,
                fencing_token=int(fencing),
                provider=self.alias,
                token_fingerprint=fingerprint(token),
            )
        except (ValueError, OverflowError):
            raise self._malformed(
                f"acquire {name!r}",
                f"an answer that is not 'locked_at|fencing': {self._scrub(f'{reply!r:.80}', [token])}",
            ) from None
        return self.handle(
            record, config, lock_at_least_until=EPOCH + timedelta(microseconds=locked_at + at_least)
        )

    def _unlock_steps(self, held: SimpleLock) -> Generator[Command, Any, bool]:
        args = [held.name, held.token, replies.json_text(held.name)]
        return bool(
            (
                yield from self._script(
                    Command("unlock", self._one, args), "unlock", held.name, [held.token], replies.flag
                )
            )
        )

    def _extend_steps(
        self, held: SimpleLock, config: LockConfiguration
    ) -> Generator[Command, Any, SimpleLock | None]:
        at_most, at_least = max(1, _us(config.lock_at_most_for)), _us(config.lock_at_least_for)
        args = [held.name, held.token, at_most, at_least, replies.json_text(held.name)]
        raw = yield from self._script(
            Command("extend", self._one, args),
            "extend",
            held.name,
            tokens=[held.token],
            read=replies.record_or_none,
        )
        if raw is None:
            return None
        record, at_least_us = self._held_record(f"extend {held.name!r}", held.name, raw, with_token=True)
        return self.handle(record, config, lock_at_least_until=EPOCH + timedelta(microseconds=at_least_us))

    def _force_unlock_steps(self, name: str, expected: int | str | None) -> Generator[Command, Any, bool]:
        if expected is None:
            kind, value = "any", ""
        elif isinstance(expected, int):
            kind, value = "fencing", str(expected)
        else:
            kind, value = "token", expected
        released = yield from self._script(
            Command("force_release", self._one, [name, kind, value, replies.json_text(name)]),
            "force-release",
            name,
            tokens=[value] if kind == "token" else [],
            read=replies.flag,
        )
        return bool(released)

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        what = "list locks"
        index = {"name": self._by_name, "lock_until": self._by_until, "locked_at": self._by_at}[query.order]
        lower, upper = self._name_bounds(query.prefix)
        after_key, after_name = "", ""
        if after is not None:
            key, name = query.keyset(after)
            if query.order == "name":
                # Strictly after the cursor's name, in the walk's direction.
                bound = b"(" + replies.wire(str(key))
                if query.descending:
                    upper = bound
                else:
                    lower = bound
            else:
                after_key, after_name = str(key), name
        states = "".join("1" if s in query.states else "0" for s in ("held", "at_least", "expired"))
        args = [
            query.order,
            "1" if query.descending else "0",
            lower,
            upper,
            after_key,
            # A cursor's name may carry bytes that are not UTF-8 (see replies.index_name).
            replies.wire(after_name),
            query.prefix,
            fold(query.search),
            states,
            query.limit,
            max(QUERY_BUDGET, 2 * (query.limit + 1)),
            decode.MAX_RECORD_BYTES,
        ]
        keys = [self._records, index, self._by_name, self._by_until]
        reply = self._run(Command("query", keys, args), what, "", read=replies.listing_answer)
        status, resume_key, resume_name, total = reply[:4]
        entries = reply[4:]
        records: list[ListedRecord] = []
        # Each record's place is its index entry (name, and score in a time order),
        # which the walk goes on from whether or not the record can be read.
        positions: list[list[int | str]] = []
        for i in range(0, min(len(entries), 3 * query.limit), 3):
            raw_name, key, raw = entries[i : i + 3]
            records.append(self._row(raw_name, raw))
            positions.append(self._position(query, raw_name, key, what))
        page = StorePage(
            records=records,
            more=status != 0,
            total=None if total < 0 else total,
            positions=positions,
        )
        if status == 2:
            page.resume = self._position(query, resume_name, resume_key, what)
            page.notes.append(
                f"lock provider {self.alias!r} read {max(QUERY_BUDGET, 2 * (query.limit + 1)):,} index "
                "entries without filling this page (most records do not match); the next page goes on "
                "from there"
            )
        return page

    def _position(self, query: LockQuery, raw_name: object, key: object, what: str) -> list[int | str]:
        """The keyset position of an index entry: ``[name, name]`` by name, else
        ``[score in microseconds, name]``. A name that is not UTF-8 (its record is an
        unreadable row) has its place too, so the walk goes on past it: its bytes,
        carried in the cursor as surrogate escapes (see :func:`replies.index_name`)."""
        name = replies.index_name(raw_name)
        if query.order == "name":
            return [name, name]
        try:
            score = float(replies.text(key))
        except (UnicodeError, ValueError):
            score = math.nan
        if not math.isfinite(score) or not 0 <= score <= MAX_EPOCH_US:
            # The index was written by something else: a place the walk cannot go on from.
            raise self._malformed(
                what,
                f"an entry of the {query.order} index has no time in range; delete it or use another "
                "key_prefix",
            )
        return [math.floor(score), name]

    @staticmethod
    def _name_bounds(prefix: str) -> tuple[bytes, bytes]:
        """``ZRANGEBYLEX`` bounds of the names starting with ``prefix``: UTF-8 never
        contains the byte 0xFF, so every such name sorts below ``prefix + 0xFF``."""
        if not prefix:
            return b"-", b"+"
        encoded = replies.wire(prefix)
        return b"[" + encoded, b"(" + encoded + b"\xff"

    def purge(self, expired_for: timedelta, *, dry_run: bool = False, batch_size: int = 500) -> int:
        """Delete the records whose ``lock_until`` is more than ``expired_for`` in the
        past (Redis's clock), one script per batch of at most ``batch_size`` (capped at
        1,000). Held locks and those kept for ``lock_at_least_for`` are never touched,
        and the fencing counters stay, so a purged name locked again continues above
        its last token.

        Returns:
            How many records were deleted (with ``dry_run``: would be).

        Raises:
            ValueError: a negative ``expired_for`` or a ``batch_size`` below 1.
            LockProviderError: Redis failed.
        """
        if expired_for < timedelta(0):
            raise ValueError(f"expired_for must not be negative, got {expired_for}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
        batch = min(batch_size, MAX_PURGE_BATCH)
        args = [_us(expired_for), batch]
        if dry_run:
            counted: int = self._run(
                Command("purge", self._all, [*args, "1"]), "purge (dry run)", "", read=replies.count
            )
            return counted
        deleted = 0
        while True:
            count: int = self._run(Command("purge", self._all, [*args, "0"]), "purge", "", read=replies.count)
            deleted += count
            if count < batch:
                return deleted
