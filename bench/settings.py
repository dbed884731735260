"""Settings of the benchmark processes.

One database server per process: ``BENCH_DB`` (``sqlite``, ``postgres`` or ``mariadb``)
becomes ``DATABASES["default"]``, because django-db-mutex always works on the default
alias. The benchmark creates its own database (``bench_tslock_<pid>``, or a SQLite file
under ``var/``) through Django's test-database machinery and drops it afterwards, so it
never touches the ``test`` databases or another run's tables.

Environment:
    BENCH_DB           sqlite | postgres | mariadb (default sqlite)
    BENCH_SQLITE_NAME  the SQLite file to use as is (start-up benchmark)
    BENCH_PROVIDER     db (default) | memory: the "default" lock provider
    BENCH_EDGE_URL     add a Durable Object provider "edge" (httpx import check)
    BENCH_DB_NAME      use this existing database as it is (a child of the scale benchmark)
    BENCH_JOURNAL      on (default, as in a project) | off: the run journal
    BENCH_SCHEDULED    on: bench_locked has a schedule (TSLOCK_SCHEDULES), so monitors ping it
    BENCH_MONITORS_URL TSLOCK_MONITORS (healthchecks) and TSLOCK_ALERTS (a webhook) at this URL
"""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import BASE_DIR, INSTALLED_APPS
from tslock_django.conf import parse_provider_url

SERVER = os.environ.get("BENCH_DB", "sqlite")
RUN = f"bench_tslock_{os.getpid()}"

if SERVER == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "test",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "TEST": {"NAME": RUN},
        }
    }
    # The same database with psycopg's own prepared statements (server-side binding; each
    # statement planned once per connection after five runs): the opt-in contenders.
    DATABASES["prepared"] = {
        **DATABASES["default"],
        "OPTIONS": {"server_side_binding": True, "prepare_threshold": 5},
    }
elif SERVER == "mariadb":
    try:
        import MySQLdb  # noqa: F401  (mysqlclient, the driver Django recommends; make bench builds it)
    except ImportError:
        import pymysql

        pymysql.install_as_MySQLdb()
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": "test",
            "USER": "root",
            "HOST": "127.0.0.1",
            "PORT": "3306",
            "OPTIONS": {"charset": "utf8mb4"},
            "TEST": {"NAME": RUN, "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
        }
    }
elif SERVER == "sqlite":
    fixed = os.environ.get("BENCH_SQLITE_NAME")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": fixed or str(BASE_DIR / "var" / "bench.sqlite3"),
            "TEST": {"NAME": fixed or str(BASE_DIR / "var" / f"{RUN}.sqlite3")},
            "OPTIONS": {"timeout": 20},
        }
    }
else:
    raise ValueError(f"BENCH_DB must be sqlite, postgres or mariadb, got {SERVER!r}")
if os.environ.get("BENCH_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["BENCH_DB_NAME"]

INSTALLED_APPS = [*INSTALLED_APPS, "db_mutex", "bench.benchapp"]
ROOT_URLCONF = "testproject.urls"

TSLOCK_PROVIDERS = {
    "default": parse_provider_url(
        "memory://" if os.environ.get("BENCH_PROVIDER") == "memory" else "db://default"
    )
}
if os.environ.get("BENCH_EDGE_URL"):
    TSLOCK_PROVIDERS["edge"] = parse_provider_url(os.environ["BENCH_EDGE_URL"])

TSLOCK_JOURNAL = None if os.environ.get("BENCH_JOURNAL") == "off" else {"using": "default"}
if os.environ.get("BENCH_SCHEDULED") == "on":
    TSLOCK_SCHEDULES = {"bench_locked": {"schedule": "1h"}}
if os.environ.get("BENCH_MONITORS_URL"):
    TSLOCK_MONITORS = {
        "healthchecks": {"url": os.environ["BENCH_MONITORS_URL"], "ping_key": "bench-ping-key"},
    }
    TSLOCK_ALERTS = {
        "channels": [
            {
                "BACKEND": "tslock_django.alerts.WebhookChannel",
                "OPTIONS": {"url": os.environ["BENCH_MONITORS_URL"] + "/webhook"},
            }
        ]
    }

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING = {"version": 1, "disable_existing_loggers": False}
# As in production: with DEBUG on, Django logs every statement (on SQLite by running
# one more statement per statement to quote its parameters), which no deployment pays.
DEBUG = False
