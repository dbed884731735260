"""Server time of the admin's Locks page over a memory provider with 1,000 and 10,000
records (run in its own process: ``BENCH_PROVIDER=memory python -m bench.adminbench``)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

import django


def main(sizes: list[int], repeats: int) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_PROVIDER"] = "memory"
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from bench.stats import percentile
    from tslock_django import LockConfiguration, providers

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        from django.contrib.auth.models import User

        user = User.objects.create_superuser("bench", "bench@example.com", "bench")
        client = Client()
        client.force_login(user)
        url = reverse("admin:tslock_django_lock_changelist")
        results: dict[str, Any] = {}
        for size in sizes:
            providers.reset()
            provider = providers["default"]
            for i in range(size):
                assert provider.lock(LockConfiguration(f"job-{i:05}", "1h")) is not None
            pages = {"first page": url, "last page": f"{url}?p=999999", "search": f"{url}?q=job-0042"}
            for label, target in pages.items():
                samples = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    response = client.get(target)
                    samples.append((time.perf_counter() - started) * 1000)
                    if response.status_code not in (200, 302):
                        raise RuntimeError(f"{target}: HTTP {response.status_code}")
                results[f"{size} records, {label}"] = {
                    "median_ms": statistics.median(samples),
                    "p10_ms": percentile(samples, 0.1),
                    "p90_ms": percentile(samples, 0.9),
                    "samples": len(samples),
                    "status": response.status_code,
                    "bytes": len(response.content),
                }
        return {"unit": "server time per page (django.test.Client, superuser)", "results": results}
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    print(json.dumps(main([int(s) for s in sys.argv[1].split(",")], int(sys.argv[2]))))
