"""Check-ins to Sentry Crons through the installed ``sentry-sdk``.

``sentry_sdk.crons.capture_checkin``: ``in_progress`` when a run starts, ``ok`` or
``error`` (with its ``duration``) when it ends, under one ``check_in_id``; each carries a
``monitor_config`` made from the job's schedule, which Sentry upserts into the monitor
named by the slug, so the monitor follows the code. The SDK must be initialised
(``sentry_sdk.init``) by the project; tslock only uses the client it finds, and does
not import the SDK where the project has not (then nothing was initialised either, and
``tslock.W002`` says so).
"""

from __future__ import annotations

import importlib
import math
import sys
from datetime import timedelta
from typing import Any

from ..journal.schedules import Schedule
from .sender import forget_warning, sender, warn_once

#: Sentry's interval units, longest first, in seconds.
_UNITS = (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60))


def _minutes(value: timedelta) -> int:
    """Whole minutes, rounded up, at least one: Sentry counts margins in minutes."""
    return max(1, math.ceil(value.total_seconds() / 60))


def monitor_config(schedule: Schedule, default_zone: str) -> dict[str, Any]:
    """The ``monitor_config`` of a job with ``schedule``: its crontab (read in its
    ``tz``, else ``default_zone``) or its period as an interval in the longest unit that
    divides it (a period of whole seconds is rounded up to whole minutes, Sentry's least
    unit); ``checkin_margin`` from its grace and ``max_runtime`` from its
    ``max_duration``, in minutes rounded up; ``failure_issue_threshold`` from its
    ``failures_before_alert``."""
    config: dict[str, Any] = {}
    if schedule.period is None:
        config["schedule"] = {"type": "crontab", "value": schedule.text}
    else:
        seconds = math.ceil(schedule.period.total_seconds())
        value, unit = _minutes(schedule.period), "minute"
        for name, size in _UNITS:
            if seconds % size == 0:
                value, unit = seconds // size, name
                break
        config["schedule"] = {"type": "interval", "value": value, "unit": unit}
    config["timezone"] = schedule.tz or default_zone
    config["checkin_margin"] = _minutes(schedule.grace)
    if schedule.max_duration is not None:
        config["max_runtime"] = _minutes(schedule.max_duration)
    config["failure_issue_threshold"] = schedule.failures_before_alert
    return config


def _client_sdk() -> Any:
    """The ``sentry_sdk`` module when the process imported it and initialised a client,
    else ``None``."""
    sdk = sys.modules.get("sentry_sdk")
    get_client = getattr(sdk, "get_client", None)
    if get_client is None:
        return None
    return sdk if get_client().is_active() else None


def check_in(
    slug: str,
    status: str,
    check_in_id: str,
    config: dict[str, Any],
    duration: float | None = None,
) -> None:
    """One check-in (in the sender's thread); without an initialised SDK, a warning
    once and nothing sent."""
    sdk = _client_sdk()
    if sdk is None:
        warn_once(
            "sentry",
            "tslock: TSLOCK_MONITORS has 'sentry' but sentry-sdk is not initialised in this process "
            "(call sentry_sdk.init in settings); no check-ins are sent",
        )
        return
    crons = importlib.import_module("sentry_sdk.crons")
    crons.capture_checkin(
        monitor_slug=slug, check_in_id=check_in_id, status=status, duration=duration, monitor_config=config
    )
    forget_warning("sentry")
    # The SDK sends from a queue of its own: at exit, after ours, it gets what is left.
    sender().after_drain(_flush)


def _flush(seconds: float) -> None:
    sdk = _client_sdk()
    if sdk is not None:
        sdk.flush(timeout=seconds)
