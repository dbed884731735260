"""Time of one listing page of the Durable Objects provider on the local Workers runtime.

Not a test (speed is never asserted): run
``.venv/bin/python -m tests.worker.measure_query [SIZES...]`` (default: 500 5000).
Fills the index with that many current locks (names under a key prefix, as a provider
with ``key_prefix`` sees them; lock_until spread over ten minutes), then times
``provider.query`` for pages of 100 by name and by lock_until, each way: the first page
and the page after the first ``min(1000, size / 2)`` records (through its cursor).
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.query import LockQuery
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.testing.worker_runtime import LocalWorker


def fill(provider: DurableObjectLockProvider, start: int, stop: int) -> None:
    def take(i: int) -> None:
        # Durations spread so that lock_until order differs from name order.
        held = provider.lock(LockConfiguration(f"job-{i:06}", 60 + (i * 7919) % 540))
        if held is None:
            raise SystemExit(f"job-{i:06} was not free")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(take, range(start, stop)))


def timed(provider: DurableObjectLockProvider, query: LockQuery, runs: int) -> float:
    """Median milliseconds of ``provider.query(query)``."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        page = provider.query(query)
        samples.append((time.perf_counter() - started) * 1000)
        if len(page.records) != query.limit:
            raise SystemExit(f"a page of {len(page.records)} records, expected {query.limit}")
    return statistics.median(samples)


def main() -> None:
    from django.conf import settings

    if not settings.configured:
        # Cursors are signed with SECRET_KEY; nothing else of Django is needed here.
        settings.configure(SECRET_KEY="measure-query")
    sizes = [int(a) for a in sys.argv[1:]] or [500, 5000]
    runs = 40
    with LocalWorker() as worker:
        provider = DurableObjectLockProvider("bench", url=worker.url, token=worker.token, key_prefix="bench:")
        try:
            filled = 0
            for size in sorted(sizes):
                fill(provider, filled, size)
                filled = size
                for order in ("name", "lock_until"):
                    for descending in (False, True):
                        first = LockQuery(order=order, descending=descending, limit=100)
                        skip = min(1000, size // 2)
                        middle = replace(first, cursor=provider.query(replace(first, limit=skip)).next_cursor)
                        print(
                            f"{size:>6} locks  order={order:<10} desc={int(descending)}  "
                            f"first page {timed(provider, first, runs):6.2f} ms   "
                            f"after {skip} {timed(provider, middle, runs):6.2f} ms"
                        )
        finally:
            provider.close()


if __name__ == "__main__":
    main()
