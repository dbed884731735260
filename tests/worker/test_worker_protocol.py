"""The Worker's wire protocol v1, spoken directly over HTTP against the real runtime."""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

import httpx
import pytest

from tslock_django.worker.runtime import LocalWorker


def unique(label: str = "lock") -> str:
    return f"proto-{label}-{uuid.uuid4().hex[:10]}"


def acquire(api: httpx.Client, name: str, at_most: int = 10_000, at_least: int = 0, **extra: Any) -> Any:
    response = api.post(
        "/v1/acquire",
        json={"name": name, "lock_at_most_for_ms": at_most, "lock_at_least_for_ms": at_least, **extra},
    )
    assert response.status_code == 200, response.text
    return response.json()


def listed(api: httpx.Client, prefix: str) -> list[dict[str, Any]]:
    response = api.get("/v1/locks", params={"prefix": prefix})
    assert response.status_code == 200, response.text
    locks: list[dict[str, Any]] = response.json()["locks"]
    return locks


# -- health and authentication --------------------------------------------------------


def test_health_needs_no_token(local_worker: LocalWorker) -> None:
    response = httpx.get(local_worker.url + "/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["version"] == 1
    assert isinstance(body["now_ms"], int)


ROUTES = [
    ("POST", "/v1/acquire", {"name": "x", "lock_at_most_for_ms": 1000}),
    ("POST", "/v1/extend", {"name": "x", "token": "t", "lock_at_most_for_ms": 1000}),
    ("POST", "/v1/unlock", {"name": "x", "token": "t"}),
    ("POST", "/v1/force-release", {"name": "x"}),
    ("GET", "/v1/locks", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-secret"}, {"Authorization": "Basic Zm9vOmJhcg=="}],
    ids=["no-header", "wrong-token", "basic-scheme"],
)
def test_every_route_but_health_needs_the_token(
    local_worker: LocalWorker, method: str, path: str, body: Any, headers: dict[str, str]
) -> None:
    response = httpx.request(method, local_worker.url + path, json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/json")
    assert "error" in response.json()


def test_a_token_that_only_shares_a_prefix_is_refused(local_worker: LocalWorker) -> None:
    for guess in (local_worker.token[:-1], local_worker.token + "x", local_worker.token.upper() + "!"):
        response = httpx.get(local_worker.url + "/v1/locks", headers={"Authorization": f"Bearer {guess}"})
        assert response.status_code == 401


def test_without_the_secret_the_worker_says_so_instead_of_unauthorized(
    worker_without_secret: LocalWorker,
) -> None:
    response = httpx.post(
        worker_without_secret.url + "/v1/acquire",
        json={"name": "x", "lock_at_most_for_ms": 1000},
        headers={"Authorization": "Bearer anything"},
    )
    health = httpx.get(worker_without_secret.url + "/v1/health")
    assert response.status_code == 500
    error = response.json()["error"]
    assert "TSLOCK_TOKEN" in error
    assert "unauthorized" not in error.lower()
    assert health.status_code == 200


# -- routing ---------------------------------------------------------------------------


def test_unknown_route_is_404_json(api: httpx.Client) -> None:
    for path in ("/v1/nope", "/", "/v2/acquire", "/v1/acquire/extra"):
        response = api.post(path, json={})
        assert response.status_code == 404, path
        assert "error" in response.json()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/acquire"),
        ("PUT", "/v1/unlock"),
        ("DELETE", "/v1/force-release"),
        ("POST", "/v1/locks"),
        ("POST", "/v1/health"),
    ],
)
def test_wrong_method_is_405_json(api: httpx.Client, method: str, path: str) -> None:
    response = api.request(method, path)
    assert response.status_code == 405
    assert "error" in response.json()
    assert response.headers["allow"] in ("GET", "POST")


# -- bad input -------------------------------------------------------------------------

BAD_ACQUIRES: list[tuple[str, Any, str]] = [
    ("not-json", b"{not json", "JSON"),
    ("array", [1, 2], "object"),
    ("missing-name", {"lock_at_most_for_ms": 1000}, "name"),
    ("name-not-string", {"name": 5, "lock_at_most_for_ms": 1000}, "name"),
    ("empty-name", {"name": "", "lock_at_most_for_ms": 1000}, "name"),
    ("name-513-bytes", {"name": "é" * 256 + "x", "lock_at_most_for_ms": 1000}, "512"),
    ("name-with-newline", {"name": "job\nforged", "lock_at_most_for_ms": 1000}, "control character"),
    ("name-with-escape", {"name": "job\x1b[2J", "lock_at_most_for_ms": 1000}, "control character"),
    ("name-with-delete", {"name": "job\x7f", "lock_at_most_for_ms": 1000}, "control character"),
    ("missing-at-most", {"name": "x"}, "lock_at_most_for_ms"),
    ("float-at-most", {"name": "x", "lock_at_most_for_ms": 1.5}, "lock_at_most_for_ms"),
    ("string-at-most", {"name": "x", "lock_at_most_for_ms": "1000"}, "lock_at_most_for_ms"),
    ("zero-at-most", {"name": "x", "lock_at_most_for_ms": 0}, "lock_at_most_for_ms"),
    ("negative-at-most", {"name": "x", "lock_at_most_for_ms": -5}, "lock_at_most_for_ms"),
    (
        "negative-at-least",
        {"name": "x", "lock_at_most_for_ms": 1000, "lock_at_least_for_ms": -1},
        "lock_at_least_for_ms",
    ),
    (
        "float-at-least",
        {"name": "x", "lock_at_most_for_ms": 1000, "lock_at_least_for_ms": 0.5},
        "lock_at_least_for_ms",
    ),
    (
        "at-least-over-at-most",
        {"name": "x", "lock_at_most_for_ms": 1000, "lock_at_least_for_ms": 1001},
        "greater",
    ),
    ("locked-by-too-long", {"name": "x", "lock_at_most_for_ms": 1000, "locked_by": "h" * 256}, "locked_by"),
    ("locked-by-not-string", {"name": "x", "lock_at_most_for_ms": 1000, "locked_by": 7}, "locked_by"),
]


@pytest.mark.parametrize(
    ("body", "expected"), [(b, e) for _, b, e in BAD_ACQUIRES], ids=[i for i, _, _ in BAD_ACQUIRES]
)
def test_bad_acquire_input_is_400_naming_the_problem(api: httpx.Client, body: Any, expected: str) -> None:
    if isinstance(body, bytes):
        response = api.post("/v1/acquire", content=body, headers={"content-type": "application/json"})
    else:
        response = api.post("/v1/acquire", json=body)
    assert response.status_code == 400
    assert expected in response.json()["error"]


def test_a_name_of_exactly_512_bytes_and_a_255_character_holder_are_fine(api: httpx.Client) -> None:
    name = unique("max")
    name = name + "é" * ((512 - len(name.encode())) // 2)
    name += "x" * (512 - len(name.encode()))
    assert len(name.encode()) == 512
    body = acquire(api, name, locked_by="ü" * 255)
    assert body["acquired"] is True
    assert body["record"]["locked_by"] == "ü" * 255


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/v1/unlock", {"name": "x"}, "token"),
        ("/v1/unlock", {"name": "x", "token": ""}, "token"),
        ("/v1/unlock", {"token": "t"}, "name"),
        ("/v1/extend", {"name": "x", "lock_at_most_for_ms": 1000}, "token"),
        ("/v1/extend", {"name": "x", "token": "t"}, "lock_at_most_for_ms"),
        (
            "/v1/extend",
            {"name": "x", "token": "t", "lock_at_most_for_ms": 10, "lock_at_least_for_ms": 11},
            "greater",
        ),
        ("/v1/force-release", {"name": "x", "fencing_token": "3"}, "fencing_token"),
        ("/v1/force-release", {"name": "x", "token": 3}, "token"),
        ("/v1/force-release", {"name": ""}, "name"),
    ],
)
def test_bad_input_on_other_routes_is_400(api: httpx.Client, path: str, body: Any, expected: str) -> None:
    response = api.post(path, json=body)
    assert response.status_code == 400
    assert expected in response.json()["error"]


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "1001"}, {"limit": "abc"}, {"cursor": "%%%"}])
def test_bad_listing_parameters_are_400(api: httpx.Client, params: dict[str, str]) -> None:
    response = api.get("/v1/locks", params=params)
    assert response.status_code == 400
    assert "error" in response.json()


