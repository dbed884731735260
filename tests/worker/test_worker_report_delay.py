"""The report delay (TSLOCK_REPORT_DELAY_MS) on the real runtime: a lock object reports a
change from its alarm after the delay, sending only the state it has then, so a lock
taken and released within the delay costs the index nothing, a longer one shows in the
listing once the delay has passed, and a force release reaches the index at once.

Reports are counted by the test-only index of fixtures/index_faults.js (one shard)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require_node
from tests.worker.conftest import fixture_worker
from tests.worker.test_worker_listing import acquire, client, query, wait_until
from tslock_django.worker.runtime import LocalWorker

DELAY_MS = 1500


def start(folder: Path, delay: str) -> LocalWorker:
    variables = {"TSLOCK_INDEX_SHARDS": "1", "TSLOCK_REPORT_DELAY_MS": delay}
    return fixture_worker(folder, "index_faults.js", variables)


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorker]:
    require_node()
    with start(tmp_path_factory.mktemp("delayed"), str(DELAY_MS)) as worker:
        yield worker


@pytest.fixture
def api(delayed: LocalWorker) -> Iterator[httpx.Client]:
    with client(delayed) as api:
        yield api


def reports(api: httpx.Client) -> int:
    response = api.post("/test/faults", json={"mode": "count"})
    assert response.status_code == 200, response.text
    count: int = response.json()["released"]
    return count


def listed(api: httpx.Client, base: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in query(api, prefix=base)["locks"]}


def prefix() -> str:
    return f"d-{uuid.uuid4().hex[:10]}/"


def unlock(api: httpx.Client, name: str, token: str) -> None:
    assert api.post("/v1/unlock", json={"name": name, "token": token}).json()["released"] is True


def test_a_lock_shorter_than_the_delay_costs_the_index_nothing(api: httpx.Client) -> None:
    base = prefix()
    before = reports(api)
    for i in range(5):
        record = acquire(api, f"{base}{i}")["record"]
        unlock(api, f"{base}{i}", record["token"])
    # Past the delay: each object's alarm has fired and found nothing the index needs.
    time.sleep(DELAY_MS / 1000 * 2)
    assert reports(api) == before
    assert listed(api, base) == {}


def test_a_longer_lock_is_listed_after_the_delay_and_leaves_after_its_release(api: httpx.Client) -> None:
    base = prefix()
    name = base + "long"
    taken = time.monotonic()
    record = acquire(api, name)["record"]
    assert name not in listed(api, base), "listed before the delay passed"
    wait_until(lambda: name in listed(api, base), what="the delayed report")
    assert time.monotonic() - taken >= DELAY_MS / 1000 * 0.9
    assert listed(api, base)[name]["fencing_token"] == record["fencing_token"]
    unlock(api, name, record["token"])
    assert name in listed(api, base), "the release shows only after the delay"
    wait_until(lambda: listed(api, base) == {}, what="the delayed release report")


def test_only_the_latest_state_of_a_burst_is_reported(api: httpx.Client) -> None:
    base = prefix()
    name = base + "burst"
    record = acquire(api, name)["record"]
    for until in (70_000, 80_000, 90_000):
        body = {"name": name, "token": record["token"], "lock_at_most_for_ms": until}
        extended = api.post("/v1/extend", json=body).json()
        assert extended["extended"] is True
    before = reports(api)
    wait_until(lambda: name in listed(api, base), what="the delayed report")
    assert listed(api, base)[name]["lock_until_ms"] == extended["record"]["lock_until_ms"]
    time.sleep(DELAY_MS / 1000)
    assert reports(api) - before == 1, "one report for the acquire and three extends"


def test_a_force_release_is_reported_at_once(api: httpx.Client) -> None:
    base = prefix()
    name = base + "stuck"
    acquire(api, name)
    wait_until(lambda: name in listed(api, base), what="the delayed report")
    answer = api.post("/v1/force-release", json={"name": name}).json()
    assert answer["released"] is True
    # Well inside the delay: the operator's next view of the listing no longer shows it.
    wait_until(lambda: listed(api, base) == {}, what="the force release", timeout=DELAY_MS / 1000 / 2)


def test_an_invalid_report_delay_is_a_clear_error_before_any_lock_is_touched(tmp_path: Path) -> None:
    require_node()
    with start(tmp_path, "soon") as worker, client(worker) as api:
        answer = api.post("/v1/acquire", json={"name": "x", "lock_at_most_for_ms": 1000})
        assert answer.status_code == 500
        error = answer.json()["error"]
        assert "TSLOCK_REPORT_DELAY_MS" in error and "0 to 60000" in error
