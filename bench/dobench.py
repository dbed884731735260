"""The Durable Object provider on the local Workers runtime against raw httpx requests.

Sync: both contenders use a client built by the same helper (``providers.http.PooledClient``:
same headers, timeout and keep-alive pool) over a request-counting wrapper around
httpx's real transport, and send the same JSON bodies. Requests per operation are
counted by that wrapper on the client side (the Worker does not count requests).

Async (issue 33): the provider's ``alock`` and release against a raw ``httpx.AsyncClient``
(httpx's own transport, the provider's headers and pool limits) sending the same two
requests, in interleaved rounds on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.stats import interleave, percentile, ratios, summary, target


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


def run(rounds: int, seconds: float, sizes: tuple[int, ...] = (500, 50_000)) -> dict[str, Any]:
    """The Python side against raw httpx, then the index's cost and listings (``index``)."""
    report = run_client(rounds, seconds)
    report["index"] = run_index(rounds, seconds, sizes)
    return report


def run_client(rounds: int, seconds: float) -> dict[str, Any]:
    from tslock_django import LockConfiguration
    from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
    from tslock_django.providers.http import PooledClient
    from tslock_django.worker.runtime import LocalWorker

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
            asynchronous = run_async_client(worker, body, rounds, seconds)
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
        "async": asynchronous,
    }


async def _abatch(cycle: Any, seconds: float) -> float:
    """:func:`bench.stats.batch` for a coroutine cycle: cycles per second."""
    count = 0
    started = time.perf_counter()
    now = started
    while now < started + seconds:
        await cycle()
        count += 1
        now = time.perf_counter()
    return count / (now - started)


