"""DurableObjectLockProvider: contention, persistence, options and failure mapping."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.provider import SimpleLock
from tslock_django.core.query import LockQuery
from tslock_django.core.records import LockRecord, UnreadableRecord, fingerprint
from tslock_django.exceptions import InvalidLockProvider, LockProviderError, LockRateLimited
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.worker.runtime import LocalWorker

SECRET = "sup3r-secret-value-XYZ"


def config(name: str, at_most: Any = "5m", at_least: Any = 0) -> LockConfiguration:
    return LockConfiguration(name, at_most, at_least)


# -- contention ------------------------------------------------------------------------


def test_fifty_concurrent_acquires_have_exactly_one_winner_every_round(
    provider: DurableObjectLockProvider,
) -> None:
    contenders = 50
    with ThreadPoolExecutor(max_workers=contenders) as pool:
        for round_ in range(20):
            name = f"race-{round_}"
            start = threading.Barrier(contenders)

            def contend(name: str = name, start: threading.Barrier = start) -> Any:
                start.wait()
                return provider.attempt(config(name))

            outcomes = list(pool.map(lambda _: contend(), range(contenders)))
            winners = [o.held for o in outcomes if o.held is not None]
            assert len(winners) == 1, f"round {round_}: {len(winners)} winners"
            holders = {o.holder.token_fingerprint for o in outcomes if o.holder is not None}
            assert holders == {winners[0].record.token_fingerprint}
            assert winners[0].fencing_token == 1


def test_a_wrong_token_unlock_through_the_provider_changes_nothing(
    provider: DurableObjectLockProvider,
) -> None:
    held = provider.lock(config("job"))
    assert held is not None

    def impostor() -> SimpleLock:
        record = LockRecord(
            name="job",
            lock_until=held.record.lock_until,
            locked_at=held.record.locked_at,
            locked_by="impostor",
            token="f" * 32,
        )
        return provider.handle(record, config("job"))

    assert impostor().unlock() is False
    assert impostor().extend("1h") is None
    [listed] = provider.list_locks()
    assert listed.token_fingerprint == fingerprint(held.token)
    assert listed.lock_until == held.record.lock_until
    assert provider.lock(config("job")) is None
    assert held.unlock() is True


def test_the_holder_record_says_who_holds_it(provider: DurableObjectLockProvider) -> None:
    held = provider.lock(config("report", "10m", "1m"))
    assert held is not None
    assert held.lock_at_least_until == held.record.locked_at + timedelta(minutes=1)
    attempt = provider.attempt(config("report"))
    assert attempt.held is None
    assert attempt.holder is not None
    assert attempt.holder.name == "report"
    assert attempt.holder.locked_by == provider.locked_by
    assert attempt.holder.token == ""
    assert attempt.holder.fencing_token == held.fencing_token
    assert attempt.holder.lock_until == held.record.lock_until
    assert attempt.holder.lock_until.tzinfo is not None


def test_key_prefix_separates_providers_on_one_worker(local_worker: LocalWorker) -> None:
    run = uuid.uuid4().hex[:8]
    one = DurableObjectLockProvider(
        "one", url=local_worker.url, token=local_worker.token, key_prefix=f"{run}-a:"
    )
    two = DurableObjectLockProvider(
        "two", url=local_worker.url, token=local_worker.token, key_prefix=f"{run}-a:b"
    )
    try:
        assert one.lock(config("job")) is not None
        assert two.lock(config("job")) is not None
        # "a:" + "bjob" and "a:b" + "job" are the same key: the prefix is plain concatenation.
        assert one.lock(config("bjob")) is None
        assert [r.name for r in one.list_locks()] == ["bjob", "job"]
        assert [r.name for r in two.list_locks()] == ["job"]
    finally:
        one.close()
        two.close()


def test_provider_survives_close_and_is_usable_again(provider: DurableObjectLockProvider) -> None:
    assert provider.lock(config("a")) is not None
    provider.close()
    provider.close()
    assert provider.lock(config("b")) is not None
    assert [r.name for r in provider.list_locks()] == ["a", "b"]


def test_pages_follow_the_worker_one_request_each(provider: DurableObjectLockProvider) -> None:
    names = [f"n{i:02d}" for i in range(7)]
    for name in names:
        assert provider.lock(config(name)) is not None
    pages = list(provider.pages(LockQuery(prefix="n0", limit=2)))
    assert [[r.name for r in p.records] for p in pages] == [names[0:2], names[2:4], names[4:6], names[6:]]
    assert [r.name for r in provider.list_locks()] == names
    assert [r.name for r in provider.list_locks(prefix="n0")] == names


def test_queries_stay_inside_the_key_prefix(local_worker: LocalWorker) -> None:
    run = uuid.uuid4().hex[:8]

    def make(alias: str, key_prefix: str) -> DurableObjectLockProvider:
        return DurableObjectLockProvider(
            alias, url=local_worker.url, token=local_worker.token, key_prefix=key_prefix
        )

    one, two, three = make("one", f"{run}-a:"), make("two", f"{run}-a;"), make("three", f"{run}-a")
    try:
        for provider in (one, two, three):
            for name in ("job", "zz"):
                assert provider.lock(config(name, "10m")) is not None
        # three's names are "{run}-ajob" and "{run}-azz": between and around the others.
        for order in ("name", "lock_until", "locked_at"):
            for descending in (False, True):
                query = LockQuery(order=order, descending=descending, limit=1)
                assert sorted(r.name for p in one.pages(query) for r in p.records) == ["job", "zz"]
                assert sorted(r.name for p in three.pages(query) for r in p.records) == [
                    ":job",
                    ":zz",
                    ";job",
                    ";zz",
                    "job",
                    "zz",
                ], "a key prefix is plain concatenation: another prefix's keys can be inside it"
        # The key prefix is not part of the name a search looks at.
        assert one.query(LockQuery(search="a:")).records == []
        assert [r.name for r in one.query(LockQuery(search="JOB")).records] == ["job"]
        assert [r.name for r in two.query(LockQuery(prefix="z")).records] == ["zz"]
    finally:
        for provider in (one, two, three):
            provider.close()


def test_a_page_of_a_thousand_through_the_provider(provider: DurableObjectLockProvider) -> None:
    names = [f"k{i:04}" for i in range(1001)]
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(lambda n: provider.lock(config(n, "10m")) is not None, names))
    page = provider.query(LockQuery(limit=1000))
    assert [r.name for r in page.records] == names[:1000]
    assert page.next_cursor is not None
    rest = provider.query(LockQuery(limit=1000, cursor=page.next_cursor))
    assert [r.name for r in rest.records] == names[1000:] and rest.next_cursor is None
    by_until = provider.query(LockQuery(limit=1000, order="lock_until", descending=True))
    assert len(by_until.records) == 1000
    assert len(provider.list_locks()) == 1001


# -- persistence -----------------------------------------------------------------------


def test_state_survives_a_runtime_restart_with_persistence(tmp_path: Path, local_worker: LocalWorker) -> None:
    with LocalWorker(token=SECRET, persist_dir=tmp_path / "state") as worker:
        before = DurableObjectLockProvider("p", url=worker.url, token=SECRET)
        held = before.lock(config("nightly"))
        assert held is not None
        before.close()
        worker.restart()
        after = DurableObjectLockProvider("p", url=worker.url, token=SECRET)
        try:
            holder = after.attempt(config("nightly")).holder
            assert holder is not None
            assert holder.token_fingerprint == held.record.token_fingerprint
            assert [r.name for r in after.list_locks()] == ["nightly"]
            assert after.force_unlock("nightly", expected=held.fencing_token) is True
            again = after.lock(config("nightly"))
            assert again is not None
            assert held.fencing_token is not None
            assert again.fencing_token == held.fencing_token + 1, "the fencing counter was reset"
        finally:
            after.close()
    assert any((tmp_path / "state").iterdir())


# -- failures are LockProviderError, never "held", never with the token ------------------


def assert_provider_error(
    call: Callable[[], object], *, status: int | None = None, says: str = ""
) -> LockProviderError:
    with pytest.raises(LockProviderError) as caught:
        call()
    error = caught.value
    assert SECRET not in str(error)
    assert SECRET not in repr(error.args)
    assert error.alias == "edge"
    if status is not None:
        assert error.status_code == status
    if says:
        assert says in str(error)
    return error


def test_a_worker_without_its_secret_is_an_error_not_held(worker_without_secret: LocalWorker) -> None:
    provider = DurableObjectLockProvider("edge", url=worker_without_secret.url, token=SECRET)
    try:
        assert_provider_error(lambda: provider.lock(config("x")), status=500, says="TSLOCK_TOKEN")
    finally:
        provider.close()


def test_a_wrong_token_is_a_401_error_without_the_token(local_worker: LocalWorker) -> None:
    provider = DurableObjectLockProvider("edge", url=local_worker.url, token=SECRET)
    try:
        error = assert_provider_error(lambda: provider.lock(config("x")), status=401, says="HTTP 401")
        assert "check the token" in str(error)
        assert_provider_error(provider.list_locks, status=401)
        assert_provider_error(lambda: provider.force_unlock("x", expected=None), status=401)
    finally:
        provider.close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def test_a_timeout_is_an_error(silent_server: str) -> None:
    provider = DurableObjectLockProvider("edge", url=silent_server, token=SECRET, timeout=0.2)
    try:
        error = assert_provider_error(lambda: provider.lock(config("x")), says="did not answer in time")
        assert isinstance(error.__cause__, httpx.TimeoutException)
    finally:
        provider.close()


def test_a_refused_connection_is_an_error() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    provider = DurableObjectLockProvider("edge", url=f"http://127.0.0.1:{port}", token=SECRET)
    try:
        error = assert_provider_error(lambda: provider.lock(config("x")), says="could not reach the store")
        assert isinstance(error.__cause__, httpx.ConnectError)
    finally:
        provider.close()


def mock_provider(handler: Callable[[httpx.Request], httpx.Response]) -> DurableObjectLockProvider:
    return DurableObjectLockProvider(
        "edge", url="https://locks.example.test", token=SECRET, transport=httpx.MockTransport(handler)
    )


GOOD_RECORD = {
    "name": "x",
    "locked_at_ms": 1_700_000_000_000,
    "lock_until_ms": 1_700_000_060_000,
    "at_least_until_ms": 1_700_000_000_000,
    "locked_by": "h:1",
    "fencing_token": 3,
    "released": False,
    "token_fingerprint": "abcd1234",
}

GARBAGE = [
    ("html-502", 502, "<html>bad gateway</html>", "HTTP 502"),
    ("html-200", 200, "<html>captive portal</html>", "not JSON"),
    ("json-list", 200, "[1, 2]", "not a JSON object"),
    ("no-flag", 200, json.dumps({"record": GOOD_RECORD}), "'acquired'"),
    ("string-flag", 200, json.dumps({"acquired": "yes", "record": GOOD_RECORD}), "'acquired'"),
    ("acquired-no-record", 200, json.dumps({"acquired": True}), "'record'"),
    ("acquired-no-token", 200, json.dumps({"acquired": True, "record": GOOD_RECORD}), "token"),
    ("held-no-record", 200, json.dumps({"acquired": False}), "'record'"),
    (
        "held-bad-record",
        200,
        json.dumps({"acquired": False, "record": {**GOOD_RECORD, "lock_until_ms": "soon"}}),
        "lock_until_ms",
    ),
    (
        "held-bool-fencing",
        200,
        json.dumps({"acquired": False, "record": {**GOOD_RECORD, "fencing_token": True}}),
        "fencing_token",
    ),
    ("echoes-secret", 500, json.dumps({"error": f"bad Authorization: Bearer {SECRET}"}), "HTTP 500"),
    ("rate-limited", 429, json.dumps({"error": "slow down"}), "HTTP 429"),
]


@pytest.mark.parametrize(("status", "body", "says"), [g[1:] for g in GARBAGE], ids=[g[0] for g in GARBAGE])
def test_garbage_answers_are_errors_without_the_token(status: int, body: str, says: str) -> None:
    provider = mock_provider(lambda request: httpx.Response(status, text=body))
    error = assert_provider_error(lambda: provider.lock(config("x")), says=says)
    assert error.status_code == status
    assert isinstance(error, LockRateLimited) == (status == 429)


def test_the_request_carries_the_bearer_token_and_the_name_only_in_the_body() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"acquired": False, "record": {**GOOD_RECORD, "name": "a/b%c?"}})

    holder = mock_provider(handler).attempt(config("a/b%c?", "90s", "1500ms")).holder
    assert holder is not None and holder.name == "a/b%c?"
    [request] = seen
    assert request.url.path == "/v1/acquire"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    body = json.loads(request.content)
    assert body["name"] == "a/b%c?"
    assert body["lock_at_most_for_ms"] == 90_000
    assert body["lock_at_least_for_ms"] == 1_500


def test_a_record_outside_the_key_prefix_is_an_error() -> None:
    provider = DurableObjectLockProvider(
        "edge",
        url="https://locks.example.test",
        token=SECRET,
        key_prefix="mine:",
        transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json={"acquired": False, "record": GOOD_RECORD})
        ),
    )
    assert_provider_error(lambda: provider.lock(config("x")), says="key_prefix")


NOW_MS = 1_700_000_030_000


def page_answer(*records: dict[str, Any], more: bool = False, **extra: Any) -> dict[str, Any]:
    return {"locks": list(records), "more": more, "now_ms": NOW_MS, **extra}


MALFORMED_PAGES: list[tuple[str, Any, str]] = [
    ("old-worker", {"locks": [], "cursor": None, "now_ms": NOW_MS}, "deploy the Worker of this"),
    ("no-locks", {"more": False, "now_ms": NOW_MS}, "'locks'"),
    ("locks-not-list", {"locks": {}, "more": False, "now_ms": NOW_MS}, "'locks'"),
    ("more-not-bool", {"locks": [], "more": "no", "now_ms": NOW_MS}, "'more'"),
    ("no-now", {"locks": [], "more": False}, "'now_ms'"),
    ("too-many", page_answer(GOOD_RECORD, {**GOOD_RECORD, "name": "y"}), "2 records for a page of at most 1"),
]


@pytest.mark.parametrize(
    ("body", "says"), [m[1:] for m in MALFORMED_PAGES], ids=[m[0] for m in MALFORMED_PAGES]
)
def test_a_malformed_page_is_an_error_naming_the_alias(body: Any, says: str) -> None:
    provider = mock_provider(lambda r: httpx.Response(200, json=body))
    query = LockQuery(states=frozenset({"held"}), limit=1)
    error = assert_provider_error(lambda: provider.query(query), says=says)
    assert "list locks" in str(error)


@pytest.mark.parametrize(
    ("item", "says"),
    [("x", "the record is not a JSON object"), ({**GOOD_RECORD, "fencing_token": "3"}, "fencing_token")],
    ids=["not-a-record", "bad-record"],
)
def test_a_bad_record_in_a_page_is_an_unreadable_row(item: Any, says: str) -> None:
    provider = mock_provider(lambda r: httpx.Response(200, json=page_answer(item)))
    (row,) = provider.query(LockQuery(states=frozenset({"held"}), limit=1)).records
    assert isinstance(row, UnreadableRecord) and says in row.reason and SECRET not in row.reason


def test_a_page_outside_the_query_or_out_of_order_is_an_error() -> None:
    a, b = {**GOOD_RECORD, "name": "a"}, {**GOOD_RECORD, "name": "b"}
    cases = [
        (LockQuery(prefix="b"), page_answer(a), "not one the query asked for"),
        (LockQuery(search="zz"), page_answer(a), "not one the query asked for"),
        (LockQuery(), page_answer(b, a), "out of order"),
        (LockQuery(), page_answer(a, a), "out of order"),
        (LockQuery(descending=True), page_answer(a, b), "out of order"),
    ]
    for query, body, says in cases:
        provider = mock_provider(lambda r, body=body: httpx.Response(200, json=body))
        assert_provider_error(lambda p=provider, q=query: p.query(q), says=says)
    # A record at or before the position the page continues from is a repeat too.
    pages = iter([page_answer(a, b, more=True), page_answer(b)])
    provider = mock_provider(lambda r: httpx.Response(200, json=next(pages)))
    first = provider.query(LockQuery(limit=2))
    assert first.next_cursor
    assert_provider_error(
        lambda: provider.query(LockQuery(limit=2, cursor=first.next_cursor)), says="out of order"
    )


def test_a_record_outside_the_asked_states_is_left_out_and_the_page_stands() -> None:
    # Issue 19: a lock that ended (or was released) around the index's read is not one
    # the query asked for; a page holding it is still a good page without it.
    ended = {**GOOD_RECORD, "name": "b", "lock_until_ms": NOW_MS}
    released = {**GOOD_RECORD, "name": "c", "released": True}
    a, d = {**GOOD_RECORD, "name": "a"}, {**GOOD_RECORD, "name": "d"}
    provider = mock_provider(lambda r: httpx.Response(200, json=page_answer(a, ended, released, d)))
    page = provider.query(LockQuery(states=frozenset({"held"}), limit=4))
    assert [r.name for r in page.records] == ["a", "d"]
    assert not any(isinstance(r, UnreadableRecord) for r in page.records)
    at_least = provider.query(LockQuery(states=frozenset({"at_least"}), limit=4))
    assert [r.name for r in at_least.records] == ["c"]


def test_records_left_out_at_the_end_of_a_page_are_not_read_again() -> None:
    seen: list[httpx.QueryParams] = []
    held = {n: {**GOOD_RECORD, "name": n} for n in "ad"}
    released = {n: {**GOOD_RECORD, "name": n, "released": True} for n in "bc"}
    pages = iter(
        [
            page_answer(held["a"], released["b"], more=True),
            page_answer(released["c"], more=True),
            page_answer(held["d"]),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        return httpx.Response(200, json=next(pages))

    provider = mock_provider(handler)
    first = provider.query(LockQuery(states=frozenset({"held"}), limit=2))
    assert [r.name for r in first.records] == ["a"]
    # A page of nothing but records left out still moves on.
    second = provider.query(LockQuery(states=frozenset({"held"}), limit=2, cursor=first.next_cursor))
    assert second.records == [] and second.next_cursor
    third = provider.query(LockQuery(states=frozenset({"held"}), limit=2, cursor=second.next_cursor))
    assert [r.name for r in third.records] == ["d"] and third.next_cursor is None
    assert [p.get("after_name") for p in seen] == [None, "b", "c"]


def test_a_record_outside_the_key_prefix_in_a_page_is_a_nameless_unreadable_row() -> None:
    provider = DurableObjectLockProvider(
        "edge",
        url="https://locks.example.test",
        token=SECRET,
        key_prefix="mine:",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=page_answer(GOOD_RECORD))),
    )
    (row,) = provider.list_locks()
    assert isinstance(row, UnreadableRecord) and row.name == "" and "key_prefix" in row.reason


def test_the_query_travels_with_the_key_prefix_and_keysets_in_milliseconds() -> None:
    seen: list[httpx.QueryParams] = []
    record = {**GOOD_RECORD, "name": "p:job"}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        return httpx.Response(200, json=page_answer(record, more=True) if len(seen) == 1 else page_answer())

    provider = DurableObjectLockProvider(
        "edge", url="https://h.example", token=SECRET, key_prefix="p:", transport=httpx.MockTransport(handler)
    )
    query = LockQuery(prefix="jo", search="Ob", order="lock_until", descending=True, limit=1)
    first = provider.query(query)
    provider.query(replace(query, cursor=first.next_cursor))
    assert dict(seen[0]) == {
        "prefix": "p:jo",
        "search": "Ob",
        "search_skip": "2",
        "states": "held,at_least",
        "order": "lock_until",
        "desc": "1",
        "limit": "1",
    }
    assert seen[1]["after_key"] == str(GOOD_RECORD["lock_until_ms"])
    assert seen[1]["after_name"] == "p:job"
    by_name = LockQuery(states=frozenset({"at_least"}))
    assert provider._worker_position(by_name, ("job", "job")) == {"after_key": "p:job", "after_name": "p:job"}


@pytest.mark.parametrize("descending", [False, True])
def test_a_microsecond_key_between_milliseconds_maps_exactly(descending: bool) -> None:
    provider = mock_provider(lambda r: httpx.Response(500))
    query = LockQuery(order="locked_at", descending=descending)
    # Records hold whole milliseconds: after 5,000.5 ms ascending means from 5,001 ms on;
    # before it descending means up to 5,000 ms. (5001, "") says both to the Worker.
    assert provider._worker_position(query, (5_000_500, "x")) == {"after_key": 5001, "after_name": ""}
    assert provider._worker_position(query, (5_000_000, "x")) == {"after_key": 5000, "after_name": "x"}


def test_a_prefix_or_search_longer_than_any_name_matches_nothing_without_a_request() -> None:
    provider = mock_provider(lambda r: httpx.Response(500))
    assert provider.query(LockQuery(prefix="é" * 257)).records == []
    assert provider.query(LockQuery(search="x" * 513)).next_cursor is None


def test_expired_is_dropped_with_a_note_not_sent_to_the_worker() -> None:
    seen: list[httpx.QueryParams] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        return httpx.Response(200, json=page_answer())

    provider = mock_provider(handler)
    page = provider.query(LockQuery(states=frozenset({"expired", "held"})))
    assert page.notes and "expired" not in seen[0]["states"]
    assert provider.query(LockQuery(states=frozenset({"expired"}))).records == []
    assert len(seen) == 1, "a query for expired records alone needs no request"


def test_unlock_and_force_unlock_need_their_flag() -> None:
    provider = mock_provider(lambda r: httpx.Response(200, json={"ok": True}))
    assert_provider_error(lambda: provider.force_unlock("x", expected=3), says="'released'")


# -- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"token": SECRET}, "'url'"),
        ({"url": "https://h.example"}, "'token'"),
        ({"url": "ftp://h.example", "token": SECRET}, "http(s)"),
        ({"url": "h.example", "token": SECRET}, "http(s)"),
        ({"url": "https://", "token": SECRET}, "http(s)"),
        ({"url": f"https://user:{SECRET}@h.example", "token": SECRET}, "credentials"),
        ({"url": "https://h.example?x=1", "token": SECRET}, "query"),
        ({"url": "https://h.example:99999", "token": SECRET}, "port"),
        ({"url": 5, "token": SECRET}, "string"),
        ({"url": "https://h.example", "token": ""}, "non-empty"),
        ({"url": "https://h.example", "token": 123}, "non-empty"),
        ({"url": "https://h.example", "token": "has space"}, "printable ASCII"),
        ({"url": "https://h.example", "token": "line\nbreak"}, "printable ASCII"),
        ({"url": "https://h.example", "token": SECRET, "timeout": 0}, "'timeout'"),
        ({"url": "https://h.example", "token": SECRET, "timeout": "ten"}, "'timeout'"),
        ({"url": "https://h.example", "token": SECRET, "timeout": "-1"}, "'timeout'"),
        ({"url": "https://h.example", "token": SECRET, "timeout": True}, "'timeout'"),
        ({"url": "https://h.example", "token": SECRET, "key_prefix": 3}, "'key_prefix'"),
        ({"url": "https://h.example", "token": SECRET, "key_prefix": "p" * 512}, "'key_prefix'"),
        ({"url": "https://h.example", "token": SECRET, "api_token": "x"}, "'api_token'"),
    ],
)
def test_bad_options_are_refused_without_echoing_the_secret(options: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidLockProvider) as caught:
        DurableObjectLockProvider("edge", **options)
    assert says in str(caught.value)
    assert SECRET not in str(caught.value)


def test_repr_and_guarantee() -> None:
    provider = DurableObjectLockProvider("edge", url="http://127.0.0.1:8787/", token=SECRET)
    assert SECRET not in repr(provider)
    assert "***" in repr(provider)
    assert provider.guarantee == "strong"
    assert provider.max_key_bytes == 512
    with pytest.raises(ValueError, match="too long"):
        provider.lock(config("é" * 257))


def test_a_url_with_a_path_is_kept_as_the_base() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, json={"released": False})

    provider = DurableObjectLockProvider(
        "edge", url="https://h.example/locks/", token=SECRET, transport=httpx.MockTransport(handler)
    )
    assert provider.force_unlock("x", expected=None) is False
    assert seen == ["/locks/v1/force-release"]


@pytest.fixture
def canned_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """A plain-HTTP proxy stand-in that answers every request itself, recording the
    absolute URLs it was asked for; the environment names it as the only proxy."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(self.path)
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b'{"released": false, "now_ms": 1}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    proxy = f"http://127.0.0.1:{server.server_address[1]}"
    for key in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("http_proxy", proxy)
    yield proxy, asked
    server.shutdown()
    server.server_close()
    thread.join()