# -- the lock semantics ------------------------------------------------------------------


def test_acquire_returns_a_token_only_to_the_holder(api: httpx.Client) -> None:
    name = unique()
    first = acquire(api, name, locked_by="host-a:1")
    second = acquire(api, name, locked_by="host-b:2")
    assert first["acquired"] is True
    token = first["record"]["token"]
    assert first["record"]["token_fingerprint"] == hashlib.sha256(token.encode()).hexdigest()[:8]
    assert second["acquired"] is False
    assert "token" not in second["record"]
    assert second["record"]["locked_by"] == "host-a:1"
    assert second["record"]["fencing_token"] == first["record"]["fencing_token"] == 1
    assert first["record"]["lock_until_ms"] - first["record"]["locked_at_ms"] == 10_000
    assert isinstance(second["now_ms"], int)


def test_a_wrong_token_unlock_changes_nothing(api: httpx.Client) -> None:
    name = unique()
    held = acquire(api, name)["record"]
    before = listed(api, name)
    answer = api.post("/v1/unlock", json={"name": name, "token": "0" * 32}).json()
    assert answer["released"] is False
    assert listed(api, name) == before
    assert acquire(api, name)["acquired"] is False
    extend = api.post(
        "/v1/extend", json={"name": name, "token": "0" * 32, "lock_at_most_for_ms": 99_000}
    ).json()
    assert extend == {"extended": False, "now_ms": extend["now_ms"]}
    assert listed(api, name)[0]["lock_until_ms"] == held["lock_until_ms"]


