"""How tslock shows a time to a person: one rule for the CLI, the admin and messages.

ISO 8601 to the second with the UTC offset, in the current Django time zone
(``timezone.localtime``): ``2026-11-30T18:02:11+01:00``. The offset makes a line
unambiguous whoever reads it and wherever it is pasted; the local zone makes it match the
clock of the person who reads it. A naive time (a store on a ``USE_TZ = False`` site) is
shown as it is, without an offset, because none is known.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def format_time(value: datetime) -> str:
    """``value`` as tslock shows it to people, e.g. ``2026-11-30T18:02:11+01:00``."""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return value.isoformat(timespec="seconds")
