"""A management command in a process of its own, as cron runs one: with
``CHILD_SENTRY_DSN`` set, ``sentry_sdk.init`` first (as a project's settings would),
then ``manage.py ARGS`` on ``tests.monitors.child_settings``; it exits as manage.py does."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    dsn = os.environ.get("CHILD_SENTRY_DSN")
    if dsn:
        import sentry_sdk

        sentry_sdk.init(dsn=dsn)
    from django.core.management import execute_from_command_line

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.monitors.child_settings")
    execute_from_command_line(["manage.py", *sys.argv[1:]])
