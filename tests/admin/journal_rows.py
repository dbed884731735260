"""Journal rows for the Runs page tests, written straight into ``tslock_job`` and
``tslock_run`` so a test can say "last success two hours ago" without waiting."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Run
from tslock_django.journal.recorder import to_db

NOW = datetime.now(timezone.utc)
AGO = timedelta


def job(
    name: str,
    *,
    using: str = "default",
    schedule: str = "",
    grace: float | None = None,
    outcome: str = "",
    started: timedelta | None = None,
    duration: float | None = 1.5,
    success: timedelta | None = None,
    deadline: timedelta | None = None,
    detail: str = "",
    provider: str = "default",
    attempt: timedelta | None = None,
    attempt_outcome: str = "",
    first_seen: timedelta = timedelta(days=30),
    **counts: int,
) -> Job:
    """A ``Job`` row; times are given as "this long before now"."""

    def at(delta: timedelta | None) -> datetime | None:
        return to_db(NOW - delta) if delta is not None else None

    finished = None
    if started is not None and outcome not in ("", outcomes.RUNNING):
        finished = to_db(NOW - started + timedelta(seconds=duration or 0))
    return Job.objects.using(using).create(
        name=name,
        provider=provider,
        first_seen_at=to_db(NOW - first_seen),
        schedule=schedule,
        grace=grace,
        last_outcome=outcome,
        last_started_at=at(started),
        last_finished_at=finished,
        last_duration=None if outcome == outcomes.RUNNING else duration,
        last_deadline=to_db(NOW + deadline) if deadline is not None else None,
        last_detail=detail,
        last_success_at=at(success),
        last_attempt_at=at(attempt),
        last_attempt_outcome=attempt_outcome,
        **counts,
    )


def run(
    name: str,
    *,
    using: str = "default",
    outcome: str = outcomes.SUCCEEDED,
    started: timedelta = timedelta(hours=1),
    duration: float = 2.0,
    deadline: timedelta | None = None,
    **fields: Any,
) -> Run:
    """A ``Run`` row that started ``started`` ago."""
    begun = NOW - started
    ended = outcome not in (outcomes.RUNNING,)
    return Run.objects.using(using).create(
        name=name,
        provider=fields.pop("provider", "default"),
        outcome=outcome,
        started_at=to_db(begun),
        finished_at=to_db(begun + timedelta(seconds=duration)) if ended else None,
        duration=duration if ended else None,
        deadline=to_db(NOW + deadline) if deadline is not None else None,
        **fields,
    )