def test_unlock_keeps_the_lock_until_lock_at_least_for_has_passed(api: httpx.Client) -> None:
    name = unique()
    held = acquire(api, name, at_most=60_000, at_least=30_000)["record"]
    assert api.post("/v1/unlock", json={"name": name, "token": held["token"]}).json()["released"] is True
    again = acquire(api, name)
    assert again["acquired"] is False
    assert again["record"]["released"] is True
    assert again["record"]["lock_until_ms"] == held["at_least_until_ms"]
    # A released lock cannot be unlocked or extended a second time.
    assert api.post("/v1/unlock", json={"name": name, "token": held["token"]}).json()["released"] is False
    extend = api.post("/v1/extend", json={"name": name, "token": held["token"], "lock_at_most_for_ms": 1000})
    assert extend.json()["extended"] is False


def test_extend_moves_both_deadlines_from_the_objects_now(api: httpx.Client) -> None:
    name = unique()
    held = acquire(api, name, at_most=5_000)["record"]
    answer = api.post(
        "/v1/extend",
        json={
            "name": name,
            "token": held["token"],
            "lock_at_most_for_ms": 50_000,
            "lock_at_least_for_ms": 20_000,
        },
    ).json()
    assert answer["extended"] is True
    record = answer["record"]
    assert record["lock_until_ms"] == answer["now_ms"] + 50_000
    assert record["at_least_until_ms"] == answer["now_ms"] + 20_000
    assert record["token"] == held["token"]
    assert record["fencing_token"] == held["fencing_token"]


def test_force_release_with_a_stale_fencing_token_changes_nothing(api: httpx.Client) -> None:
    name = unique()
    first = acquire(api, name)["record"]
    assert (
        api.post("/v1/force-release", json={"name": name, "fencing_token": first["fencing_token"]}).json()[
            "released"
        ]
        is True
    )
    second = acquire(api, name)["record"]
    assert second["fencing_token"] == first["fencing_token"] + 1
    stale = api.post("/v1/force-release", json={"name": name, "fencing_token": first["fencing_token"]}).json()
    assert stale["released"] is False
    assert acquire(api, name)["acquired"] is False
    wrong_token = api.post("/v1/force-release", json={"name": name, "token": first["token"]}).json()
    assert wrong_token["released"] is False
    current = api.post("/v1/force-release", json={"name": name, "token": second["token"]}).json()
    assert current["released"] is True
    assert acquire(api, name)["acquired"] is True


def test_unconditional_force_release_and_nothing_to_release(api: httpx.Client) -> None:
    name = unique()
    assert api.post("/v1/force-release", json={"name": name}).json()["released"] is False
    acquire(api, name)
    assert api.post("/v1/force-release", json={"name": name}).json()["released"] is True
    assert api.post("/v1/force-release", json={"name": name}).json()["released"] is False