def test_the_proxy_from_the_environment_is_used(
    canned_proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, asked = canned_proxy
    provider = DurableObjectLockProvider("edge", url="http://locks.invalid", token=SECRET)
    try:
        assert provider.force_unlock("x", expected=None) is False
    finally:
        provider.close()
    assert asked == ["http://locks.invalid/v1/force-release"]

    monkeypatch.setenv("no_proxy", "locks.invalid")
    bypassing = DurableObjectLockProvider("edge", url="http://locks.invalid", token=SECRET, timeout=2)
    try:
        assert_provider_error(lambda: bypassing.force_unlock("x", expected=None), says="could not reach")
    finally:
        bypassing.close()
    assert len(asked) == 1


def test_the_async_edge_uses_the_proxy_from_the_environment_and_goes_direct_past_it(
    canned_proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, asked = canned_proxy

    from tests.test_bounded_answers import keep_alive_answer, serve

    async def force_unlock(provider: DurableObjectLockProvider) -> bool:
        try:
            return await provider.aforce_unlock("x", expected=None)
        finally:
            await provider.aclose()

    provider = DurableObjectLockProvider("edge", url="http://locks.invalid", token=SECRET)
    try:
        assert asyncio.run(force_unlock(provider)) is False  # the proxy's answer
    finally:
        provider.close()
    assert asked == ["http://locks.invalid/v1/force-release"]

    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with serve(keep_alive_answer(200, {"released": True})) as direct:
        bypassing = DurableObjectLockProvider("edge", url=direct.url, token=SECRET)
        try:
            assert asyncio.run(force_unlock(bypassing)) is True
        finally:
            bypassing.close()
    assert (direct.requests, len(asked)) == (1, 1)


# -- review fixes: out-of-range times, a client closed under a request, no URL echo ---------


@pytest.mark.parametrize("field", ["lock_until_ms", "locked_at_ms", "at_least_until_ms"])
@pytest.mark.parametrize("value", [10**17, -1, 253_402_300_800_000])
def test_a_time_a_datetime_cannot_hold_is_a_malformed_record_error(field: str, value: int) -> None:
    record = {**GOOD_RECORD, "name": "nightly", field: value}
    held = mock_provider(lambda r: httpx.Response(200, json={"acquired": False, "record": record}))
    error = assert_provider_error(lambda: held.lock(config("nightly")), says=field)
    assert "'nightly'" in str(error) and "out of range" in str(error)
    listing = mock_provider(lambda r: httpx.Response(200, json=page_answer(record)))
    (row,) = listing.list_locks()  # the listing shows it as one unreadable row
    assert isinstance(row, UnreadableRecord) and row.name == "nightly"
    assert field in row.reason and "out of range" in row.reason


def test_the_last_representable_millisecond_is_accepted() -> None:
    record = {**GOOD_RECORD, "lock_until_ms": 253_402_300_799_999}
    holder = mock_provider(lambda r: httpx.Response(200, json={"acquired": False, "record": record}))
    found = holder.attempt(config("x")).holder
    assert found is not None and found.lock_until.year == 9999


def test_a_client_closed_under_a_request_is_a_provider_error_and_close_then_use_works() -> None:
    provider = mock_provider(lambda r: httpx.Response(200, json={"released": True}))
    provider._http().close()  # another thread's close() after this request took the client
    assert_provider_error(lambda: provider.force_unlock("x", expected=None), says="closed meanwhile")
    provider.close()
    assert provider.force_unlock("x", expected=None) is True


@pytest.mark.parametrize(
    "url",
    [
        f"https://h.example/?token={SECRET}",
        f"https://h.example/#{SECRET}",
        f"ftp://h.example/?token={SECRET}",
        f"{SECRET}",
        f"https://h.example:{SECRET}/",
    ],
)
def test_a_bad_url_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(InvalidLockProvider) as caught:
        DurableObjectLockProvider("edge", url=url, token="another-token")
    assert "'url'" in str(caught.value)
    assert SECRET not in str(caught.value)
