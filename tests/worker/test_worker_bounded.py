"""Bounded work in the index: pruning walks indexes in batches (never the table), and
expired rows are pruned to tombstones while later reports still see their versions."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests.conftest import require_node
from tests.worker.test_worker_listing import acquire, client, names, query, wait_until
from tslock_django.worker.export import copy_worker_modules
from tslock_django.worker.runtime import LocalWorker

PRUNE_PROBE = Path(__file__).parent / "fixtures" / "prune_probe.js"


def test_pruning_walks_indexes_in_batches(tmp_path: Path) -> None:
    require_node()
    copy_worker_modules(tmp_path)
    shutil.copy(PRUNE_PROBE, tmp_path / "probe.js")
    with (
        LocalWorker(script=tmp_path / "probe.js", variables={"TSLOCK_INDEX_SHARDS": "1"}) as worker,
        client(worker) as api,
    ):
        plan: list[str] = query(api)["locks"]
    assert len(plan) >= 4, plan
    scans = [step for step in plan if step.startswith("SCAN") and "INDEX" not in step]
    assert scans == [], f"a table scan: {plan}"
    assert any("locks_by_lock_until" in step for step in plan)
    assert any("locks_tombstones" in step for step in plan)


def test_an_expired_lock_is_never_listed_and_a_new_one_under_its_name_is(local_worker: LocalWorker) -> None:
    with client(local_worker) as api:
        acquire(api, "bounded/short", at_most=150)
        time.sleep(0.3)
        assert names(api, prefix="bounded/") == [], "filtered by lock_until at read time"
        acquire(api, "bounded/short", at_most=60_000)
        wait_until(lambda: names(api, prefix="bounded/") == ["bounded/short"], what="the new lock's report")
