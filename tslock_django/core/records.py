"""``LockRecord``: one lock as a store reports it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal, TypeAlias

from . import decode

LockState = Literal["held", "held_for_at_least", "expired"]
#: The state of a listed value that is not a readable record (:class:`UnreadableRecord`).
UnknownState = Literal["unknown"]


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

    A listing can also hold :class:`UnreadableRecord` rows (values the store holds that
    are not readable records); :data:`ListedRecord` is either.
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

    #: Always ``""``: a readable record (an :class:`UnreadableRecord` says why it is not).
    unreadable: ClassVar[str] = ""

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


@dataclass(frozen=True)
class UnreadableRecord:
    """A value a store holds under a lock name that is not a record this library can
    read (written by something else, truncated, hostile): a row in a listing, never a
    lock. Listings show it whatever states were asked for, so an operator sees it and
    can delete the value; the rest of the page is listed as usual.

    It has the attributes of a :class:`LockRecord` that a listing shows, with what is
    known: ``lock_until`` and ``locked_at`` are ``None`` (its times cannot be read),
    ``fencing_token`` is ``None``, ``token_fingerprint`` is ``""`` and ``released`` is
    ``False``. It has no ``is_held``: whether anyone holds the name is not known, and
    acquiring or releasing it raises ``LockProviderError`` until the value is removed.

    Attributes:
        name: the lock name the value is stored under (without the key prefix), escaped
            and cut for display when the store gave it in an unsafe form; ``""`` when
            the store gave no readable name.
        provider: the alias of the provider that listed it.
        reason: why it is not a record, in one sentence, control characters escaped
            and cut to a bounded length; never the value itself.
    """

    name: str
    provider: str
    reason: str

    lock_until: ClassVar[None] = None
    locked_at: ClassVar[None] = None
    fencing_token: ClassVar[None] = None
    token: ClassVar[str] = ""
    token_fingerprint: ClassVar[str] = ""
    released: ClassVar[bool] = False

    #: The longest reason kept: enough for a key, a field and what is wrong with it.
    max_reason_chars: ClassVar[int] = 600

    def __post_init__(self) -> None:
        # Whoever built the reason, what a page or a terminal shows of it is bounded
        # and has no control characters (a store's words may be in it).
        object.__setattr__(self, "reason", decode.shown(decode.visible(self.reason), self.max_reason_chars))

    @property
    def unreadable(self) -> str:
        """The reason (never empty): the check a template or script can make on any
        listed row."""
        return self.reason

    @property
    def locked_by(self) -> str:
        """``"unreadable: <reason>"``: what the "held by" column of the admin and
        ``tslock list`` shows for it (``tslock list --json`` gives ``null`` and the
        reason apart)."""
        return f"unreadable: {self.reason}"

    def state(self, now: datetime) -> UnknownState:
        """Always ``"unknown"``: its times cannot be read."""
        return "unknown"


#: A row of a listing: a record, or a stored value that is not one.
ListedRecord: TypeAlias = LockRecord | UnreadableRecord


def token_digest(token: str) -> str:
    """The token's SHA-256 in lowercase hex (64 characters): what the database provider
    stores instead of the token, so that reading the table or its SQL log does not give
    the power to unlock or extend someone else's holding."""
    return hashlib.sha256(token.encode()).hexdigest()


def fingerprint(token: str) -> str:
    """The first 8 hex digits of the token's SHA-256 (:func:`token_digest`): enough to
    tell holders apart on a page, useless for taking the lock over."""
    return token_digest(token)[:8]
