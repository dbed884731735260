"""Settings of the worker processes in tests/jobs (``db_worker``, ``celery worker``): the
demo project on the SQLite file ``DATABASE_URL`` names, which the test reads too, with
the journal on (the demo project's default) and django-tasks' database backend."""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks", "django_tasks.backends.database"]
TASKS = {"default": {"BACKEND": "django_tasks.backends.database.DatabaseBackend"}}
# Several workers write one SQLite file: wait for its lock rather than fail. (The
# benchmark also runs these workers on PostgreSQL, which needs no such option.)
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 30
else:
    # A worker keeps its connection between tasks, as projects configure their workers;
    # with Django's default (0), Celery closes it after every task and each task that
    # touches the database pays for a new connection.
    DATABASES["default"]["CONN_MAX_AGE"] = 600
LOGGING = {"version": 1, "disable_existing_loggers": False}
# The bench measures the journal's share of a task's cost by turning it off.
if os.environ.get("TSLOCK_BENCH_JOURNAL") == "off":
    TSLOCK_JOURNAL = None
