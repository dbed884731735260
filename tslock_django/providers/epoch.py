"""Epoch times: milliseconds for both Cloudflare stores (JavaScript's ``Date.now()``),
microseconds for the database provider's SQL.

Both stores hand back numbers written by someone else (a Worker, another client of the
namespace), so reading them checks the range first: ``datetime`` stops at year 9999,
and a number past that must become a "malformed record" error, not an ``OverflowError``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ..core.durations import to_milliseconds

#: The Unix epoch, as an aware datetime.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The last millisecond a ``datetime`` can hold (9999-12-31T23:59:59.999Z).
MAX_EPOCH_MS = to_milliseconds(datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=timezone.utc) - EPOCH)


def to_epoch_ms(moment: datetime) -> int:
    """Whole milliseconds since the Unix epoch (rounded down), as JavaScript's ``Date``."""
    return to_milliseconds(moment - EPOCH)


def epoch_ms_in_range(value: int) -> bool:
    """Whether ``value`` is a time ``from_epoch_ms`` can represent: 1970 up to year 9999."""
    return 0 <= value <= MAX_EPOCH_MS


def from_epoch_ms(value: int) -> datetime:
    """The aware UTC datetime ``value`` milliseconds after the epoch.

    Raises:
        ValueError: ``value`` is outside :func:`epoch_ms_in_range` (callers that read a
            store check the range first and report a malformed record instead).
    """
    if not epoch_ms_in_range(value):
        raise ValueError(f"{value} epoch milliseconds is outside 1970..9999")
    return EPOCH + timedelta(milliseconds=value)


# Microseconds: how the database provider moves times between Python and SQL.
_MICROSECOND = timedelta(microseconds=1)
#: The last microsecond a ``datetime`` can hold.
MAX_EPOCH_US = (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc) - EPOCH) // _MICROSECOND


def to_epoch_us(moment: datetime) -> int:
    """Whole microseconds since the Unix epoch."""
    return (moment - EPOCH) // _MICROSECOND


def from_epoch_us(value: int) -> datetime:
    """The aware UTC datetime ``value`` microseconds after the epoch.

    Raises:
        ValueError: ``value`` is before 1970 or after year 9999.
    """
    if not 0 <= value <= MAX_EPOCH_US:
        raise ValueError(f"{value} epoch microseconds is outside 1970..9999")
    return EPOCH + timedelta(microseconds=value)
