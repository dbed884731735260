"""Takes a database lock, reports it, then sleeps until killed (``SIGKILL`` in the test).

``python -m tests.faults.crash_holder DATABASE_JSON NAME AT_MOST_SECONDS`` prints
``HELD <fencing_token> <lock_until ISO>``.
"""

from __future__ import annotations

import json
import sys
import time

import django
from django.conf import settings

if __name__ == "__main__":
    database = json.loads(sys.argv[1])
    if database["ENGINE"].endswith("mysql"):
        import pymysql

        pymysql.install_as_MySQLdb()
    settings.configure(DATABASES={"default": database}, INSTALLED_APPS=["tslock_django"], USE_TZ=True)
    django.setup()
    from tslock_django import LockConfiguration
    from tslock_django.providers.database import DatabaseLockProvider

    held = DatabaseLockProvider("default").lock(LockConfiguration(sys.argv[2], float(sys.argv[3])))
    if held is None:
        raise SystemExit("the lock was not free")
    print(f"HELD {held.fencing_token} {held.record.lock_until.isoformat()}", flush=True)
    time.sleep(600)
