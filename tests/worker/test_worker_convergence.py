"""Answer first, report after: a lock object answers without waiting for the index, and
the index converges when reports are lost, held back, reordered or hit a restarted index
object, and under 16 clients churning the same names. All on the real Workers runtime;
faults come from a test-only subclass of the shipped index (fixtures/index_faults.js)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import require_node
from tests.worker.conftest import fixture_worker
from tests.worker.test_worker_listing import acquire, client, query, wait_until
from tslock_django.worker.runtime import LocalWorker

# Generous: the alarm re-sends after 1 s, then 2 s and 4 s; this only bounds a hung test.
CONVERGED = 20.0


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorker]:
    require_node()
    folder = tmp_path_factory.mktemp("faults")
    with fixture_worker(folder, "index_faults.js", {"TSLOCK_INDEX_SHARDS": "1"}) as worker:
        yield worker


@pytest.fixture
def api(faulty: LocalWorker) -> Iterator[httpx.Client]:
    with client(faulty) as api:
        yield api
        fault(api, "release")


def fault(api: httpx.Client, mode: str) -> int:
    response = api.post("/test/faults", json={"mode": mode})
    assert response.status_code == 200, response.text
    released: int = response.json()["released"]
    return released


def prefix() -> str:
    return f"c-{uuid.uuid4().hex[:10]}/"


def listed(api: httpx.Client, base: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in query(api, prefix=base)["locks"]}


def test_the_caller_is_answered_while_the_index_holds_its_report(api: httpx.Client) -> None:
    base = prefix()
    fault(api, "hold")
    # Before this release the answer waited for the index: this request would hang.
    taken = acquire(api, base + "a")
    assert taken["acquired"] is True
    assert listed(api, base) == {}, "the report is still held, so the index does not know yet"
    assert fault(api, "release") == 1
    wait_until(lambda: base + "a" in listed(api, base), what="the held report to land")
    assert listed(api, base)[base + "a"]["fencing_token"] == taken["record"]["fencing_token"]


def test_lost_reports_are_re_sent_by_the_alarm(api: httpx.Client) -> None:
    base = prefix()
    fault(api, "drop")
    kept = acquire(api, base + "kept")["record"]
    gone = acquire(api, base + "gone")["record"]
    assert api.post("/v1/unlock", json={"name": base + "gone", "token": gone["token"]}).json()["released"]
    assert listed(api, base) == {}
    fault(api, "none")
    wait_until(
        lambda: set(listed(api, base)) == {base + "kept"}, what="the alarm to re-send", timeout=CONVERGED
    )
    assert listed(api, base)[base + "kept"]["lock_until_ms"] == kept["lock_until_ms"]


def test_a_report_delivered_late_never_replaces_a_newer_one(api: httpx.Client) -> None:
    base = prefix()
    name = base + "x"
    fault(api, "hold")
    first = acquire(api, name, at_most=60_000)["record"]
    extended = api.post(
        "/v1/extend", json={"name": name, "token": first["token"], "lock_at_most_for_ms": 120_000}
    ).json()
    assert extended["extended"] is True
    # Newest first: the extension lands, then the acquisition's older report.
    assert fault(api, "release-reversed") == 2
    wait_until(lambda: name in listed(api, base), what="the reports to land")
    # Both were acknowledged, so no alarm would repair an overwrite: what shows now stays.
    assert listed(api, base)[name]["lock_until_ms"] == extended["record"]["lock_until_ms"]


def test_a_restarted_index_object_is_repaired(api: httpx.Client) -> None:
    base = prefix()
    fault(api, "abort")
    record = acquire(api, base + "r")["record"]
    # The restart reset the fault to none; the lost report comes back from the alarm.
    wait_until(lambda: base + "r" in listed(api, base), what="the re-sent report", timeout=CONVERGED)
    assert listed(api, base)[base + "r"]["fencing_token"] == record["fencing_token"]


def test_a_released_lock_leaves_the_listing_after_a_lost_report(api: httpx.Client) -> None:
    base = prefix()
    held = acquire(api, base + "r")["record"]
    wait_until(lambda: base + "r" in listed(api, base), what="the first report")
    fault(api, "drop")
    assert api.post("/v1/unlock", json={"name": base + "r", "token": held["token"]}).json()["released"]
    assert base + "r" in listed(api, base), "stale until the report lands (the documented bound)"
    fault(api, "none")
    wait_until(lambda: listed(api, base) == {}, what="the release to reach the index", timeout=CONVERGED)


# -- 16 clients churning the same names, on a sharded index --------------------------------


@pytest.fixture(scope="module", params=["0", "1000"], ids=["reports-at-once", "report-delay-1s"])
def sharded(request: pytest.FixtureRequest) -> Iterator[LocalWorker]:
    # Both ways a deployment reports: at once, and after the exported wrangler.jsonc's delay.
    require_node()
    variables = {"TSLOCK_INDEX_SHARDS": "4", "TSLOCK_REPORT_DELAY_MS": request.param}
    with LocalWorker(variables=variables) as worker:
        yield worker


def test_sixteen_clients_churning_the_same_names_converge(sharded: LocalWorker) -> None:
    base = prefix()
    names = [f"{base}{i}" for i in range(6)]
    errors: list[str] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        with client(sharded) as api:
            for _ in range(25):
                name = rng.choice(names)
                body = {
                    "name": name,
                    "lock_at_most_for_ms": 60_000,
                    "lock_at_least_for_ms": rng.choice([0, 0, 30_000]),
                }
                answer = api.post("/v1/acquire", json=body)
                if answer.status_code != 200:
                    errors.append(answer.text)
                    return
                data = answer.json()
                if data["acquired"] and rng.random() < 0.8:
                    api.post("/v1/unlock", json={"name": name, "token": data["record"]["token"]})

    threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    with client(sharded) as api:
        # The truth, from each lock object: a refused acquisition answers with the holder's
        # record; a granted one (1 ms) was free, and ends before it could be listed.
        truth = {}
        for name in names:
            data = api.post("/v1/acquire", json={"name": name, "lock_at_most_for_ms": 1}).json()
            if not data["acquired"]:
                truth[name] = data["record"]
        assert truth, "the churn leaves some locks held (fixed seeds)"

        def settled() -> bool:
            now = listed(api, base)
            return {n: (r["fencing_token"], r["lock_until_ms"], r["released"]) for n, r in now.items()} == {
                n: (r["fencing_token"], r["lock_until_ms"], r["released"]) for n, r in truth.items()
            }

        wait_until(settled, what="the index to match the lock objects", timeout=CONVERGED)


# -- reconciliation: the repair path when a lock object's reports stopped for good ----------


@pytest.fixture(scope="module")
def repairing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorker]:
    require_node()
    folder = tmp_path_factory.mktemp("repair")
    with fixture_worker(folder, "index_repair.js", {"TSLOCK_INDEX_SHARDS": "1"}) as worker:
        yield worker


def test_reconciliation_removes_a_lock_whose_release_was_never_reported(repairing: LocalWorker) -> None:
    with client(repairing) as api:
        base = prefix()
        held = acquire(api, base + "q")["record"]
        wait_until(lambda: base + "q" in listed(api, base), what="the first report")
        quiet = api.post("/test/quiet-unlock", json={"name": base + "q", "token": held["token"]})
        assert quiet.json()["done"] is True
        assert base + "q" in listed(api, base), "the index was not told"
        wait_until(lambda: listed(api, base) == {}, what="reconciliation", timeout=CONVERGED)


def test_reconciliation_drops_an_entry_no_lock_object_holds(repairing: LocalWorker) -> None:
    with client(repairing) as api:
        base = prefix()
        now = int(time.time() * 1000)
        record = {
            "name": base + "orphan",
            "locked_at_ms": now,
            "lock_until_ms": now + 600_000,
            "at_least_until_ms": now,
            "locked_by": "nobody",
            "fencing_token": 1,
            "released": False,
            "token_fingerprint": "00000000",
        }
        assert api.post("/test/plant", json={"name": base + "orphan", "record": record}).json()["done"]
        kept = acquire(api, base + "kept")["record"]
        assert set(listed(api, base)) == {base + "orphan", base + "kept"}
        wait_until(
            lambda: set(listed(api, base)) == {base + "kept"}, what="reconciliation", timeout=CONVERGED
        )
        # The live lock was confirmed, not dropped, and its record is unchanged.
        time.sleep(1.5)
        assert listed(api, base)[base + "kept"]["fencing_token"] == kept["fencing_token"]
