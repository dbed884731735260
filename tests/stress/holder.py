"""One contender of the contention tests, run as a real OS process.

``python -m tests.stress.holder SPEC_JSON``. It waits for the start file, then for each
round tries the lock once: when granted it notes the time, holds the lock briefly,
appends ``pid fencing_token start_ns end_ns`` to the shared log (one ``write`` on an
``O_APPEND`` file: lines from several processes never interleave) and releases; when
held elsewhere the round is skipped. It prints ``{"pid", "ran", "skipped"}`` at the end.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any


def provider_from(spec: dict[str, Any]) -> Any:
    import django
    from django.conf import settings

    if spec["kind"] == "db":
        if spec["database"]["ENGINE"].endswith("mysql"):
            import pymysql

            pymysql.install_as_MySQLdb()
        settings.configure(
            DATABASES={"default": spec["database"]},
            INSTALLED_APPS=["tslock_django"],
            USE_TZ=True,
            TSLOCK_PROVIDERS={
                "default": {"BACKEND": "tslock_django.providers.database.DatabaseLockProvider"}
            },
        )
        django.setup()
        from tslock_django import providers

        return providers["default"]
    settings.configure(USE_TZ=True, INSTALLED_APPS=["tslock_django"])
    django.setup()
    if spec["kind"] == "redis":
        from tslock_django.providers.redis import RedisLockProvider

        return RedisLockProvider("redis", url=spec["url"], key_prefix=spec["key_prefix"])
    from tslock_django.providers.cloudflare_do import DurableObjectLockProvider

    return DurableObjectLockProvider("edge", url=spec["url"], token=spec["token"])


def main(spec: dict[str, Any]) -> dict[str, int]:
    from tslock_django import LockConfiguration

    provider = provider_from(spec)
    config = LockConfiguration(spec["name"], "60s")
    log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    deadline = time.monotonic() + 60
    while not os.path.exists(spec["go"]):
        if time.monotonic() > deadline:
            raise SystemExit("the start file never appeared")
        time.sleep(0.005)
    ran = skipped = 0
    for _ in range(spec["rounds"]):
        held = provider.lock(config)
        if held is None:
            skipped += 1
        else:
            start = time.monotonic_ns()
            time.sleep(spec["hold_s"])
            end = time.monotonic_ns()
            os.write(log, f"{os.getpid()} {held.fencing_token} {start} {end}\n".encode())
            if not held.unlock():
                raise SystemExit(f"unlock of a lock this process held was refused: {held!r}")
            ran += 1
        time.sleep(random.uniform(0, spec["hold_s"]))
    os.close(log)
    provider.close()
    return {"pid": os.getpid(), "ran": ran, "skipped": skipped}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