def run_async_client(worker: Any, body: dict[str, Any], rounds: int, seconds: float) -> dict[str, Any]:
    """``alock`` + ``aunlock`` on the provider against the same two requests on a raw
    ``httpx.AsyncClient``, alternating round by round on one loop."""
    from tslock_django import LockConfiguration
    from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
    from tslock_django.providers.http import POOL_LIMITS

    provider = DurableObjectLockProvider("bench-async", url=worker.url, token=worker.token, timeout=10.0)
    config = LockConfiguration("bench-do-async-tslock", "1m")
    body = {**body, "name": "bench-do-async-raw"}

    async def tslock_cycle() -> None:
        held = await provider.alock(config)
        if held is None or not await held.aunlock():
            raise RuntimeError("alock: the free lock was not granted or not released")

    async def main() -> dict[str, list[float]]:
        async with httpx.AsyncClient(
            base_url=worker.url,
            headers={
                "Accept-Encoding": "gzip",
                "Authorization": f"Bearer {worker.token}",
                "Accept": "application/json",
                "User-Agent": "tslock-django",
            },
            timeout=10.0,
            limits=POOL_LIMITS,
        ) as raw:

            async def raw_cycle() -> None:
                data = (await raw.post("/v1/acquire", json=body)).json()
                if not data.get("acquired"):
                    raise RuntimeError(f"raw async: the free lock was not granted: {data}")
                unlock = {"name": body["name"], "token": data["record"]["token"]}
                if not (await raw.post("/v1/unlock", json=unlock)).json()["released"]:
                    raise RuntimeError("raw async: the lock was not released")

            cycles = {"alock": tslock_cycle, "raw-httpx-async": raw_cycle}
            for cycle in cycles.values():
                await _abatch(cycle, 0.2)
            rates: dict[str, list[float]] = {name: [] for name in cycles}
            names = list(cycles)
            for round_ in range(rounds):
                for name in names[round_ % 2 :] + names[: round_ % 2]:
                    rates[name].append(await _abatch(cycles[name], seconds))
            await provider.aclose()
            return rates

    try:
        rates = asyncio.run(main())
    finally:
        provider.close()
    results = {
        name: {**summary(values), "rates": [round(v, 1) for v in values]} for name, values in rates.items()
    }
    ms = {name: 1000 / r["median"] for name, r in results.items()}
    return {
        "unit": "acquire+release cycles per second (ms_per_cycle: lower is better)",
        "results": results,
        "ms_per_cycle": ms,
        "alock_time_over_raw": ms["alock"] / ms["raw-httpx-async"],
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


# -- the index off the lock path, sharded (issue 10) --------------------------------------

BENCH_WORKER = Path(__file__).resolve().parent / "worker"
CLIENT_COUNTS = (1, 4, 16)
#: The pause after each timed latency cycle.
LATENCY_PAUSE_S = 0.01


def _variant(folder: Path, wrapper: str | None) -> Path:
    """The shipped Worker's modules, and the bench wrapper beside them (returns the module
    to run)."""
    from tslock_django.worker.export import copy_worker_modules

    copy_worker_modules(folder)
    if wrapper is None:
        return folder / "index.js"
    shutil.copy(BENCH_WORKER / wrapper, folder / wrapper)
    return folder / wrapper


def run_index(rounds: int, seconds: float, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Latency and throughput with the index against the no-index variant, then listings."""
    from tslock_django.worker.export import shipped_variables
    from tslock_django.worker.runtime import LocalWorker

    # The shipped Worker as the exported wrangler.jsonc runs it (shards, report delay), the
    # same with every change reported at once (what the delay saves), and the same
    # without index reports at all.
    shipped_vars = shipped_variables()
    at_once_vars = {**shipped_vars, "TSLOCK_REPORT_DELAY_MS": "0"}
    with tempfile.TemporaryDirectory(prefix="tslock-dobench-") as scratch:
        root = Path(scratch)
        shipped = LocalWorker(script=_variant(root / "shipped", None), variables=shipped_vars)
        at_once = LocalWorker(script=_variant(root / "at-once", None), variables=at_once_vars)
        bare = LocalWorker(script=_variant(root / "bare", "no_index.js"), variables=shipped_vars)
        with shipped, at_once, bare:
            workers = {"with index": shipped, "reports at once": at_once, "no index": bare}
            lock_path = _lock_path(workers, rounds, seconds)
        # One Worker per size, filled once, then measured in alternation: both sizes see
        # the machine's load alike (measured one after the other, a burst of load during
        # either distorts the ratio).
        with contextlib.ExitStack() as stack:
            fillers = {
                size: stack.enter_context(
                    LocalWorker(script=_variant(root / f"fill-{size}", "fill.js"), variables=shipped_vars)
                )
                for size in sizes
            }
            listing = _listing(fillers, rounds)
    return {
        **lock_path,
        "listing": listing,
        "shards": int(shipped_vars["TSLOCK_INDEX_SHARDS"]),
        "report_delay_ms": int(shipped_vars.get("TSLOCK_REPORT_DELAY_MS", "0")),
    }


def _provider(worker: Any, label: str) -> Any:
    from tslock_django.providers.cloudflare_do import DurableObjectLockProvider

    return DurableObjectLockProvider(label, url=worker.url, token=worker.token, timeout=10.0)


def _cycler(provider: Any, names: list[str]) -> Any:
    from tslock_django import LockConfiguration

    configs = [LockConfiguration(name, "1m") for name in names]
    position = [0]

    def cycle() -> None:
        config = configs[position[0] % len(configs)]
        position[0] += 1
        held = provider.lock(config)
        if held is None or not held.unlock():
            raise RuntimeError(f"{config.name}: the free lock was not granted or not released")

    return cycle


def _lock_path(workers: dict[str, Any], rounds: int, seconds: float) -> dict[str, Any]:
    providers = {
        label: [_provider(w, label) for _ in range(max(CLIENT_COUNTS))] for label, w in workers.items()
    }
    try:
        # Latency: what a caller waits for. One client, acquire+unlock on 64 distinct
        # names in turn, the variants alternating cycle by cycle, each cycle timed alone
        # and followed by a short pause, so that work a variant does after answering
        # (the report) is not charged to the next cycle; that work shows in throughput.
        cycles = {label: _cycler(ps[0], [f"lat-{i}" for i in range(64)]) for label, ps in providers.items()}
        samples: dict[str, list[float]] = {label: [] for label in cycles}
        for warm in cycles.values():
            for _ in range(20):
                warm()
        for turn in range(rounds * 20):
            for label in list(cycles) if turn % 2 == 0 else list(reversed(cycles)):
                started = time.perf_counter()
                cycles[label]()
                samples[label].append((time.perf_counter() - started) * 1000)
                time.sleep(LATENCY_PAUSE_S)
        latency = {
            label: {
                "median_ms": statistics.median(ms),
                "p10_ms": percentile(ms, 0.1),
                "p90_ms": percentile(ms, 0.9),
                "cycles": len(ms),
            }
            for label, ms in samples.items()
        }
        ms = {label: r["median_ms"] for label, r in latency.items()}
        throughput: dict[str, Any] = {}
        for clients in CLIENT_COUNTS:
            rates: dict[str, list[float]] = {label: [] for label in workers}
            for round_ in range(max(3, rounds // 3)):
                order = list(workers) if round_ % 2 == 0 else list(reversed(workers))
                for label in order:
                    rates[label].append(_parallel(providers[label][:clients], clients, seconds * 3, round_))
            throughput[str(clients)] = {label: summary(values) for label, values in rates.items()}
            cell = throughput[str(clients)]
            cell["with_over_without"] = cell["with index"]["median"] / cell["no index"]["median"]
            cell["at_once_over_without"] = cell["reports at once"]["median"] / cell["no index"]["median"]
    finally:
        for ps in providers.values():
            for p in ps:
                p.close()
    return {
        "latency": latency,
        "latency_ms_per_cycle": ms,
        "latency_with_over_without": ms["with index"] / ms["no index"],
        "latency_at_once_over_without": ms["reports at once"] / ms["no index"],
        "throughput_cycles_per_s": throughput,
    }


def _parallel(providers: list[Any], clients: int, seconds: float, round_: int) -> float:
    """Cycles per second of ``clients`` threads, each on 32 names of its own."""
    counts = [0] * clients
    stop = threading.Event()
    failures: list[BaseException] = []

    def client(index: int) -> None:
        cycle = _cycler(providers[index], [f"tp-{clients}-{index}-{j}" for j in range(32)])
        try:
            while not stop.is_set():
                cycle()
                counts[index] += 1
        except Exception as err:  # noqa: BLE001 - re-raised below, after the other threads stop
            failures.append(err)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"a client failed: {failures[0]!r}")
    return sum(counts) / elapsed


def _fill(api: httpx.Client, start: int, stop: int, now_ms: int, shards: int) -> None:
    batch = 2000
    for first in range(start, stop, batch):
        rows = []
        for i in range(first, min(first + batch, stop)):
            name = f"fill/{i % 4:02d}/{i:06d}"
            rows.append(
                {
                    "name": name,
                    "locked_at_ms": now_ms - i,
                    "lock_until_ms": now_ms + 3_600_000 + i,
                    "at_least_until_ms": now_ms,
                    "locked_by": "bench",
                    "fencing_token": 1,
                    "released": i % 3 == 0,
                    "token_fingerprint": "00000000",
                }
            )
        answer = api.post("/bench/fill", json={"shards": shards, "rows": rows})
        answer.raise_for_status()


def _listing(workers: dict[int, Any], rounds: int) -> dict[str, Any]:
    """A prefix page and the admin's first page on Workers whose index holds each size,
    timed in alternation between the sizes (the order flips every round)."""
    from tslock_django.core.query import LockQuery

    pages = {
        "prefix page": LockQuery(prefix="fill/03/", limit=100),
        "admin first page": LockQuery(order="name", limit=100),
    }
    sizes = sorted(workers)
    providers = {size: _provider(worker, f"listing-{size}") for size, worker in workers.items()}
    found: dict[str, Any] = {str(size): {} for size in sizes}
    timings: dict[int, dict[str, list[float]]] = {size: {label: [] for label in pages} for size in sizes}
    try:
        for size, worker in workers.items():
            with httpx.Client(
                base_url=worker.url, headers={"Authorization": f"Bearer {worker.token}"}, timeout=600
            ) as api:
                started = time.perf_counter()
                _fill(api, 0, size, int(time.time() * 1000), int(worker.variables["TSLOCK_INDEX_SHARDS"]))
                found[str(size)]["fill_seconds"] = round(time.perf_counter() - started, 2)
            for label, query in pages.items():
                # The provider's store call (one request, decoded and checked), without
                # the signed cursor, which needs Django settings and costs the same at
                # any size.
                page = providers[size]._query(query, None)
                if len(page.records) != 100 or not page.more:
                    raise RuntimeError(
                        f"{label} at {size}: {len(page.records)} records; the fill did not land"
                    )
        for round_ in range(max(rounds, 5) * 3):
            for size in sizes if round_ % 2 == 0 else sizes[::-1]:
                for label, query in pages.items():
                    t0 = time.perf_counter()
                    providers[size]._query(query, None)
                    timings[size][label].append((time.perf_counter() - t0) * 1000)
    finally:
        for provider in providers.values():
            provider.close()
    for size in sizes:
        for label, values in timings[size].items():
            found[str(size)][label] = {
                "median_ms": statistics.median(values),
                "p10_ms": percentile(values, 0.1),
                "p90_ms": percentile(values, 0.9),
            }
    small, large = found[str(sizes[0])], found[str(sizes[-1])]
    found["large_over_small"] = {
        label: large[label]["median_ms"] / small[label]["median_ms"] for label in pages
    }
    return found


def targets(do: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 10's targets for the index and issue 33's async floor, each with its
    measured value."""
    found: dict[str, Any] = {}
    asynchronous = (do or {}).get("async")
    if asynchronous:
        # Issue 33: against the raw floor of the same library, measured in the same run.
        found["durable objects: alock+release time <= 1.1x raw httpx.AsyncClient"] = target(
            asynchronous["alock_time_over_raw"], 1.1, "<="
        )
    index = (do or {}).get("index")
    if not index:
        return found
    found |= {
        "durable objects: acquire+unlock latency with the index <= 1.1x without": target(
            index["latency_with_over_without"], 1.1, "<="
        ),
        "durable objects: 16-client throughput with the index >= 0.9x without": target(
            index["throughput_cycles_per_s"]["16"]["with_over_without"], 0.9, ">="
        ),
    }
    sizes = [k for k in index["listing"] if k.isdigit()]
    for label, ratio in index["listing"]["large_over_small"].items():
        found[
            f"durable objects: {label} at {int(sizes[-1]):,} locks <= 1.5x its time at {int(sizes[0]):,}"
        ] = target(ratio, 1.5, "<=")
    return found


def render(do: dict[str, Any] | None) -> list[str]:
    lines: list[str] = []
    asynchronous = (do or {}).get("async")
    if asynchronous:
        ms = asynchronous["ms_per_cycle"]
        lines.append(
            f"  alock+release {ms['alock']:.3f} ms, raw httpx.AsyncClient {ms['raw-httpx-async']:.3f} ms "
            f"per cycle ({asynchronous['alock_time_over_raw']:.2f}x)"
        )
    index = (do or {}).get("index")
    if not index:
        return lines
    lines += [
        "",
        f"Durable Objects index ({index['shards']} shards, report delay {index['report_delay_ms']} ms) "
        "against the same Worker without index reports",
        "  acquire+unlock, one client, distinct names: "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in index["latency_ms_per_cycle"].items())
        + f" (with index {index['latency_with_over_without']:.2f}x, "
        f"reports at once {index['latency_at_once_over_without']:.2f}x)",
    ]
    for clients, r in index["throughput_cycles_per_s"].items():
        lines.append(
            f"  {clients:>2} clients: with index {r['with index']['median']:.0f} cycles/s "
            f"({r['with_over_without']:.2f}x), reports at once {r['reports at once']['median']:.0f} "
            f"({r['at_once_over_without']:.2f}x), without {r['no index']['median']:.0f}"
        )
    for size, r in index["listing"].items():
        if size.isdigit():
            pages = ", ".join(f"{k} {v['median_ms']:.1f} ms" for k, v in r.items() if isinstance(v, dict))
            lines.append(f"  {int(size):>6,} locks (filled in {r['fill_seconds']} s): {pages}")
    return lines
