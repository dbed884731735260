"""Locks in Cloudflare Durable Objects, through the companion Worker (``tslock_django/worker``).

Each lock name lives in its own Durable Object, which runs one request at a time: the
check-and-take is atomic on the platform, so the guarantee is strong (one holder). Every
operation is exactly one HTTP request to the Worker; deadlines are computed on the
Durable Object's clock from the durations sent here, so this machine's clock never
decides expiry. The wire protocol (v1) is described at the top of ``worker/index.js``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import httpx
from django.views.decorators.debug import sensitive_variables

from ..core import decode
from ..core.configuration import LockConfiguration
from ..core.decode import Unreadable
from ..core.durations import to_milliseconds
from ..core.provider import Guarantee, LockProvider, SimpleLock
from ..core.query import ListingSupport, LockQuery, StorePage
from ..core.records import ListedRecord, LockRecord, UnreadableRecord
from ..core.scrubbing import scrub, secret_forms
from ..core.steps import SteppedPrimitives, drive
from ..exceptions import LockProviderError
from .epoch import epoch_ms_in_range, from_epoch_ms
from .http import Answer, PooledClient, Request, error_for_status, json_body, parse_json
from .http_async import AsyncPooledClient
from .store_options import CLOUDFLARE_MAX_KEY_BYTES, DURABLE_OBJECT

T = TypeVar("T")
#: One operation against the Worker, as steps: the requests it sends, then its result.
Steps = Generator[Request, Answer, T]

#: The Worker's limit on ``locked_by`` (code points).
MAX_LOCKED_BY = 255


class DurableObjectLockProvider(SteppedPrimitives, LockProvider):
    """A lock store on the companion Worker (one Durable Object per lock name).

    OPTIONS:
        url: the Worker's base URL, ``https://tslock.<subdomain>.workers.dev`` (http is
            accepted for a local runtime). No credentials in it.
        token: the bearer secret, the Worker's ``TSLOCK_TOKEN``. Never shown in a repr,
            a log line or an error message.
        key_prefix: prepended to every lock name, so several projects can share one
            Worker. Default ``""``.
        timeout: seconds one HTTP request may take, answer included (the whole
            exchange on the asyncio edge; sync, each wait for the server and the
            reading of the answer). Default ``10.0``.

    Args:
        transport: an ``httpx.BaseTransport`` to use instead of the network (tests and
            benchmarks); not an OPTIONS key.
    """

    guarantee: ClassVar[Guarantee] = "strong"
    default_options: ClassVar = DURABLE_OBJECT.defaults
    secret_options: ClassVar = frozenset({"token"})
    max_key_bytes: ClassVar[int] = CLOUDFLARE_MAX_KEY_BYTES
    # The index answers every order both ways, search and states; it keeps no expired
    # records (they leave it when they end) and has no cheap count.
    listing: ClassVar = ListingSupport(expired=False, total=False)
    self_cleaning: ClassVar = (
        "each lock's Durable Object clears it when it ends (an alarm) and the index drops it; "
        "the per-name fencing counter stays"
    )

    @sensitive_variables("kwargs")
    def __init__(
        self,
        alias: str = "default",
        *,
        transport: httpx.BaseTransport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(alias, **kwargs)
        self._validate_options()
        self._pool = PooledClient(
            base_url=str(self.options["url"]),
            headers={
                "Authorization": f"Bearer {self.options['token']}",
                "Accept": "application/json",
                "User-Agent": "tslock-django",
            },
            timeout=float(self.options["timeout"]),
            transport=transport,
        )
        self._apool: AsyncPooledClient | None = None
        # Every form the bearer token can take in an echo, longest first: looked for in
        # each listed record (a Worker that echoes the request may put it anywhere).
        self._token_forms = sorted(secret_forms(str(self.options["token"])), key=len, reverse=True)

    # -- options -------------------------------------------------------------------

    def _validate_options(self) -> None:
        # The checks live in providers.store_options, where the system checks run them too.
        self.options = DURABLE_OBJECT.check(self.alias, self.options)

    def key_for(self, name: str) -> str:
        return str(self.options["key_prefix"]) + name

    # -- HTTP ------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        return self._pool.get()

    def close(self) -> None:
        """Close the pooled HTTP client; the next operation opens a new one."""
        self._pool.close()
        if self._apool is not None:
            self._apool.forget()  # an async client closes on its loop (aclose, or its shutdown)

    async def aclose(self) -> None:
        """Close the HTTP clients, the asyncio one of the running loop included."""
        if self._apool is not None:
            await self._apool.aclose()
        self.close()

    def _async_pool(self) -> AsyncPooledClient:
        """The asyncio twin of the pooled client (same settings), made on first use."""
        if self._apool is None:
            self._apool = AsyncPooledClient(self._pool)
        return self._apool

    def _call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        mark_bad_numbers: bool = False,
    ) -> dict[str, Any]:
        """One request; the parsed JSON object of a 2xx answer, else ``LockProviderError``
        (``mark_bad_numbers``: see :func:`~tslock_django.providers.http.parse_json`)."""
        steps = self._call_steps(
            what, method, path, body=body, params=params, mark_bad_numbers=mark_bad_numbers
        )
        return drive(steps, self._pool.send_request)

    def _call_steps(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        mark_bad_numbers: bool = False,
    ) -> Generator[Request, Answer, dict[str, Any]]:
        """:meth:`_call` as steps (see ``core.steps``): the request is built and its
        answer read here, for the sync edge and the asyncio one alike."""
        # What an echo of this request could give away: the Worker's bearer token and the
        # lock token the body carries (unlock, extend, force-release by token).
        secrets = [str(self.options["token"])]
        if body is not None and isinstance(body.get("token"), str):
            secrets.append(body["token"])
        options = {"json": body, "params": params}
        response = yield Request(self.alias, what, method, path, tuple(secrets), options=options)
        if not response.is_success:
            raise error_for_status(self.alias, what, response, self._error_detail(response), secrets)
        data = json_body(self.alias, what, response, mark_bad_numbers=mark_bad_numbers)
        if not isinstance(data, dict):
            raise self._malformed(what, "the answer is not a JSON object", response.status_code)
        return data

    def _error_detail(self, response: Answer) -> str:
        try:
            data = parse_json(response)
            detail = str(data.get("error", "")) if isinstance(data, dict) else ""
        except Unreadable:
            detail = ""
        # A non-string "error" becomes its repr here; error_for_status scrubs the secrets
        # in every escaped form, whatever sits in front of the Worker.
        return detail

    def _malformed(self, what: str, problem: str, status: int | None = 200) -> LockProviderError:
        # problem may quote a name the server sent, which an echoing server fills with
        # the Authorization header, or with control characters for a terminal.
        problem = decode.visible(scrub(problem, [str(self.options["token"])]))
        return LockProviderError(
            f"{what}: HTTP {status} with an answer the provider cannot use ({problem}); "
            "is the URL a tslock Worker of protocol v1?",
            alias=self.alias,
            status_code=status,
        )

    def _echoes_token(self, text: str) -> bool:
        return any(form in text for form in self._token_forms)

    def _flag(self, data: dict[str, Any], key: str, what: str) -> bool:
        value = data.get(key)
        if not isinstance(value, bool):
            raise self._malformed(what, f"{key!r} is missing or not a boolean")
        return value

    def _record(self, data: Any, what: str, *, with_token: bool = False) -> tuple[LockRecord, datetime]:
        """A ``LockRecord`` (name without the key prefix) and its at-least deadline;
        ``LockProviderError`` when the Worker's record cannot be read."""
        if not isinstance(data, dict):
            raise self._malformed(what, "'record' is missing or not an object")
        try:
            return self._read_record(data, with_token=with_token)
        except Unreadable as err:
            raise self._malformed(what, str(err)) from None

    def _read_record(self, data: Any, *, with_token: bool = False) -> tuple[LockRecord, datetime]:
        """The record in one JSON object of the Worker's answer.

        Raises:
            Unreadable: saying which fields are missing, of the wrong type or out of
                range (the record's name, cut and escaped, when it has one).
        """
        if not isinstance(data, dict):
            raise Unreadable("the record is not a JSON object")
        problems = [
            key
            for key in ("locked_at_ms", "lock_until_ms", "at_least_until_ms", "fencing_token")
            if not isinstance(data.get(key), int) or isinstance(data.get(key), bool)
        ]
        # A time a datetime cannot hold would raise OverflowError further down.
        problems += [
            f"{key} (out of range)"
            for key in ("locked_at_ms", "lock_until_ms", "at_least_until_ms")
            if key not in problems and not epoch_ms_in_range(data[key])
        ]
        problems += [
            key for key in ("name", "locked_by", "token_fingerprint") if not isinstance(data.get(key), str)
        ]
        if not isinstance(data.get("released"), bool):
            problems.append("released")
        token = data.get("token", "")
        if with_token and (not isinstance(token, str) or not token):
            problems.append("token")
        name = data.get("name")
        # The Worker keeps names of at most max_key_bytes; a longer one is not from it.
        if isinstance(name, str) and len(name.encode("utf-8", "surrogatepass")) > self.max_key_bytes:
            problems.append(f"name (longer than {self.max_key_bytes} UTF-8 bytes)")
        if problems:
            shown_name = (
                decode.shown(scrub(name, [str(self.options["token"])]), 200) if isinstance(name, str) else ""
            )
            whose = f"record {shown_name!r}" if isinstance(name, str) else "record"
            numbers = [
                f"{key} holds {value}" for key, value in data.items() if isinstance(value, decode.BadNumber)
            ]
            raise Unreadable(
                f"{whose} field(s) {', '.join(problems)} missing, of the wrong type or out of range"
                + "".join(f"; {decode.shown(str(n), 100)}" for n in numbers[:3])
            )
        prefix = str(self.options["key_prefix"])
        key: str = data["name"]
        if not key.startswith(prefix):
            raise Unreadable("the record's name is outside this provider's key_prefix")
        locked_by: str = data["locked_by"]
        if self._echoes_token(locked_by):
            locked_by = scrub(locked_by, [str(self.options["token"])])
        record = LockRecord(
            name=key[len(prefix) :],
            lock_until=from_epoch_ms(data["lock_until_ms"]),
            locked_at=from_epoch_ms(data["locked_at_ms"]),
            # Cut for display, without the token: the Worker keeps 255 characters of
            # what it was sent, but the answer is not ours to trust.
            locked_by=decode.shown(locked_by),
            token=token if with_token else "",
            fencing_token=data["fencing_token"],
            provider=self.alias,
            released=data["released"],
            token_fingerprint=data["token_fingerprint"],
        )
        return record, from_epoch_ms(data["at_least_until_ms"])

    def _unreadable(
        self, item: Any, problem: str, query: LockQuery, now: datetime
    ) -> tuple[UnreadableRecord, tuple[int | str, str] | None]:
        """The listing row of a record of the Worker's answer that cannot be read, and
        its place in ``query``'s order when that can be read (``None`` otherwise).

        Its name is kept when it is a string under this provider's key_prefix, within
        the Worker's size limit and one the query asked for; its place needs that name
        and, in a time order, that time field as epoch milliseconds in range."""
        name = item.get("name") if isinstance(item, dict) else None
        prefix = str(self.options["key_prefix"])
        listed = ""
        if (
            isinstance(name, str)
            and name.startswith(prefix)
            and len(name.encode("utf-8", "surrogatepass")) <= self.max_key_bytes
        ):
            listed = name[len(prefix) :]
        # The problem may quote field names of the answer: an echo may have put the token there.
        problem = scrub(problem, [str(self.options["token"])])
        row = UnreadableRecord(
            listed, self.alias, f"the Worker answered a record that cannot be read ({problem})"
        )
        place: tuple[int | str, str] | None = None
        if listed and query.matches(row, now):
            moment = listed if query.order == "name" else item.get(f"{query.order}_ms")
            if isinstance(moment, str):
                place = (moment, listed)
            elif isinstance(moment, int) and not isinstance(moment, bool) and epoch_ms_in_range(moment):
                place = (moment * 1000, listed)
        if self._echoes_token(listed):
            # Placed by its name, shown without it.
            row = UnreadableRecord("", self.alias, row.reason)
        return row, place

    @staticmethod
    def _durations(config: LockConfiguration) -> dict[str, int]:
        # Whole milliseconds, rounded down; a sub-millisecond at-most would become 0,
        # which the Worker rightly refuses, so it is held for 1 ms instead.
        at_most = max(1, to_milliseconds(config.lock_at_most_for))
        return {
            "lock_at_most_for_ms": at_most,
            "lock_at_least_for_ms": min(at_most, to_milliseconds(config.lock_at_least_for)),
        }

    # -- the primitives --------------------------------------------------------------
    # Each is written once, as steps (see core.steps); SteppedPrimitives sends their
    # requests with the pooled httpx.Client (_send) or an httpx.AsyncClient (_asend).

    def _send(self, request: Request) -> Answer:
        return self._pool.send_request(request)

    def _asend(self, request: Request) -> Coroutine[Any, Any, Answer]:
        # The send's coroutine itself: no frame of its own around it.
        return self._async_pool().send_request(request)

    def _acquire_steps(self, config: LockConfiguration) -> Steps[SimpleLock | LockRecord]:
        what = f"acquire {config.name!r}"
        data = yield from self._call_steps(
            what,
            "POST",
            "/v1/acquire",
            body={
                "name": self.key_for(config.name),
                **self._durations(config),
                "locked_by": self.locked_by[:MAX_LOCKED_BY],
            },
        )
        if self._flag(data, "acquired", what):
            record, at_least_until = self._record(data.get("record"), what, with_token=True)
            return self.handle(record, config, lock_at_least_until=at_least_until)
        holder, _ = self._record(data.get("record"), what)
        return holder

    def _unlock_steps(self, held: SimpleLock) -> Steps[bool]:
        what = f"unlock {held.name!r}"
        data = yield from self._call_steps(
            what, "POST", "/v1/unlock", body={"name": self.key_for(held.name), "token": held.token}
        )
        return self._flag(data, "released", what)

    def _extend_steps(self, held: SimpleLock, config: LockConfiguration) -> Steps[SimpleLock | None]:
        what = f"extend {held.name!r}"
        data = yield from self._call_steps(
            what,
            "POST",
            "/v1/extend",
            body={"name": self.key_for(held.name), "token": held.token, **self._durations(config)},
        )
        if not self._flag(data, "extended", what):
            return None
        record, at_least_until = self._record(data.get("record"), what, with_token=True)
        return self.handle(record, config, lock_at_least_until=at_least_until)

    def _force_unlock_steps(self, name: str, expected: int | str | None) -> Steps[bool]:
        what = f"force-release {name!r}"
        body: dict[str, Any] = {"name": self.key_for(name)}
        if isinstance(expected, int):
            body["fencing_token"] = expected
        elif isinstance(expected, str):
            body["token"] = expected
        data = yield from self._call_steps(what, "POST", "/v1/force-release", body=body)
        return self._flag(data, "released", what)

    # -- rebuilding the index -----------------------------------------------------------

    #: The Worker's limit on names per ``/v1/reindex`` batch.
    MAX_REINDEX_BATCH: ClassVar[int] = 500

    def reindex(
        self, *, batch_size: int = 25, progress: Callable[[int, str | None], None] | None = None
    ) -> int:
        """Have every lock object of the Worker send its record to the index again.

        This is step 2 of changing the Worker's shard count (``TSLOCK_INDEX_SHARDS``, see the
        exported ``DEPLOY.md``), and repairs an index that missed reports. It walks the
        names either index layout lists, ``batch_size`` lock objects per request (each
        request makes one call per shard plus one per name inside the Worker, so keep it
        small on plans with a low subrequest limit), and calls ``progress(resent_so_far,
        last_name_or_None)`` after each batch. Safe to repeat or interrupt: re-sending is
        idempotent. It covers the whole Worker, whatever this provider's ``key_prefix``.

        Returns the number of lock objects that re-sent their record.
        """
        if (
            not isinstance(batch_size, int)
            or isinstance(batch_size, bool)
            or not 1 <= batch_size <= self.MAX_REINDEX_BATCH
        ):
            raise ValueError(
                f"batch_size must be a whole number from 1 to {self.MAX_REINDEX_BATCH}, got {batch_size!r}"
            )
        after: str | None = None
        total = 0
        while True:
            what = "rebuild the index"
            data = self._call(what, "POST", "/v1/reindex", body={"after": after, "limit": batch_size})
            resent, following = data.get("resent"), data.get("next")
            if not isinstance(resent, int) or isinstance(resent, bool) or not 0 <= resent <= batch_size:
                raise self._malformed(what, f'"resent" is not a count from 0 to {batch_size}')
            if following is not None and not isinstance(following, str):
                raise self._malformed(what, f'"next" is a {type(following).__name__}, not a name or null')
            total += resent
            if progress is not None:
                progress(total, following)
            if following is None:
                return total
            # A Worker that answers the same position again would keep this loop going
            # for ever: refuse it instead.
            if after is not None and following <= after:
                raise self._malformed(what, '"next" did not move past the previous batch')
            after = following

    # -- listing -------------------------------------------------------------------

    def _query(self, query: LockQuery, after: object | None) -> StorePage:
        # One request per page: the Worker's index filters, sorts and cuts (see the
        # GET /v1/locks notes in worker/index.js); everything it answers is checked here.
        what = f"list locks with prefix {query.prefix!r}"
        key_prefix = str(self.options["key_prefix"])
        if max(len((key_prefix + query.prefix).encode()), len(query.search.encode())) > self.max_key_bytes:
            return StorePage(records=[], more=False)  # longer than any name: nothing matches
        params: dict[str, Any] = {
            "prefix": key_prefix + query.prefix,
            "states": ",".join(s for s in ("held", "at_least") if s in query.states),
            "order": query.order,
            "desc": "1" if query.descending else "0",
            "limit": query.limit,
        }
        if query.search:
            # The key prefix is not part of the names users search.
            params.update(search=query.search, search_skip=len(key_prefix))
        mark = None if after is None else query.keyset(after)
        if mark is not None:
            params.update(self._worker_position(query, mark))
        # A number no field can hold makes its record unreadable, not the whole page.
        data = self._call(what, "GET", "/v1/locks", params=params, mark_bad_numbers=True)
        page = data.get("locks")
        if not isinstance(page, list):
            raise self._malformed(what, "'locks' is missing or not a list")
        if "more" not in data and "cursor" in data:
            raise self._malformed(
                what,
                "it pages the old way, without listing queries; deploy the Worker of this "
                "tslock-django release (manage.py tslock worker)",
            )
        more = self._flag(data, "more", what)
        now_ms = data.get("now_ms")
        if not isinstance(now_ms, int) or isinstance(now_ms, bool) or not epoch_ms_in_range(now_ms):
            raise self._malformed(what, "'now_ms' is missing or not a time in epoch milliseconds")
        if len(page) > query.limit:
            raise self._malformed(what, f"{len(page)} records for a page of at most {query.limit}")
        now = from_epoch_ms(now_ms)
        records: list[ListedRecord] = []
        # Where the next page starts after each record. A record that cannot be read is
        # a row saying why (the rest of the page stands); when even its place cannot be
        # read, it takes the place of the row before it, so the next page starts before
        # it and it may be shown again there, while the readable records go on.
        positions: list[list[int | str] | None] = []
        previous = mark
        # Set when records left out (below) end the page: the next page starts after them.
        resume: list[int | str] | None = None
        for item in page:
            left_out = False
            try:
                record: ListedRecord = self._read_record(item)[0]
            except Unreadable as err:
                record, place = self._unreadable(item, str(err), query, now)
            else:
                if not query.matches(record, now):
                    # An unreadable row matches on its name alone: whether the name fits.
                    if not query.matches(UnreadableRecord(record.name, self.alias, ""), now):
                        raise self._malformed(
                            what,
                            f"record {decode.shown(record.name, 200)!r} is not one the query asked for "
                            "(prefix or search)",
                        )
                    # Its name fits and its state does not: a lock that ended or was
                    # released around the index's read (a Worker of an earlier release
                    # dates a merged page by the latest of its shards' clocks). It is left
                    # out; the rest of the page stands.
                    left_out = True
                place = query.sort_key(record)
                if self._echoes_token(record.name):
                    # An echo of the request: placed by its name, shown without it.
                    record = UnreadableRecord(
                        "",
                        self.alias,
                        "the Worker answered a record whose name holds the Worker's bearer token (it "
                        "echoes requests back); it is not shown",
                    )
            if place is not None:
                if previous is not None and not query.after(place, previous):
                    raise self._malformed(
                        what, f"record {decode.shown(record.name, 200)!r} is out of order or repeats one"
                    )
                previous = place
            if left_out:
                resume = None if previous is None else list(previous)
                continue
            resume = None
            records.append(record)
            positions.append(None if previous is None else list(previous))
        if more and records and previous == mark:
            # No record of this page has a place: the next page would be this one again.
            raise self._malformed(
                what,
                "a whole page of records whose names or sort keys cannot be read; the listing "
                "cannot go past them",
            )
        return StorePage(records=records, more=more, positions=positions, resume=resume if more else None)

    def _worker_position(self, query: LockQuery, mark: tuple[int | str, str]) -> dict[str, str | int]:
        """The Worker's ``after_key`` / ``after_name`` for keyset ``mark``. Names gain the
        key prefix; time keys go from microseconds (cursors) to the Worker's whole
        milliseconds, exactly: records hold whole milliseconds, and a key between two
        of them becomes the next whole millisecond with the empty name."""
        key_prefix = str(self.options["key_prefix"])
        key, name = mark
        if isinstance(key, str):
            return {"after_key": key_prefix + key, "after_name": key_prefix + name}
        whole, part = divmod(key, 1000)
        if part == 0:
            return {"after_key": whole, "after_name": key_prefix + name}
        # "" sorts before every name, so "after (whole + 1, '')" is every record from
        # whole + 1 ms on (ascending) and "before" it every record up to whole ms
        # (descending): exactly the records on the right side of the key.
        return {"after_key": whole + 1, "after_name": ""}
