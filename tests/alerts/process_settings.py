"""Settings of the ``manage.py`` processes the alerts' tests start: the demo project's,
with the channels the environment names (``ALERTS_URL``: the webhook channel, signed
with ``ALERTS_SECRET``;
``ALERTS_FILE``: a file each notice is appended to, ``ALERTS_DELAY`` seconds a send)."""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403

_channels: list[dict[str, object]] = []
if os.environ.get("ALERTS_URL"):
    _channels.append(
        {
            "BACKEND": "tslock_django.alerts.WebhookChannel",
            "OPTIONS": {"url": os.environ["ALERTS_URL"], "secret": os.environ["ALERTS_SECRET"]},
        }
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
