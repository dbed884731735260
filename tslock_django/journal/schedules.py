"""Schedules: when a job is due, and how long after that it may still arrive.

A schedule is either a period (``"1h"``: due one period after its last success) or a
five-field cron expression (``"0 3 * * *"``: due at each matching minute, in the
schedule's ``tz``, an IANA zone, else ``settings.TIME_ZONE``). ``grace`` is how late a
job may be before it counts as late.

Daylight saving: a due time that a spring-forward skips is due once, at the first
minute after the gap (``30 2 * * *`` in Europe/Berlin on 2026-03-29: 03:00 local); one
that a fall-back repeats is due once, at its first occurrence (02:30 CEST on
2026-10-25). The journal keeps a cron schedule's zone in the stored text, in cronie's
``CRON_TZ=`` form (:attr:`Schedule.stored`), so every reader evaluates the zone the run
declared and names declared in different zones are told apart.

Cron expressions are evaluated by ``cronsim`` (by the author of healthchecks.io, which
uses it for exactly this question): it has no dependencies of its own, rejects what it
does not understand instead of guessing, iterates backwards (the last due time) as well
as forwards, and handles daylight-saving gaps and repeats. ``croniter`` was the other
candidate; it is larger and pulls in ``python-dateutil``.
"""

from __future__ import annotations

import itertools
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
#: What a stored schedule starts with when it names its zone (cronie's variable).
_ZONE_PREFIX = "CRON_TZ="
#: The longest stored schedule: the width of ``Job.schedule``.
STORED_LENGTH = 100
#: The keys of a ``TSLOCK_SCHEDULES`` entry.
ENTRY_KEYS = ("schedule", "grace", "tz", "failures_before_alert", "max_duration")


@dataclass(frozen=True)
class Schedule:
    """When a named job should run. Build it with :func:`parse_schedule`."""

    #: As written: a period or a cron expression.
    text: str
    #: The period, for a period schedule; ``None`` for cron.
    period: timedelta | None
    #: How late a run may be before the job is late.
    grace: timedelta
    #: Cron only: the IANA zone it is evaluated in; ``None``: ``settings.TIME_ZONE``.
    tz: str | None = None
    #: How many failed runs in a row make the job ``failing``.
    failures_before_alert: int = 1
    #: How long a run may go on before the job is ``running_long``; ``None``: no bound.
    max_duration: timedelta | None = None

    @property
    def is_cron(self) -> bool:
        return self.period is None

    def last_due(self, now: datetime) -> datetime | None:
        """Cron only: the latest due time at or before ``now`` (UTC), or ``None``."""
        if self.period is not None:
            return None
        return _cron_step(self.text, now, reverse=True, zone=self.tz)

    def next_due(self, after: datetime) -> datetime:
        """The first due time after ``after``: one period later, or the next match."""
        if self.period is not None:
            return after + self.period
        found = _cron_step(self.text, after, reverse=False, zone=self.tz)
        assert found is not None  # a valid expression always matches again
        return found

    @property
    def stored(self) -> str:
        """The text the journal keeps (``Job.schedule``): ``text``, preceded by
        ``CRON_TZ=<zone> `` when the schedule names its zone."""
        return f"{_ZONE_PREFIX}{self.tz} {self.text}" if self.tz else self.text

    def describe(self) -> str:
        zone = f" in {self.tz}" if self.tz else ""
        return f"{self.text}{zone} (grace {format_duration(self.grace)})"


def parse_schedule(
    schedule: object,
    grace: DurationLike | None = None,
    *,
    tz: object = None,
    failures_before_alert: object = None,
    max_duration: object = None,
    field: str = "schedule",
) -> Schedule:
    """Read ``schedule``, ``grace``, ``tz`` and the alert thresholds.

    Args:
        schedule: a period (``"1h"``, ``timedelta``, seconds) or a five-field cron string.
        grace: how late a run may be; by default a tenth of the period (for cron, of the
            time between two due times), at least one minute.
        tz: for a cron schedule, the IANA zone it is read in (``"Europe/Berlin"``);
            ``None``: ``settings.TIME_ZONE``, read when the schedule is evaluated.
        failures_before_alert: how many failed runs in a row make the job ``failing``
            (a whole number from 1; ``None``: 1).
        max_duration: how long a run may go on before the job is ``running_long`` (a
            duration; ``None``: no bound).
        field: the name the error messages use (e.g. ``TSLOCK_SCHEDULES['report']``).

    Raises:
        ValueError: the schedule, grace or zone is not one of the accepted forms (or a
            zone is given with a period); the message quotes the value and names the forms.
    """
    zone = _check_zone(tz, schedule, field) if tz is not None else None
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
        if zone is not None:
            raise ValueError(
                f"tz {tz!r} is given with the period {field} {schedule!r}; a period is counted from the "
                "last success in any zone: give tz only with a cron schedule"
            )
    if grace is None:
        spacing = period if period is not None else _cron_spacing(text, zone)
        chosen = max(MIN_GRACE, spacing / 10)
    else:
        try:
            chosen = parse_duration(grace, field="grace")
        except ValueError as err:
            raise ValueError(f"grace of {field} {schedule!r}: {err}") from None
    found = Schedule(
        text=str(text),
        period=period,
        grace=chosen,
        tz=zone,
        failures_before_alert=_check_failures(failures_before_alert, field),
        max_duration=_check_max_duration(max_duration, field),
    )
    if len(found.stored) > STORED_LENGTH:
        with_zone = " with its zone" if zone else ""
        raise ValueError(
            f"{field} {found.stored!r} is {len(found.stored)} characters{with_zone}; the journal keeps "
            f"at most {STORED_LENGTH}"
        )
    return found


