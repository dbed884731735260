"""``LockRecord``: one lock as a store reports it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, cast

LockState = Literal["held", "held_for_at_least", "expired"]


@dataclass(frozen=True)
class LockRecord:
    """A lock's state in one store.

    Attributes:
        name: the lock name as the caller gave it (without any key prefix).
        lock_until: when the lock stops being held (aware UTC).
        locked_at: when the current (or last) holder acquired it (aware UTC).
        locked_by: who acquired it (host and process by default); informative, not an
            ownership check.
        token: the holder's secret ownership id. Empty when the store does not reveal it
            (listings) or the lock was released. Never shown in a repr.
        fencing_token: a per-name number that grows with every acquisition, or ``None``
            for stores that cannot provide one (Workers KV).
        provider: the alias of the provider that reported the record.
        released: the holder released it and it is kept only for ``lock_at_least_for``.
        token_fingerprint: a short non-secret digest of the token, for display.
        unreadable: why the stored value could not be read as a record, or ``""``. Such a
            record (see :meth:`unreadable_row`) is a row in a listing, not a lock: its
            times are ``None``, so the admin and ``tslock list`` show its state as
            "unknown", and ``locked_by`` carries the reason.
    """

    name: str
    lock_until: datetime
    locked_at: datetime
    locked_by: str
    token: str = field(default="", repr=False)
    fencing_token: int | None = None
    provider: str = ""
    released: bool = False
    token_fingerprint: str = ""
    unreadable: str = ""

    @classmethod
    def unreadable_row(cls, name: str, provider: str, reason: str) -> LockRecord:
        """The listing row of a stored value under ``name`` that is not a readable
        record, saying ``reason``; its state is unknown (times ``None``)."""
        unknown = cast(datetime, None)
        return cls(
            name=name,
            lock_until=unknown,
            locked_at=unknown,
            locked_by=f"unreadable: {reason}",
            provider=provider,
            unreadable=reason,
        )

    def __post_init__(self) -> None:
        if self.token and not self.token_fingerprint:
            object.__setattr__(self, "token_fingerprint", fingerprint(self.token))

    def is_held(self, now: datetime) -> bool:
        """Whether the lock is still held at ``now`` (released-but-at-least counts)."""
        return self.lock_until > now

    def state(self, now: datetime) -> LockState:
        """``"held"``, ``"held_for_at_least"`` (released, kept until lock_until) or ``"expired"``."""
        if self.lock_until <= now:
            return "expired"
        return "held_for_at_least" if self.released else "held"


def token_digest(token: str) -> str:
    """The token's SHA-256 in lowercase hex (64 characters): what the database provider
    stores instead of the token, so that reading the table or its SQL log does not give
    the power to unlock or extend someone else's holding."""
    return hashlib.sha256(token.encode()).hexdigest()


def fingerprint(token: str) -> str:
    """The first 8 hex digits of the token's SHA-256 (:func:`token_digest`): enough to
    tell holders apart on a page, useless for taking the lock over."""
    return token_digest(token)[:8]
