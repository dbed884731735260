"""Requests per Workers KV operation, counted by the in-process fake of the REST API."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def run() -> dict[str, Any]:
    from tests.kv.fake import FakeKVTransport
    from tslock_django import LockConfiguration
    from tslock_django.core.clock import MutableClock
    from tslock_django.core.query import LockQuery
    from tslock_django.providers.cloudflare_kv import KVLockProvider

    clock = MutableClock()
    kv = FakeKVTransport(clock, api_token="bench-token")

    def provider(**options: Any) -> KVLockProvider:
        return KVLockProvider(
            "kv",
            clock=clock,
            transport=kv,
            account_id=kv.account_id,
            namespace_id=kv.namespace_id,
            api_token="bench-token",
            acknowledge_advisory_lock=True,
            **options,
        )

    confirming, blind = provider(), provider(confirm_write=False)
    counts: dict[str, dict[str, int]] = {}

    def measure(label: str, operation: Any) -> Any:
        # KV takes one write per key per second: step the shared clock between writes.
        clock.advance(1.1)
        kv.reset_counts()
        result = operation()
        counts[label] = dict(kv.requests)
        return result

    job = LockConfiguration("job", "5m")
    held = measure("acquire (confirm_write=True)", lambda: confirming.lock(job))
    measure("acquire of a held lock", lambda: confirming.lock(job))
    held = measure("extend", lambda: held.extend("5m"))
    measure("unlock", held.unlock)
    held = measure("acquire (confirm_write=False)", lambda: blind.lock(job))
    measure("unlock (confirm_write=False)", held.unlock)
    for i in range(5000):
        record = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "bench", "token": f"t{i}"}
        kv.put_raw(f"tslock:job-{i:05}", json.dumps(record), metadata=record)
    listed = measure("list_locks of 5,000 locks", confirming.list_locks)
    assert len(listed) == 5000, len(listed)

    def ten_views(of: KVLockProvider) -> Any:
        return [of.query(LockQuery()) for _ in range(10)]

    clock.advance(60)  # past the listing cache: each figure starts cold
    measure("admin first page, ten views (5,000 locks)", lambda: ten_views(confirming))
    typescript = provider(key_prefix="ts:")
    for i in range(300):  # as @tslock/cloudflare-kv writes them: without metadata
        record = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "bench", "token": f"t{i}"}
        kv.put_raw(f"ts:job-{i:05}", json.dumps(record))
    measure("admin first page, ten views (300 keys without metadata)", lambda: ten_views(typescript))
    clock.advance(60)
    measure("list_locks of 300 keys without metadata", typescript.list_locks)
    typescript.close()
    confirming.close()
    blind.close()
    return {"requests": counts, "totals": {k: sum(v.values()) for k, v in counts.items()}}


if __name__ == "__main__":
    # Its own process with Django set up: listing cursors are signed with SECRET_KEY.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    print(json.dumps(run()), file=sys.stdout)