def test_fencing_tokens_grow_across_unlock_force_release_and_expiry(api: httpx.Client) -> None:
    name = unique()
    seen = []
    for how in ("unlock", "force", "expire", "unlock"):
        record = acquire(api, name, at_most=300 if how == "expire" else 10_000)["record"]
        seen.append(record["fencing_token"])
        if how == "unlock":
            api.post("/v1/unlock", json={"name": name, "token": record["token"]})
        elif how == "force":
            api.post("/v1/force-release", json={"name": name})
        else:
            wait_until(lambda: acquire(api, name, at_most=1)["acquired"], what="the lock to expire")
            seen.append(seen[-1] + 1)  # the probe above acquired once more
    assert seen == sorted(set(seen))
    assert seen == list(range(1, len(seen) + 1))


def wait_until(condition: Any, *, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {timeout} s")
        time.sleep(0.05)


# -- the index -------------------------------------------------------------------------


def test_the_index_lists_what_is_held_and_drops_what_expired(api: httpx.Client) -> None:
    prefix = unique("index") + "/"
    long = acquire(api, prefix + "long", at_most=60_000)["record"]
    # Long enough for the listing below to run under load, short enough to wait for.
    short = acquire(api, prefix + "short", at_most=2_000)["record"]
    names = [r["name"] for r in listed(api, prefix)]
    assert names == [prefix + "long", prefix + "short"]
    assert all("token" not in r for r in listed(api, prefix))
    assert listed(api, prefix)[1]["token_fingerprint"] == short["token_fingerprint"]
    wait_until(lambda: len(listed(api, prefix)) == 1, what="the short lock to leave the index")
    assert listed(api, prefix)[0]["fencing_token"] == long["fencing_token"]
    api.post("/v1/unlock", json={"name": prefix + "long", "token": long["token"]})
    assert listed(api, prefix) == []


def test_the_index_reflects_each_change_at_once(api: httpx.Client) -> None:
    name = unique("at-once")
    held = acquire(api, name)["record"]
    assert [r["name"] for r in listed(api, name)] == [name]
    extended = api.post(
        "/v1/extend", json={"name": name, "token": held["token"], "lock_at_most_for_ms": 90_000}
    )
    assert listed(api, name)[0]["lock_until_ms"] == extended.json()["record"]["lock_until_ms"]
    api.post("/v1/force-release", json={"name": name})
    assert listed(api, name) == []


def test_listing_pages_and_prefixes_with_awkward_names(api: httpx.Client) -> None:
    base = unique("page")
    suffixes = ["a/b", "a%2Fb", "a&b=c", "a?b#c", "ä", "日本", "😀x", "z"]
    for suffix in suffixes:
        acquire(api, base + suffix)
    acquire(api, base[:-1] + "~")  # shares all but the last character of the prefix
    collected: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"prefix": base, "limit": "3", **({"cursor": cursor} if cursor else {})}
        body = api.get("/v1/locks", params=params).json()
        assert len(body["locks"]) <= 3
        collected += [r["name"] for r in body["locks"]]
        pages += 1
        cursor = body["cursor"]
        if cursor is None:
            break
    # Ordered by code point, as Python orders strings.
    assert collected == sorted(base + s for s in suffixes)
    assert pages == 3
    emoji = [r["name"] for r in listed(api, base + "😀")]
    assert emoji == [base + "😀x"]


def test_a_refused_request_leaves_the_keep_alive_connection_usable(local_worker: LocalWorker) -> None:
    # The Worker used to answer 401 without reading the body; the runtime then now and
    # then reset the connection, and the client's next request failed as a network
    # error (about once in 300 rounds here). Every round must get its own answer.
    with httpx.Client(base_url=local_worker.url, headers={"Authorization": "Bearer wrong"}) as client:
        for _ in range(300):
            refused = client.post("/v1/acquire", json={"name": "x", "lock_at_most_for_ms": 1000})
            assert refused.status_code == 401
            assert client.get("/v1/locks").status_code == 401
            assert client.post("/v1/nowhere", json={"x": 1}).status_code == 401
