"""The Durable Object provider on the local Workers runtime against raw httpx requests.

Both contenders use a client built by the same helper (``providers.http.PooledClient``:
same headers, timeout and keep-alive pool) over a request-counting wrapper around
httpx's real transport, and send the same JSON bodies. Requests per operation are
counted by that wrapper on the client side (the Worker does not count requests).
"""

from __future__ import annotations

from typing import Any

import httpx

from bench.stats import interleave, ratios


class CountingTransport(httpx.BaseTransport):
    """Counts requests by ``METHOD path`` and passes them to the real transport."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.counts: dict[str, int] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        key = f"{request.method} {request.url.path}"
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def run(rounds: int, seconds: float) -> dict[str, Any]:
    from tslock_django import LockConfiguration
    from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
    from tslock_django.providers.http import PooledClient
    from tslock_django.testing.worker_runtime import LocalWorker

    with LocalWorker() as worker:
        counted = CountingTransport(httpx.HTTPTransport())
        provider = DurableObjectLockProvider(
            "bench", url=worker.url, token=worker.token, transport=counted, timeout=10.0
        )
        raw = PooledClient(
            base_url=worker.url,
            headers={
                "Authorization": f"Bearer {worker.token}",
                "Accept": "application/json",
                "User-Agent": "tslock-django",
            },
            timeout=10.0,
            transport=CountingTransport(httpx.HTTPTransport()),
        ).get()
        config = LockConfiguration("bench-do-tslock", "1m")

        def tslock_cycle() -> None:
            held = provider.lock(config)
            if held is None or not held.unlock():
                raise RuntimeError("tslock: the free lock was not granted or not released")

        body = {
            "name": "bench-do-raw",
            "lock_at_most_for_ms": 60_000,
            "lock_at_least_for_ms": 0,
            "locked_by": provider.locked_by,
        }

        def raw_cycle() -> None:
            data = raw.post("/v1/acquire", json=body).json()
            if not data.get("acquired"):
                raise RuntimeError(f"raw: the free lock was not granted: {data}")
            token = data["record"]["token"]
            if not raw.post("/v1/unlock", json={"name": body["name"], "token": token}).json()["released"]:
                raise RuntimeError("raw: the lock was not released")

        try:
            results = interleave(
                {"tslock": tslock_cycle, "raw-httpx": raw_cycle}, rounds=rounds, seconds=seconds
            )
            requests = count_requests(provider, counted)
        finally:
            provider.close()
            raw.close()
    # A cycle is two operations (acquire + unlock): report milliseconds per operation.
    per_op = {name: {k: 1000 / (2 * r[k]) for k in ("median", "p10", "p90")} for name, r in results.items()}
    return {
        "unit": "lock+unlock cycles per second (ms_per_operation: lower is better)",
        "results": results,
        "ms_per_operation": per_op,
        "tslock_time_over_raw": per_op["tslock"]["median"] / per_op["raw-httpx"]["median"],
        "tslock_over": ratios(results, "tslock"),
        "requests_per_operation": requests,
        "counted_by": "client side: a counting httpx transport wrapped around httpx.HTTPTransport",
    }


def count_requests(provider: Any, counted: CountingTransport) -> dict[str, int]:
    from tslock_django import LockConfiguration

    config = LockConfiguration("bench-do-count", "1m")
    counts: dict[str, int] = {}

    def measure(label: str, operation: Any) -> Any:
        counted.counts.clear()
        result = operation()
        counts[label] = sum(counted.counts.values())
        return result

    held = measure("acquire", lambda: provider.lock(config))
    measure("acquire (held elsewhere)", lambda: provider.lock(config))
    held = measure("extend", lambda: held.extend("1m"))
    measure("unlock", held.unlock)
    measure("list_locks", lambda: provider.list_locks(prefix="bench-do-"))
    return counts
