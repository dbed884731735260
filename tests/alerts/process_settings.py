"""Settings of the ``manage.py`` processes the alerts' tests start: the demo project's,
with the channels the environment names (``ALERTS_URL``: a webhook receiver;
``ALERTS_FILE``: a file each notice is appended to, ``ALERTS_DELAY`` seconds a send)."""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403

_channels: list[dict[str, object]] = []
if os.environ.get("ALERTS_URL"):
    _channels.append(
        {"BACKEND": "tests.alerts.channels.Posting", "OPTIONS": {"url": os.environ["ALERTS_URL"]}}
    )
if os.environ.get("ALERTS_FILE"):
    _channels.append(
        {
            "BACKEND": "tests.alerts.channels.Appending",
            "OPTIONS": {
                "path": os.environ["ALERTS_FILE"],
                "delay": float(os.environ.get("ALERTS_DELAY", "0")),
            },
        }
    )
TSLOCK_ALERTS = {"channels": _channels}
