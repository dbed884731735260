"""Lock+unlock cycles per second on Redis (run in its own process).

Usage: ``BENCH_REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.redisbench ROUNDS SECONDS``
prints one JSON object. Every contender runs on the redis-py client of the tslock
provider built from the URL (its connection pool, one command at a time), on a free
lock, under keys of this run's own prefix that are deleted afterwards:

- ``tslock``: ``RedisLockProvider.lock()`` then ``SimpleLock.unlock()``: two scripts
  (the acquire writes the record and two index entries, the unlock the record and one
  index entry), through that client (``register_script``);
- ``raw``: the floor: ``SET key token NX PX 60000`` and a Lua compare-and-delete run by
  ``EVALSHA``, through redis-py's client (which checks a connection out of the pool for
  each command, as every redis-py user's commands do);
- ``redis-py Lock``: ``client.lock(name, timeout=60, blocking=False)`` acquire and release
  (the same two commands as the floor, through redis-py's class);
- ``python-redis-lock``: ``redis_lock.Lock(client, name, expire=60)`` with
  ``acquire(blocking=False)`` and ``release()`` (``SET NX EX``, then a script that also
  signals waiters).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import uuid
from typing import Any

import django

DEFAULT_URL = "redis://127.0.0.1:6379/0"
#: Where ``make bench`` looks for Redis.
ADDRESS = ("127.0.0.1", 6379)
#: The floor's release: delete the key only if it still holds our token.
COMPARE_AND_DELETE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def main(rounds: int, seconds: float) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from tslock_django.providers.redis import RedisLockProvider

    prefix = f"bench-tslock-{os.getpid()}-{uuid.uuid4().hex[:6]}:"
    provider = RedisLockProvider(
        "bench", url=os.environ.get("BENCH_REDIS_URL", DEFAULT_URL), key_prefix=prefix
    )
    client = provider.client()
    try:
        from bench.stats import interleave, ratios

        results = interleave(build(provider, prefix), rounds=rounds, seconds=seconds)
        return {
            "server": f"Redis {client.info('server')['redis_version']}",
            "unit": "lock+unlock cycles per second",
            "results": results,
            "tslock_over": ratios(results, "tslock"),
        }
    finally:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
        provider.close()


def build(provider: Any, prefix: str) -> dict[str, Any]:
    import redis_lock

    from tslock_django import LockConfiguration

    client = provider.client()
    config = LockConfiguration("bench-tslock", "1m")

    def tslock_cycle() -> None:
        held = provider.lock(config)
        if held is None or not held.unlock():
            raise RuntimeError("tslock: the free lock was not granted or not released")

    release = client.register_script(COMPARE_AND_DELETE)
    client.script_load(COMPARE_AND_DELETE)
    raw_key = prefix + "raw"

    def raw_cycle() -> None:
        token = secrets.token_hex(16)
        if not client.set(raw_key, token, nx=True, px=60_000):
            raise RuntimeError("raw: the free lock was not granted")
        if release(keys=[raw_key], args=[token]) != 1:
            raise RuntimeError("raw: the lock was not released")

    def redis_py_cycle() -> None:
        lock = client.lock(prefix + "redis-py", timeout=60, blocking=False)
        if not lock.acquire():
            raise RuntimeError("redis-py Lock: the free lock was not granted")
        lock.release()

    def python_redis_lock_cycle() -> None:
        lock = redis_lock.Lock(client, prefix + "python-redis-lock", expire=60)
        if not lock.acquire(blocking=False):
            raise RuntimeError("python-redis-lock: the free lock was not granted")
        lock.release()

    return {
        "tslock": tslock_cycle,
        "raw": raw_cycle,
        "redis-py Lock": redis_py_cycle,
        "python-redis-lock": python_redis_lock_cycle,
    }


def targets(redis: dict[str, Any] | None) -> dict[str, Any]:
    """The Redis provider's targets: >= 0.9x the raw floor, >= 1.0x python-redis-lock."""
    if not redis:
        return {}
    found = {}
    for contender, bound in (("raw", 0.9), ("python-redis-lock", 1.0)):
        value = redis["tslock_over"][contender]
        found[f"redis: tslock >= {bound}x {contender}"] = {
            "value": round(value, 3),
            "bound": f">= {bound}",
            "met": value >= bound,
        }
    return found


def render(redis: dict[str, Any] | None) -> list[str]:
    """The Redis table (lines to add to the report)."""
    if not redis:
        return []
    lines = [
        "",
        f"{redis['server']}: lock+unlock cycles/s (median, p10-p90; tslock median / contender median)",
    ]
    for name, r in redis["results"].items():
        ratio = redis["tslock_over"].get(name)
        lines.append(
            f"  {name:<21} {r['median']:>8.0f} {r['p10']:>7.0f}-{r['p90']:<7.0f} "
            f"{'' if ratio is None else f'{ratio:.2f}x':>9}"
        )
    return lines


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), float(sys.argv[2]))))
