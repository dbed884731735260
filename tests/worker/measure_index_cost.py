"""Acquire + unlock latency on the shipped Worker against the previous release's (the
test fixture ``fixtures/index_before_queries.js``), both running at once and measured in
alternation so that the machine's load falls on both alike.

Not a test (speed is never asserted): run
``.venv/bin/python -m tests.worker.measure_index_cost [ROUNDS]`` (default 2000). Each
index holds 1,000 other current locks first, so its update writes into real indexes.
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tslock_django.core.configuration import LockConfiguration
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.testing.worker_runtime import LocalWorker

OLD_WORKER = Path(__file__).parent / "fixtures" / "index_before_queries.js"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    config = LockConfiguration("cost-probe", "1m")
    with LocalWorker(script=OLD_WORKER) as old, LocalWorker() as new:
        providers = {
            label: DurableObjectLockProvider(label, url=worker.url, token=worker.token)
            for label, worker in (("previous", old), ("shipped", new))
        }
        samples: dict[str, list[float]] = {label: [] for label in providers}
        try:
            for provider in providers.values():
                with ThreadPoolExecutor(8) as pool:
                    list(
                        pool.map(
                            lambda i, p=provider: p.lock(LockConfiguration(f"other-{i:04}", "1h")),
                            range(1000),
                        )
                    )
            for round_ in range(rounds + 50):
                for label, provider in providers.items() if round_ % 2 else reversed(providers.items()):
                    started = time.perf_counter()
                    held = provider.lock(config)
                    if held is None or not held.unlock():
                        raise SystemExit(f"{label}: the free lock was not granted or not released")
                    if round_ >= 50:
                        samples[label].append((time.perf_counter() - started) * 1000)
        finally:
            for provider in providers.values():
                provider.close()
    for label, ms in samples.items():
        ms.sort()
        print(
            f"{label:>8}: acquire+unlock median {statistics.median(ms):.2f} ms, "
            f"p10 {ms[len(ms) // 10]:.2f} ms, p90 {ms[len(ms) * 9 // 10]:.2f} ms ({len(ms)} rounds)"
        )


if __name__ == "__main__":
    main()
