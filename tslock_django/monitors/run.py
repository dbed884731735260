"""One run's pings: what the journal's recorder calls at a run's start and end.

:func:`watch` gives the monitor of a run of a scheduled job (``None`` when no monitor
is configured or the job has no schedule); its :meth:`RunMonitor.started` and
:meth:`RunMonitor.ended` queue the pings and return at once. Nothing here raises into
the job: a monitor's trouble is a warning in the log, never a change to the run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..core.scrubbing import hide_secrets
from ..journal import outcomes
from ..journal.schedules import Schedule, configured_schedules
from . import config, sentry
from .sender import send, warn_once
from .slug import slug_of

if TYPE_CHECKING:
    from .healthchecks import HealthchecksPinger

#: How a run ended, as the journal says it: (outcome, detail).
Ending = tuple[str, str]

# The pinger of the configured healthchecks options (it remembers which checks exist).
_pingers: dict[config.Healthchecks, HealthchecksPinger] = {}
# (the TSLOCK_SCHEDULES object, what it read)
_schedules: tuple[object, dict[str, Schedule]] | None = None


def watch(name: str, schedule: Schedule | None) -> RunMonitor | None:
    """The monitor of a run of ``name`` about to take its lock, or ``None``: no monitor
    configured, no schedule (the decorator's ``schedule``, or ``TSLOCK_SCHEDULES[name]``,
    which overrides it as it does for the journal's status), or a name that makes no slug.
    A malformed ``TSLOCK_MONITORS`` monitors nothing (``tslock.E012`` reports it) and is
    warned of once."""
    try:
        monitors = config.configured()
        if monitors is None:
            return None
        schedule = _scheduled().get(name, schedule)
        if schedule is None:
            return None
        slug = slug_of(name)
        if not slug:
            warn_once(
                f"slug:{name}",
                "tslock: the job %r is not pinged to its monitors: its name has none of the characters "
                "a monitor's slug may have (a-z, 0-9, '-', '_')",
                name,
            )
            return None
        return RunMonitor(slug, schedule, monitors)
    except Exception as err:  # noqa: BLE001 - whatever it is, the job must not notice
        warn_once("watch", "tslock: the job's monitors are not told of its runs (%s)", hide_secrets(str(err)))
        return None


def _scheduled() -> dict[str, Schedule]:
    global _schedules
    from django.conf import settings

    value = getattr(settings, "TSLOCK_SCHEDULES", None)
    known = _schedules
    if known is None or known[0] is not value:
        try:
            read = configured_schedules(value)
        except ValueError:  # tslock.E009 reports it; the decorator's schedule still holds
            read = {}
        known = _schedules = (value, read)
    return known[1]


def _pinger(options: config.Healthchecks) -> HealthchecksPinger:
    # Imported on first use: urllib.request is a cost a process without monitors never pays.
    from .healthchecks import HealthchecksPinger

    pinger = _pingers.get(options)
    if pinger is None:
        pinger = _pingers.setdefault(options, HealthchecksPinger(options))
    return pinger


class RunMonitor:
    """The pings of one run: one run id (healthchecks' ``rid``, Sentry's
    ``check_in_id``) for its start and its end."""

    def __init__(self, slug: str, schedule: Schedule, monitors: config.Monitors) -> None:
        from django.conf import settings

        self.slug = slug
        self.run_id = uuid.uuid4()
        self._started: float | None = None
        self._pinger = _pinger(monitors.healthchecks) if monitors.healthchecks is not None else None
        self._sentry_config: dict[str, Any] | None = None
        if monitors.sentry:
            zone = getattr(settings, "TIME_ZONE", None) or "UTC"
            self._sentry_config = sentry.monitor_config(schedule, zone)

    def started(self) -> None:
        """The lock is taken and the job starts: ``start`` and ``in_progress``."""
        try:
            self._started = time.monotonic()
            if self._pinger is not None:
                send(partial(self._pinger.ping, self.slug, "start", str(self.run_id)))
            if self._sentry_config is not None:
                send(partial(sentry.check_in, self.slug, "in_progress", self.run_id.hex, self._sentry_config))
        except Exception as err:  # noqa: BLE001 - the job must not notice
            warn_once(
                "start", "tslock: a run's start was not queued for its monitors (%s)", type(err).__name__
            )

    def ended(self, how: Callable[[], Ending]) -> None:
        """The run ended as ``how()`` says (the journal's outcome and detail; called
        here, so that nothing it raises reaches the job): success, or a failure ping
        with the detail (failed, error, lost). A run that never started (a store
        error) sends only its end."""
        try:
            outcome, detail = how()
            succeeded = outcome == outcomes.SUCCEEDED
            duration = time.monotonic() - self._started if self._started is not None else None
            if self._pinger is not None:
                kind = "success" if succeeded else "fail"
                body = "" if succeeded else detail or outcome
                send(partial(self._pinger.ping, self.slug, kind, str(self.run_id), body))
            if self._sentry_config is not None:
                status = "ok" if succeeded else "error"
                send(
                    partial(
                        sentry.check_in, self.slug, status, self.run_id.hex, self._sentry_config, duration
                    )
                )
        except Exception as err:  # noqa: BLE001 - the job must not notice
            warn_once("end", "tslock: a run's end was not queued for its monitors (%s)", type(err).__name__)
