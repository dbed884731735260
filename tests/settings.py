"""Test settings: the demo project plus one database alias per server this machine runs.

PostgreSQL and MariaDB are used when they answer (always when CI is set: then a missing
server fails the run instead of skipping its tests).
"""

from __future__ import annotations

import os
import socket

from testproject.settings import *  # noqa: F403
from testproject.settings import BASE_DIR

CI = bool(os.environ.get("CI"))
# One set of test databases per test run, so parallel runs on one machine (several
# checkouts, a benchmark beside the tests) never drop each other's tables.
RUN = f"tslock_{os.getpid()}"


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(BASE_DIR / "var" / "test-default.sqlite3"),
        # A file, not Django's shared in-memory database: threads and extra connections
        # then wait on SQLite's busy timeout instead of failing with "table is locked".
        "TEST": {"NAME": str(BASE_DIR / "var" / f"{RUN}.sqlite3")},
        "OPTIONS": {"timeout": 20},
    },
}
if CI or reachable("127.0.0.1", 5432):
    DATABASES["postgres"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "test",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        # Commits do not wait for the WAL to reach the disk (tests need no durability; other
        # sessions see a commit at once either way): the suite's database time was mostly fsync.
        "OPTIONS": {"options": "-c synchronous_commit=off"},
        "TEST": {"NAME": f"test_{RUN}", "DEPENDENCIES": []},
    }
if CI or reachable("127.0.0.1", 3306):
    try:
        import MySQLdb  # noqa: F401  (mysqlclient, the driver Django recommends, where it built)
    except ImportError:
        import pymysql

        pymysql.install_as_MySQLdb()
    DATABASES["mariadb"] = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "test",
        "USER": "root",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {
            "NAME": f"test_{RUN}",
            "CHARSET": "utf8mb4",
            "COLLATION": "utf8mb4_unicode_ci",
            "DEPENDENCIES": [],
        },
    }

# A database nobody listens for (port 9 is "discard", closed here): the provider must
# report it as a store failure. Tests reach it with django_db_blocker.unblock().
DATABASES["unreachable"] = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": "nothing",
    "USER": "postgres",
    "HOST": "127.0.0.1",
    "PORT": "9",
    # A configured password, which the journal's scrubber must mask wherever it shows
    # (tests/test_scrubbing.py); nothing ever connects far enough to send it.
    "PASSWORD": "unreachable-db-password",
    "OPTIONS": {"connect_timeout": 2},
    "TEST": {"DEPENDENCIES": []},
}

INSTALLED_APPS = [*INSTALLED_APPS, "tests.lockapp"]  # noqa: F405

TSLOCK_PROVIDERS = {"default": {"BACKEND": "tslock_django.providers.database.DatabaseLockProvider"}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The journal is on by default in a project; here it is off so that the tests of the
# lock itself need no database access and see no journal warning. tests/journal turns
# it on (override_settings) to test it.
TSLOCK_JOURNAL = None
