"""What a channel is given: one change of a job's status (:class:`Notice`), and the one
method a channel has (:class:`Channel`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

#: The statuses a notice announces; ``ok`` is the way back from any of the others.
NOTIFIED_STATUSES = ("ok", "late", "failing", "running_long")


@dataclass(frozen=True)
class Notice:
    """One change of a job's status, as every channel is told it."""

    #: The job's lock name.
    name: str
    #: The new status and the one before it (:data:`NOTIFIED_STATUSES`).
    status: str
    previous: str
    #: Why, in a sentence, scrubbed of secrets.
    reason: str
    #: When the change was seen (aware, UTC).
    at: datetime
    last_started_at: datetime | None
    last_success_at: datetime | None
    #: The journal's id of the change: the same for every attempt to send it, so a
    #: receiver that got it twice (a send that timed out after it was delivered) can
    #: tell.
    id: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The body a webhook receives: times in ISO 8601, ``None`` when unknown."""

        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "name": self.name,
            "status": self.status,
            "previous": self.previous,
            "reason": self.reason,
            "at": iso(self.at),
            "last_started_at": iso(self.last_started_at),
            "last_success_at": iso(self.last_success_at),
        }


@runtime_checkable
class Channel(Protocol):
    """A place notices go: built once from its ``OPTIONS`` (as keyword arguments), then
    given each notice. ``send`` returns when the notice was accepted and raises any
    exception when it was not; the evaluator tries a failed notice again at its next
    evaluation, and never sends one that was accepted again."""

    def send(self, notice: Notice) -> None: ...