def stored_schedule(stored: str, grace: DurationLike | None = None) -> Schedule:
    """A schedule as the journal keeps it (:attr:`Schedule.stored`), read back.

    Raises:
        ValueError: the text or its zone is not one this release accepts.
    """
    text, tz = stored, None
    if stored.startswith(_ZONE_PREFIX):
        tz, _, text = stored[len(_ZONE_PREFIX) :].partition(" ")
    return parse_schedule(text, grace, tz=tz)


def configured_schedules(settings_value: object) -> dict[str, Schedule]:
    """``TSLOCK_SCHEDULES`` read: ``{"lock-name": {"schedule": "...", "grace": "...", "tz": "..."}}``.

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
        unknown = set(entry) - set(ENTRY_KEYS)
        if unknown:
            raise ValueError(
                f"{where} has unknown keys {sorted(unknown)}; the keys are "
                + ", ".join(repr(key) for key in ENTRY_KEYS)
            )
        found[name] = parse_schedule(
            entry["schedule"],
            entry.get("grace"),
            tz=entry.get("tz"),
            failures_before_alert=entry.get("failures_before_alert"),
            max_duration=entry.get("max_duration"),
            field=f"{where}['schedule']",
        )
    return found


def _check_failures(value: object, field: str) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"failures_before_alert of {field} is {value!r}; give a whole number of failed runs in a "
            "row from 1 (1: alert on the first failure)"
        )
    return value


def _check_max_duration(value: object, field: str) -> timedelta | None:
    if value is None:
        return None
    try:
        bound = parse_duration(value, field=f"max_duration of {field}")  # type: ignore[arg-type]
    except ValueError as err:
        raise ValueError(str(err)) from None  # it names the field already
    except TypeError as err:
        raise ValueError(f"max_duration of {field}: {err}") from None
    if bound <= timedelta(0):
        raise ValueError(f"max_duration of {field} is {value!r}; give a positive duration, e.g. '30m'")
    return bound


def _check_cron(text: str, written: Any, field: str) -> None:
    from cronsim import CronSim, CronSimError

    try:
        CronSim(text, datetime(2000, 1, 1))
    except CronSimError as err:
        raise ValueError(
            f"{field} {written!r} is not a valid cron expression ({err}). Accepted: {_CRON_FORMS}"
        ) from None


def _check_zone(tz: object, schedule: object, field: str) -> str:
    accepted = "an IANA time zone name such as 'Europe/Berlin' or 'UTC' (zoneinfo)"
    if not isinstance(tz, str) or not tz.strip():
        raise ValueError(f"tz {tz!r} of {field} {schedule!r} is not a time zone name. Accepted: {accepted}")
    try:
        ZoneInfo(tz)
    except (ValueError, KeyError):  # ZoneInfoNotFoundError is a KeyError; a malformed key a ValueError
        raise ValueError(
            f"tz {tz!r} of {field} {schedule!r} is not a known time zone. Accepted: {accepted}"
        ) from None
    return tz


def _zone(name: str | None) -> ZoneInfo | timezone:
    from django.conf import settings

    name = name or getattr(settings, "TIME_ZONE", None) or "UTC"
    return timezone.utc if name == "UTC" else ZoneInfo(name)


#: How many matches a step reads past before giving up (a bound, never reached in use).
_STEP_LIMIT = 1_000


def _cron_step(text: str, start: datetime, *, reverse: bool, zone: str | None = None) -> datetime | None:
    """The next match after ``start`` (or, with ``reverse``, the latest at or before it),
    evaluated in ``zone`` (default ``settings.TIME_ZONE``) and returned in UTC.

    cronsim reads a wall time: started inside the second pass of a repeated hour it can
    answer a time before ``start`` going forwards, and miss the first pass going
    backwards. So the forward step skips answers not after ``start``, and the backward
    step walks forwards from its answer while a later match is still at or before ``start``.
    """
    if reverse:
        found = _cron_from(text, start, zone, reverse=True)
        for _ in range(_STEP_LIMIT):
            if found is None:
                break
            later = _cron_step(text, found, reverse=False, zone=zone)
            if later is None or later > start:
                break
            found = later
        return found
    return _cron_from(text, start, zone, reverse=False)


def _cron_from(text: str, start: datetime, zone: str | None, *, reverse: bool) -> datetime | None:
    from cronsim import CronSim

    start_utc = start.astimezone(timezone.utc)
    if not reverse:
        # cronsim yields times at or after its start; start one second on so that a
        # due time equal to ``start`` is not returned again.
        start_utc = start_utc.replace(microsecond=0) + timedelta(seconds=1)
    matches = CronSim(text, start_utc.astimezone(_zone(zone)), reverse=reverse)
    for found in itertools.islice(matches, _STEP_LIMIT):
        found_utc: datetime = found.astimezone(timezone.utc)
        if (found_utc <= start) if reverse else (found_utc > start):
            return found_utc
    return None  # pragma: no cover - an expression like "0 0 30 2 *" never matches


def _cron_spacing(text: str, zone: str | None = None) -> timedelta:
    """The shortest time between two consecutive due times over a sample week."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    previous = _cron_step(text, start, reverse=False, zone=zone)
    shortest = timedelta(days=366)
    for _ in range(8):
        if previous is None:
            break
        following = _cron_step(text, previous, reverse=False, zone=zone)
        if following is None:
            break
        shortest = min(shortest, following - previous)
        previous = following
    return shortest
