"""Settings of a child process that runs a locked command with monitors: the demo
project, the test commands, the journal on, and TSLOCK_MONITORS and TSLOCK_SCHEDULES
from the environment (JSON)."""

from __future__ import annotations

import json
import os

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.lockapp"]
TSLOCK_JOURNAL = {"using": "default"}
TSLOCK_MONITORS = json.loads(os.environ.get("CHILD_MONITORS", "null"))
TSLOCK_SCHEDULES = json.loads(os.environ.get("CHILD_SCHEDULES", "null"))
TIME_ZONE = "Europe/Paris"
