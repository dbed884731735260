"""Median acquire latency of the Durable Objects provider on the local Workers runtime.

Not a test (speed is never asserted): run ``.venv/bin/python -m tests.worker.measure_latency``.
Loops acquire + unlock on one lock name and reports the acquire calls only.
"""

from __future__ import annotations

import statistics
import sys
import time

from tslock_django.core.configuration import LockConfiguration
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.worker.runtime import LocalWorker


def measure(calls: int = 500, warmup: int = 20) -> list[float]:
    """Seconds per acquire, ``calls`` samples after ``warmup`` unmeasured rounds."""
    config = LockConfiguration("latency-probe", "1m")
    samples: list[float] = []
    with LocalWorker() as worker:
        provider = DurableObjectLockProvider("edge", url=worker.url, token=worker.token)
        try:
            for round_ in range(warmup + calls):
                started = time.perf_counter()
                held = provider.lock(config)
                elapsed = time.perf_counter() - started
                if held is None:
                    raise SystemExit(f"round {round_}: the lock released just before was not free")
                held.unlock()
                if round_ >= warmup:
                    samples.append(elapsed)
        finally:
            provider.close()
    return samples


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    samples = sorted(measure(calls))
    ms = [s * 1000 for s in samples]
    print(
        f"acquire on one name, {len(ms)} calls: median {statistics.median(ms):.2f} ms, "
        f"p90 {ms[int(len(ms) * 0.9)]:.2f} ms, min {ms[0]:.2f} ms, max {ms[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
