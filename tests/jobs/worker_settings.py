"""Settings of the worker processes in tests/jobs (``db_worker``, ``celery worker``): the
demo project on the SQLite file ``DATABASE_URL`` names, which the test reads too, with
the journal on (the demo project's default) and django-tasks' database backend."""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks", "django_tasks.backends.database"]
TASKS = {"default": {"BACKEND": "django_tasks.backends.database.DatabaseBackend"}}
# Several workers write one SQLite file: wait for its lock rather than fail.
DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 30
LOGGING = {"version": 1, "disable_existing_loggers": False}
# The bench measures the journal's share of a task's cost by turning it off.
if os.environ.get("TSLOCK_BENCH_JOURNAL") == "off":
    TSLOCK_JOURNAL = None
