"""A django-health-check check (the optional extra ``tslock-django[healthcheck]``):
every configured lock store answers, and no scheduled job is overdue.

A store is asked for one record of its current locks (one round trip; on Workers KV one
API request of its budget); a store that fails is ``ServiceUnavailable``. An overdue name
(late or failing, by the journal's rule, read in a few queries: :mod:`.journal.alerting`)
is ``ServiceReturnedUnexpectedResult``. Messages carry the library's own error texts, which
never hold a secret. How to add it to each django-health-check version:
``docs/reference/observability.md``.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError
from health_check.exceptions import ServiceReturnedUnexpectedResult, ServiceUnavailable

from .core.scrubbing import hide_secrets

try:  # django-health-check 4.x
    from health_check.base import HealthCheck as _Base
except ImportError:  # pragma: no cover - 3.x, whose base class moved between releases
    try:
        from health_check.backends import HealthCheck as _Base  # type: ignore[no-redef]
    except ImportError:
        from health_check.backends import BaseHealthCheckBackend as _Base  # type: ignore[no-redef]

#: At most this many overdue names are named in the message.
NAMED = 5


def problems() -> tuple[list[str], list[str], int]:
    """``(stores that failed, overdue names, how many are overdue)``, each failure and
    each of the first :data:`NAMED` overdue names (by name) as a line for the message."""
    from datetime import datetime, timezone

    from .conf import providers
    from .core.query import LockQuery
    from .exceptions import InvalidLockProvider, LockProviderError
    from .journal.alerting import Alerting, alerting
    from .journal.recorder import journal_database

    failed: list[str] = []
    try:
        aliases = providers.aliases()
    except InvalidLockProvider as err:
        return [f"TSLOCK_PROVIDERS is not configured correctly: {err}"], [], 0
    for alias in aliases:
        try:
            providers[alias].query(LockQuery(limit=1))
        except (LockProviderError, InvalidLockProvider) as err:
            text = str(err)  # the library's errors usually name their provider already
            failed.append(text if repr(alias) in text else f"lock provider {alias!r}: {text}")
    overdue: list[str] = []
    count = 0
    try:
        using = journal_database()
        now = datetime.now(timezone.utc)
        found = alerting(using, now, limit=NAMED) if using is not None else Alerting(0)
    except ValueError as err:
        failed.append(f"the run journal's settings: {err}")
    except DatabaseError as err:
        failed.append(f"the run journal could not be read ({type(err).__name__})")
    else:
        overdue = [f"{s.name} ({s.status})" for _, s in found.found]
        count = found.count
    return failed, overdue, count


class TslockHealthCheck(_Base):  # type: ignore[misc,valid-type]
    """Lock stores reachable, nothing overdue. No options: it checks every configured
    provider and the journal that ``TSLOCK_JOURNAL`` names."""

    def check(self) -> None:
        """Raise django-health-check's error for the first kind of problem found."""
        failed, overdue, count = problems()
        if failed:
            raise ServiceUnavailable(hide_secrets("; ".join(failed)))
        if count:
            shown = ", ".join(overdue[:NAMED])
            more = f" and {count - len(overdue[:NAMED])} more" if count > len(overdue[:NAMED]) else ""
            raise ServiceReturnedUnexpectedResult(
                f"{count} scheduled job{'s' if count != 1 else ''} overdue: {shown}{more}"
            )

    # django-health-check 4.x calls run() (in a thread: the ORM is synchronous).
    def run(self) -> None:
        self.check()

    # django-health-check 3.x calls check_status() through run_check().
    def check_status(self, subsets: Any = None) -> None:
        self.check()

    def __repr__(self) -> str:
        return "TslockHealthCheck"
