"""What the Locks page shows for one record, and the selection a release acts on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ..core.human import format_remaining as format_remaining  # admin.rows.format_remaining stays
from ..core.provider import check_fencing_token
from ..core.records import ListedRecord, UnreadableRecord
from ..core.times import format_time

#: The states a row can be in; "unknown" is a record whose times cannot be read.
STATES: dict[str, str] = {
    "held": "held",
    "held_for_at_least": "held for at-least",
    "expired": "expired",
    "unknown": "unknown",
}


@dataclass(frozen=True)
class Selection:
    """One lock picked for release, and the holding it must still be in.

    ``condition`` is ``"fencing"`` (``value`` is the fencing token, an int) or
    ``"fingerprint"`` (``value`` is the token fingerprint, a str, for stores without a
    fencing token: the store re-reads the holding and compares fingerprints itself).
    """

    alias: str
    name: str
    condition: str
    value: int | str

    def encode(self) -> str:
        return json.dumps([self.alias, self.name, self.condition, self.value], ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str) -> Selection:
        """Parse a checkbox value; ``ValueError`` for anything this page did not write."""
        try:
            alias, name, condition, value = json.loads(raw)
        except (TypeError, ValueError) as err:
            raise ValueError("not a lock selection") from err
        valid = (
            isinstance(alias, str)
            and isinstance(name, str)
            and name
            and (
                (condition == "fencing" and isinstance(value, int) and not isinstance(value, bool))
                or (condition == "fingerprint" and isinstance(value, str) and value)
            )
        )
        if not valid:
            raise ValueError("not a lock selection")
        return cls(alias, name, condition, value)

    @property
    def object_id(self) -> str:
        """The LogEntry object id: ``alias:name``."""
        return f"{self.alias}:{self.name}"

    def problem(self) -> str:
        """Why no store could release this selection, or ``""``: a fencing token out of
        the range stores keep (only an edited form posts one; the library would refuse it
        with the same words)."""
        if self.condition == "fencing" and isinstance(self.value, int):
            try:
                check_fencing_token(self.name, self.value)
            except ValueError as err:
                return str(err)
        return ""

    def describe_condition(self) -> str:
        if self.condition == "fencing":
            return f"fencing token {self.value}"
        return f"token fingerprint {self.value}"


@dataclass(frozen=True)
class LockRow:
    """A record as the page shows it, with everything computed against one ``now``."""

    alias: str
    guarantee: str
    record: ListedRecord
    state: str
    locked_at: datetime | None  # aware; None when unreadable
    lock_until: datetime | None
    remaining: timedelta | None
    progress: int | None  # percent of [locked_at, lock_until] elapsed, 0..100
    overdue: bool
    selection: Selection | None  # None: nothing to release conditionally on
    #: The name's history on the Runs page, when the journal has runs of it.
    runs_url: str = ""

    @property
    def locked_at_shown(self) -> str:
        return format_short_time(self.locked_at) if self.locked_at else "-"

    @property
    def lock_until_shown(self) -> str:
        return format_short_time(self.lock_until) if self.lock_until else "-"

    @property
    def locked_at_full(self) -> str:
        """With the UTC offset, for the cell's tooltip."""
        return format_time(self.locked_at) if self.locked_at else ""

    @property
    def lock_until_full(self) -> str:
        return format_time(self.lock_until) if self.lock_until else ""

    @property
    def state_label(self) -> str:
        return STATES[self.state]

    @property
    def remaining_label(self) -> str:
        return format_remaining(self.remaining)

    @property
    def advisory(self) -> bool:
        return self.guarantee == "advisory"

    @property
    def selection_value(self) -> str:
        return self.selection.encode() if self.selection else ""

    @property
    def release_refused(self) -> str:
        """Why this row cannot be selected for release, or ``""`` (see :func:`make_row`)."""
        if isinstance(self.record, UnreadableRecord):
            return UNREADABLE_RELEASE_REFUSED
        return ""


#: Shown on an unreadable row instead of a checkbox.
UNREADABLE_RELEASE_REFUSED = (
    "Not a lock record, so it cannot be released here: the store holds a value under this name "
    "that tslock cannot read (the reason is in the Held by column). Delete that value in the store, "
    "or give this project another key_prefix."
)


def format_short_time(value: datetime) -> str:
    """``"2026-11-30 18:02:11"`` in the current time zone (the page header names it):
    narrower than the ISO form with its offset, and it may wrap at the space."""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


def _aware(value: Any) -> datetime | None:
    if isinstance(value, datetime) and timezone.is_aware(value):
        return value
    return None


def make_row(alias: str, guarantee: str, record: ListedRecord, now: datetime) -> LockRow:
    """Compute what the page shows for one record.

    An :class:`~tslock_django.core.records.UnreadableRecord` (a value the store holds that
    is not a record) is shown with state "unknown", no times, the reason in the "Held
    by" column and no checkbox: it cannot be released from the admin. There is no
    holding to release conditionally (no fencing token, no token), and the value may
    belong to something else sharing the store, so this page never deletes what it
    cannot read; the row says to delete the value in the store or change
    ``key_prefix``. A release posted for such a name anyway (an edited form) reaches
    the store, which refuses to act on a value it cannot read (a ``LockProviderError``,
    shown as an error message). A record whose times are not aware datetimes (a
    custom provider's bug) is shown the same way, state "unknown", not releasable.
    """
    if isinstance(record, UnreadableRecord):
        return LockRow(alias, guarantee, record, "unknown", None, None, None, None, False, None)
    locked_at, lock_until = _aware(record.locked_at), _aware(record.lock_until)
    if locked_at is None or lock_until is None:
        # A store that answered a record without readable times: show it, but claim nothing.
        return LockRow(alias, guarantee, record, "unknown", None, None, None, None, False, None)
    state = record.state(now)
    remaining = lock_until - now
    span = (lock_until - locked_at).total_seconds()
    elapsed = (now - locked_at).total_seconds()
    progress = int(max(0.0, min(1.0, elapsed / span)) * 100) if span > 0 else 100
    selection: Selection | None = None
    fencing = record.fencing_token
    if isinstance(fencing, int) and not isinstance(fencing, bool):
        selection = Selection(alias, record.name, "fencing", fencing)
    elif record.token_fingerprint:
        selection = Selection(alias, record.name, "fingerprint", record.token_fingerprint)
    return LockRow(
        alias=alias,
        guarantee=guarantee,
        record=record,
        state=state,
        locked_at=locked_at,
        lock_until=lock_until,
        remaining=remaining,
        progress=progress,
        overdue=now >= lock_until,
        selection=selection,
    )
