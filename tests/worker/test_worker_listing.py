"""GET /v1/locks as a query answered by the Worker's index, spoken over HTTP against the
real runtime: parameters, their errors, orders and keysets, prefix ranges over awkward
code points, search, states, and an index written by the previous release."""

from __future__ import annotations

import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tslock_django import LockConfiguration
from tslock_django.core.query import LockQuery
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.worker.export import copy_worker_modules
from tslock_django.worker.runtime import LocalWorker

OLD_WORKER = Path(__file__).parent / "fixtures" / "index_before_queries.js"


def acquire(api: httpx.Client, name: str, at_most: int = 60_000, at_least: int = 0) -> Any:
    body = {"name": name, "lock_at_most_for_ms": at_most, "lock_at_least_for_ms": at_least}
    response = api.post("/v1/acquire", json=body)
    assert response.status_code == 200 and response.json()["acquired"], response.text
    return response.json()


def wait_until(condition: Any, *, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {timeout} s")
        time.sleep(0.05)


def unique(label: str) -> str:
    return f"q-{label}-{uuid.uuid4().hex[:10]}/"


def query(api: httpx.Client, **params: Any) -> dict[str, Any]:
    response = api.get("/v1/locks", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def names(api: httpx.Client, **params: Any) -> list[str]:
    return [r["name"] for r in query(api, **params)["locks"]]


def walk(api: httpx.Client, order: str, desc: bool, limit: int, **params: Any) -> list[dict[str, Any]]:
    """Every page of a query, continuing with after_key / after_name."""
    key_field = {"name": "name", "lock_until": "lock_until_ms", "locked_at": "locked_at_ms"}[order]
    found: list[dict[str, Any]] = []
    after: dict[str, Any] = {}
    for _ in range(100):
        body = query(api, order=order, desc=int(desc), limit=limit, **params, **after)
        assert len(body["locks"]) <= limit
        found += body["locks"]
        if not body["more"]:
            return found
        last = body["locks"][-1]
        after = {"after_key": last[key_field], "after_name": last["name"]}
    pytest.fail("the listing did not end")


# -- parameters and their errors ---------------------------------------------------------

BAD_PARAMETERS: list[tuple[str, dict[str, str], str]] = [
    ("expired", {"states": "held,expired"}, "held, at_least"),
    ("unknown-state", {"states": "busy"}, "held, at_least"),
    ("no-state", {"states": ""}, "held, at_least"),
    ("order", {"order": "size"}, "name, lock_until, locked_at"),
    ("desc", {"desc": "yes"}, "0 (ascending) or 1"),
    ("limit-0", {"limit": "0"}, "from 1 to 1000"),
    ("limit-1001", {"limit": "1001"}, "from 1 to 1000"),
    ("limit-text", {"limit": "abc"}, "from 1 to 1000"),
    ("limit-fraction", {"limit": "1.5"}, "from 1 to 1000"),
    ("limit-exponent", {"limit": "1e2"}, "from 1 to 1000"),
    ("key-alone", {"after_key": "5"}, "go together"),
    ("name-alone", {"after_name": "x"}, "go together"),
    ("time-key-text", {"order": "lock_until", "after_key": "soon", "after_name": "x"}, "epoch milliseconds"),
    (
        "time-key-fraction",
        {"order": "locked_at", "after_key": "1.5", "after_name": "x"},
        "epoch milliseconds",
    ),
    ("name-key-differs", {"after_key": "a", "after_name": "b"}, "the same as"),
    ("cursor-and-after", {"cursor": "YQ", "after_key": "a", "after_name": "a"}, "either"),
    ("cursor-time-order", {"cursor": "YQ", "order": "lock_until"}, "by name only"),
    ("bad-cursor", {"cursor": "%%%"}, "cursor"),
    ("unknown", {"sort": "name"}, "takes prefix, search"),
    ("prefix-too-long", {"prefix": "é" * 257}, "512"),
    ("search-too-long", {"search": "x" * 513}, "512"),
    ("after-name-too-long", {"after_key": "x" * 513, "after_name": "x" * 513}, "512"),
    ("search-skip", {"search": "a", "search_skip": "-1"}, "0 to 512"),
]


@pytest.mark.parametrize(
    ("params", "says"), [b[1:] for b in BAD_PARAMETERS], ids=[b[0] for b in BAD_PARAMETERS]
)
def test_each_bad_parameter_is_a_400_saying_what_is_allowed(
    api: httpx.Client, local_worker: LocalWorker, params: dict[str, str], says: str
) -> None:
    response = api.get("/v1/locks", params=params)
    assert response.status_code == 400, response.text
    assert says in response.json()["error"]
    # Authentication still comes first: without the token the same request is a 401.
    anonymous = httpx.get(local_worker.url + "/v1/locks", params=params)
    assert anonymous.status_code == 401


def test_a_repeated_parameter_is_refused_rather_than_one_picked(api: httpx.Client) -> None:
    response = api.get("/v1/locks?order=name&order=lock_until")
    assert response.status_code == 400
    assert '"order" is given more than once' in response.json()["error"]


def test_the_answer_has_its_fields_and_no_tokens(api: httpx.Client) -> None:
    prefix = unique("fields")
    held = acquire(api, prefix + "a")["record"]
    body = query(api, prefix=prefix, order="lock_until")
    assert set(body) == {"locks", "more", "now_ms"}, "the old cursor field belongs to order=name only"
    assert body["more"] is False
    [record] = body["locks"]
    assert "token" not in record
    assert record == {k: v for k, v in held.items() if k != "token"}
    assert query(api, prefix=prefix)["cursor"] is None


# -- orders and keysets ------------------------------------------------------------------


@pytest.mark.parametrize("order", ["name", "lock_until", "locked_at"])
@pytest.mark.parametrize("desc", [False, True])
def test_each_order_pages_by_keyset_both_ways(api: httpx.Client, order: str, desc: bool) -> None:
    prefix = unique("order")
    # Two locks share each lock_until (and, within a millisecond, maybe locked_at): the
    # name breaks the tie, in the same direction.
    for i, suffix in enumerate(["c", "a", "e", "b", "d", "f"]):
        acquire(api, prefix + suffix, at_most=60_000 + 1000 * (i // 2))
    key_field = {"name": "name", "lock_until": "lock_until_ms", "locked_at": "locked_at_ms"}[order]
    found = walk(api, order, desc, 2, prefix=prefix)
    keys = [(r[key_field], r["name"]) for r in found]
    assert keys == sorted(keys, reverse=desc)
    assert len(found) == 6
    assert [r["name"] for r in found] == names(api, prefix=prefix, order=order, desc=int(desc))


def test_a_time_keyset_with_an_empty_name_starts_at_that_millisecond(api: httpx.Client) -> None:
    prefix = unique("edge")
    first = acquire(api, prefix + "a", at_most=60_000)["record"]
    acquire(api, prefix + "b", at_most=120_000)
    until = first["lock_until_ms"]
    after = names(api, prefix=prefix, order="lock_until", after_key=until, after_name="")
    assert after == [prefix + "a", prefix + "b"], "'' sorts before every name at that key"
    before = names(api, prefix=prefix, order="lock_until", desc=1, after_key=until + 1, after_name="")
    assert before == [prefix + "a"]


def test_the_old_cursor_form_still_pages_by_name(api: httpx.Client) -> None:
    prefix = unique("compat")
    for suffix in "abcde":
        acquire(api, prefix + suffix)
    collected: list[str] = []
    params: dict[str, Any] = {"prefix": prefix, "limit": 2}
    while True:
        body = query(api, **params)
        collected += [r["name"] for r in body["locks"]]
        if body["cursor"] is None:
            break
        params["cursor"] = body["cursor"]
    assert collected == [prefix + s for s in "abcde"]


# -- prefix ranges and name order over awkward code points ---------------------------------


def test_names_sort_by_code_point_not_by_utf16_unit(api: httpx.Client) -> None:
    prefix = unique("points")
    # UTF-16 puts U+10000 (a surrogate pair, 0xD800...) before U+FFFF and U+E000.
    suffixes = ["\U00010000", "\uffff", "\ue000", "z", "\U0001f600"]
    for suffix in suffixes:
        acquire(api, prefix + suffix)
    expected = sorted(prefix + s for s in suffixes)
    assert names(api, prefix=prefix) == expected
    assert [r["name"] for r in walk(api, "name", False, 2, prefix=prefix)] == expected
    assert [r["name"] for r in walk(api, "name", True, 2, prefix=prefix)] == expected[::-1]


@pytest.mark.parametrize(
    ("last", "inside", "outside"),
    [
        ("a", "ab", "b"),
        ("\uffff", "\uffff\U0010ffff", "\U00010000"),  # the bound is the next code point, astral
        ("\ud7ff", "\ud7ffx", "\ue000"),  # the surrogate block is skipped
        ("\U0001f600", "\U0001f600a", "\U0001f601"),  # astral: one code point, not two units
        ("\U0010ffff", "\U0010ffff\U0010ffff", "~"),  # nothing above it: no upper bound needed
    ],
    ids=["ascii", "bmp-top", "before-surrogates", "astral", "max-code-point"],
)
def test_a_prefix_is_a_range_up_to_its_next_code_point(
    api: httpx.Client, last: str, inside: str, outside: str
) -> None:
    base = unique("range")
    for suffix in (last, inside, outside):
        acquire(api, base + suffix)
    for desc in (0, 1):
        listed = names(api, prefix=base + last, desc=desc)
        assert sorted(listed) == sorted([base + last, base + inside]), (last, desc)


# -- search and states ---------------------------------------------------------------------


def test_search_is_literal_and_folds_ascii_letters_only(api: httpx.Client) -> None:
    prefix = unique("search")
    for suffix in ("A%B", "a_b", "axb", "Ärger", "ärger", "back\\slash"):
        acquire(api, prefix + suffix)

    def found(search: str) -> list[str]:
        return [n[len(prefix) :] for n in names(api, prefix=prefix, search=search)]

    assert found("a%b") == ["A%B"]
    assert found("A_B") == ["a_b"]
    assert found("%") == ["A%B"]
    assert found("\\s") == ["back\\slash"]
    assert found("ÄRGER") == ["Ärger"], "non-ASCII letters match only themselves"
    assert found("RGER") == ["Ärger", "ärger"]


def test_search_skip_keeps_a_key_prefix_out_of_the_search(api: httpx.Client) -> None:
    prefix = unique("skip") + "ns:"
    acquire(api, prefix + "job")
    assert names(api, prefix=prefix, search="ns:") == [prefix + "job"]
    assert names(api, prefix=prefix, search="ns:", search_skip=len(prefix)) == []
    assert names(api, prefix=prefix, search="JOB", search_skip=len(prefix)) == [prefix + "job"]


def test_states_split_held_from_released_ones_kept_for_at_least(api: httpx.Client) -> None:
    prefix = unique("states")
    acquire(api, prefix + "held")
    kept = acquire(api, prefix + "kept", at_least=60_000, at_most=120_000)["record"]
    assert api.post("/v1/unlock", json={"name": prefix + "kept", "token": kept["token"]}).json()["released"]
    assert names(api, prefix=prefix, states="held") == [prefix + "held"]
    assert names(api, prefix=prefix, states="at_least") == [prefix + "kept"]
    assert names(api, prefix=prefix, states="at_least,held") == [prefix + "held", prefix + "kept"]
    assert names(api, prefix=prefix) == [prefix + "held", prefix + "kept"]
    [record] = query(api, prefix=prefix, states="at_least")["locks"]
    assert record["released"] is True


def test_a_lock_leaves_every_order_when_it_expires(api: httpx.Client) -> None:
    prefix = unique("expiry")
    acquire(api, prefix + "short", at_most=1_000)
    acquire(api, prefix + "long", at_most=60_000)
    wait_until(lambda: len(names(api, prefix=prefix)) == 1, what="the short lock to leave the listing")
    for order in ("name", "lock_until", "locked_at"):
        assert names(api, prefix=prefix, order=order) == [prefix + "long"]


def test_a_page_of_a_thousand(api: httpx.Client) -> None:
    prefix = unique("thousand")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: acquire(api, f"{prefix}{i:04}", at_most=300_000), range(1001)))
    full = query(api, prefix=prefix, limit=1000)
    assert len(full["locks"]) == 1000 and full["more"] is True
    assert [r["name"] for r in full["locks"]] == [f"{prefix}{i:04}" for i in range(1000)]
    by_time = query(api, prefix=prefix, limit=1000, order="lock_until", desc=1)
    assert len(by_time["locks"]) == 1000 and by_time["more"] is True
    last = full["locks"][-1]["name"]
    rest = query(api, prefix=prefix, limit=1000, after_key=last, after_name=last)
    assert [r["name"] for r in rest["locks"]] == [f"{prefix}1000"] and rest["more"] is False


# -- the index is used: ranges and ordered walks, never a table scan or a sort --------------

PLAN_PROBE = Path(__file__).parent / "fixtures" / "plan_probe.js"


@pytest.fixture(scope="module")
def planner(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A client of the shipped Worker whose index answers with SQLite's query plan."""
    folder = tmp_path_factory.mktemp("plan")
    copy_worker_modules(folder)
    shutil.copy(PLAN_PROBE, folder / "probe.js")
    with LocalWorker(script=folder / "probe.js") as worker, client(worker) as api:
        yield api


PLANNED: list[dict[str, Any]] = [
    {},
    {"prefix": "t:"},
    {"prefix": "t:", "desc": 1, "after_key": "t:b", "after_name": "t:b"},
    {"prefix": "t:", "search": "x", "search_skip": 2, "states": "held"},
    {"order": "lock_until"},
    {"order": "lock_until", "prefix": "t:", "desc": 1},
    {"order": "lock_until", "prefix": "t:", "after_key": 5, "after_name": "t:b"},
    {"order": "locked_at", "prefix": "t:", "states": "at_least"},
    {"order": "locked_at", "desc": 1, "after_key": 5, "after_name": "t:b"},
    {"prefix": "\U0010ffff"},
]


@pytest.mark.parametrize("params", PLANNED, ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items()) or "all")
def test_every_query_walks_an_index_in_order(planner: httpx.Client, params: dict[str, Any]) -> None:
    plan: list[str] = query(planner, **params)["locks"]
    assert plan, "the probe answers with the plan"
    assert all("INDEX" in step for step in plan), f"a table scan: {plan}"
    assert not any("TEMP B-TREE" in step for step in plan), f"a sort of every matching row: {plan}"
    order = params.get("order", "name")
    index = "sqlite_autoindex_locks_1" if order == "name" else f"locks_by_{order}"
    assert index in plan[0]
    if order == "name" and params.get("prefix") == "t:":
        assert "name>? AND name<?" in plan[0], "a prefix is a bounded range"


# -- an index written by the previous release -----------------------------------------------


def client(worker: LocalWorker) -> httpx.Client:
    return httpx.Client(base_url=worker.url, headers={"Authorization": f"Bearer {worker.token}"}, timeout=10)


def test_an_index_of_the_previous_release_is_upgraded_in_place(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with LocalWorker(persist_dir=state, script=OLD_WORKER) as old, client(old) as api:
        held = acquire(api, "up/held", at_most=120_000)["record"]
        kept = acquire(api, "up/kept", at_most=90_000, at_least=60_000)["record"]
        api.post("/v1/unlock", json={"name": "up/kept", "token": kept["token"]})
        acquire(api, "up/short", at_most=200)
        gone = acquire(api, "up/gone", at_most=60_000)["record"]
        api.post("/v1/unlock", json={"name": "up/gone", "token": gone["token"]})
        time.sleep(0.4)
        assert "more" not in query(api, prefix="up/"), "the fixture must be the old Worker"
    new = LocalWorker(token=old.token, persist_dir=state)
    with new, client(new) as api:
        assert names(api, prefix="up/") == ["up/held", "up/kept"]
        # The new columns were filled from the stored records.
        assert names(api, prefix="up/", states="held") == ["up/held"]
        assert names(api, prefix="up/", states="at_least") == ["up/kept"]
        by_start = query(api, prefix="up/", order="locked_at")["locks"]
        assert [r["locked_at_ms"] for r in by_start] == sorted([held["locked_at_ms"], kept["locked_at_ms"]])
        walked = walk(api, "locked_at", False, 1, prefix="up/")
        assert [r["name"] for r in walked] == [r["name"] for r in by_start]
        assert names(api, prefix="up/", order="lock_until") == ["up/kept", "up/held"]
        # And it keeps working: a new lock, and a lock of the old release released now.
        acquire(api, "up/new", at_most=30_000)
        api.post("/v1/unlock", json={"name": "up/held", "token": held["token"]})
        assert names(api, prefix="up/", order="lock_until") == ["up/new", "up/kept"]
    with new, client(new) as api:
        assert names(api, prefix="up/") == ["up/kept", "up/new"], "a second start changes nothing"


def test_an_app_upgraded_before_its_worker_is_told_to_redeploy(tmp_path: Path) -> None:
    with LocalWorker(script=OLD_WORKER) as old:
        provider = DurableObjectLockProvider("edge", url=old.url, token=old.token, key_prefix="app:")
        try:
            held = provider.lock(LockConfiguration("job", "1m"))
            assert held is not None, "taking a lock works against the previous release"
            with pytest.raises(LockProviderError, match="deploy the Worker of this") as caught:
                provider.query(LockQuery(order="lock_until"))
            assert caught.value.alias == "edge"
            assert held.unlock() is True
        finally:
            provider.close()
