"""Schedules: when a job is due, and how long after that it may still arrive.

A schedule is either a period (``"1h"``: due one period after its last success) or a
five-field cron expression (``"0 3 * * *"``: due at each matching minute, in
``settings.TIME_ZONE``). ``grace`` is how late a job may be before it counts as late.

Cron expressions are evaluated by ``cronsim`` (by the author of healthchecks.io, which
uses it for exactly this question): it has no dependencies of its own, rejects what it
does not understand instead of guessing, iterates backwards (the last due time) as well
as forwards, and handles daylight-saving gaps and repeats. ``croniter`` was the other
candidate; it is larger and pulls in ``python-dateutil``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from ..core.durations import DurationLike, parse_duration
from ..core.human import format_duration

_CRON_FORMS = (
    "a period such as '15m', '1h' or '1d' (the duration grammar of lock_at_most_for), or a "
    "five-field cron expression such as '0 3 * * *' (minute hour day-of-month month day-of-week)"
)
#: The least grace a schedule gets when none is given: a job started by cron still
#: needs its interpreter, Django and its lock before it can succeed.
MIN_GRACE = timedelta(minutes=1)


@dataclass(frozen=True)
class Schedule:
    """When a named job should run. Build it with :func:`parse_schedule`."""

    #: As written: a period or a cron expression.
    text: str
    #: The period, for a period schedule; ``None`` for cron.
    period: timedelta | None
    #: How late a run may be before the job is late.
    grace: timedelta

    @property
    def is_cron(self) -> bool:
        return self.period is None

    def last_due(self, now: datetime) -> datetime | None:
        """Cron only: the latest due time at or before ``now`` (UTC), or ``None``."""
        if self.period is not None:
            return None
        return _cron_step(self.text, now, reverse=True)

    def next_due(self, after: datetime) -> datetime:
        """The first due time after ``after``: one period later, or the next match."""
        if self.period is not None:
            return after + self.period
        found = _cron_step(self.text, after, reverse=False)
        assert found is not None  # a valid expression always matches again
        return found

    def describe(self) -> str:
        return f"{self.text} (grace {format_duration(self.grace)})"


def parse_schedule(
    schedule: object, grace: DurationLike | None = None, *, field: str = "schedule"
) -> Schedule:
    """Read ``schedule`` and ``grace``.

    Args:
        schedule: a period (``"1h"``, ``timedelta``, seconds) or a five-field cron string.
        grace: how late a run may be; by default a tenth of the period (for cron, of the
            time between two due times), at least one minute.
        field: the name the error messages use (e.g. ``TSLOCK_SCHEDULES['report']``).

    Raises:
        ValueError: the schedule or grace is not one of the accepted forms; the message
            quotes the value and names the forms.
    """
    text = schedule.strip() if isinstance(schedule, str) else schedule
    period: timedelta | None = None
    if isinstance(text, str) and len(text.split()) > 1:
        fields = text.split()
        if len(fields) != 5:
            raise ValueError(
                f"{field} {schedule!r} has {len(fields)} fields; a cron schedule has five "
                f"(minute hour day-of-month month day-of-week). Accepted: {_CRON_FORMS}"
            )
        text = " ".join(fields)
        _check_cron(text, schedule, field)
    else:
        try:
            period = parse_duration(text, field=field)  # type: ignore[arg-type]
        except (ValueError, TypeError):
            raise ValueError(f"{field} {schedule!r} is not a schedule. Accepted: {_CRON_FORMS}") from None
        if period <= timedelta(0):
            raise ValueError(f"{field} {schedule!r} is a period of zero; give a positive period, e.g. '1h'")
        text = schedule if isinstance(schedule, str) else format_duration(period)
    if grace is None:
        spacing = period if period is not None else _cron_spacing(text)
        chosen = max(MIN_GRACE, spacing / 10)
    else:
        try:
            chosen = parse_duration(grace, field="grace")
        except ValueError as err:
            raise ValueError(f"grace of {field} {schedule!r}: {err}") from None
    return Schedule(text=str(text), period=period, grace=chosen)


def configured_schedules(settings_value: object) -> dict[str, Schedule]:
    """``TSLOCK_SCHEDULES`` read: ``{"lock-name": {"schedule": "...", "grace": "..."}}``.

    Raises:
        ValueError: an entry of the wrong shape or with a bad schedule or grace.
    """
    if settings_value is None:
        return {}
    if not isinstance(settings_value, Mapping):
        raise ValueError(
            "TSLOCK_SCHEDULES must be a dict of lock names to {'schedule': ..., 'grace': ...}, "
            f"got {type(settings_value).__name__}"
        )
    found: dict[str, Schedule] = {}
    for name, entry in settings_value.items():
        where = f"TSLOCK_SCHEDULES[{name!r}]"
        if not isinstance(name, str) or not name:
            raise ValueError(f"TSLOCK_SCHEDULES has a key {name!r}; keys are lock names (non-empty strings)")
        if not isinstance(entry, Mapping) or "schedule" not in entry:
            raise ValueError(
                f"{where} must be a dict with a 'schedule' (and optionally a 'grace'), got {entry!r}"
            )
        unknown = set(entry) - {"schedule", "grace"}
        if unknown:
            raise ValueError(
                f"{where} has unknown keys {sorted(unknown)}; the keys are 'schedule' and 'grace'"
            )
        found[name] = parse_schedule(entry["schedule"], entry.get("grace"), field=f"{where}['schedule']")
    return found


def _check_cron(text: str, written: Any, field: str) -> None:
    from cronsim import CronSim, CronSimError

    try:
        CronSim(text, datetime(2000, 1, 1))
    except CronSimError as err:
        raise ValueError(
            f"{field} {written!r} is not a valid cron expression ({err}). Accepted: {_CRON_FORMS}"
        ) from None


def _zone() -> ZoneInfo | timezone:
    from django.conf import settings

    name = getattr(settings, "TIME_ZONE", None) or "UTC"
    return timezone.utc if name == "UTC" else ZoneInfo(name)


def _cron_step(text: str, start: datetime, *, reverse: bool) -> datetime | None:
    """The next (or, with ``reverse``, the latest at or before) match from ``start``,
    evaluated in ``settings.TIME_ZONE`` and returned in UTC."""
    from cronsim import CronSim

    local = start.astimezone(_zone())
    if not reverse:
        # cronsim yields times at or after its start; start one second on so that a
        # due time equal to ``start`` is not returned again.
        local = local.replace(microsecond=0) + timedelta(seconds=1)
    try:
        found = next(iter(CronSim(text, local, reverse=reverse)))
    except StopIteration:  # pragma: no cover - an expression like "0 0 30 2 *" never matches
        return None
    return found.astimezone(timezone.utc)  # type: ignore[no-any-return]


def _cron_spacing(text: str) -> timedelta:
    """The shortest time between two consecutive due times over a sample week."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    previous = _cron_step(text, start, reverse=False)
    shortest = timedelta(days=366)
    for _ in range(8):
        if previous is None:
            break
        following = _cron_step(text, previous, reverse=False)
        if following is None:
            break
        shortest = min(shortest, following - previous)
        previous = following
    return shortest
