"""How the Redis provider reads what Redis answers: names and records as the scripts
write them (``scripts``), and the shape of each script's reply. An answer of
another shape raises ``TypeError``, which the provider reports as the server's failure
(never the value: an echo may hold what was sent)."""

from __future__ import annotations

import functools
import json
import re
from typing import Any


@functools.lru_cache(maxsize=1024)
def json_text(text: str) -> str:
    """``text`` as a JSON string (the scripts splice it into records); cached, as the
    same few lock names come back again and again."""
    return json.dumps(text, ensure_ascii=False)


#: The fixed start of a record (see ``scripts``), up to the name: the scripts read
#: the times, state and fencing token at these places.
HEAD = re.compile(
    r'\{"u":"[0-9]{16}","r":[012],"l":"[0-9]{16}","a":"[0-9]{16}","f":"[0-9]{1,20}","t":"[^"\\]*","n":'
)


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def index_name(raw: object) -> str:
    """A name as an index holds it, as text that :func:`wire` turns back into the same
    bytes: bytes that are not UTF-8 become surrogate escapes (only in a cursor position,
    never in a record's name)."""
    return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else str(raw)


def wire(text: str) -> bytes:
    """``text`` as Redis gets it: UTF-8, with :func:`index_name`'s escapes made bytes again."""
    return text.encode("utf-8", "surrogateescape")


# How the provider reads the scripts' answers (see ``RedisLockProvider._run``): an
# answer of another shape raises, and ``_run`` reports it as the server's failure.


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def flag(reply: object) -> bool:
    """A script's 1 (done) or 0 (not done)."""
    if is_int(reply) and reply in (0, 1):
        return reply == 1
    raise TypeError(f"expected 0 or 1, got {kind(reply)}")


def count(reply: object) -> int:
    if isinstance(reply, int) and not isinstance(reply, bool) and reply >= 0:
        return reply
    raise TypeError(f"expected a count, got {kind(reply)}")


def kind(reply: object) -> str:
    # Never the value: an echo may hold what was sent.
    return f"a {type(reply).__name__}"


def record_or_none(reply: object) -> object:
    """The extend script's record (a string) or nil."""
    if reply is not None and not isinstance(reply, (bytes, str)):
        raise TypeError(f"expected a record or nil, got {kind(reply)}")
    return reply


def acquire_answer(reply: object) -> object:
    """``{0 or 1, record}`` or the string ``'locked_at|fencing'`` (read further by the
    caller, which reports what it cannot read as a malformed record)."""
    if isinstance(reply, list):
        if len(reply) != 2 or not is_int(reply[0]) or reply[0] not in (0, 1):
            raise TypeError(f"expected {{0 or 1, record}}, got a list of {len(reply)}")
    elif not isinstance(reply, (bytes, str)):
        raise TypeError(f"expected a list or a string, got {kind(reply)}")
    return reply


def listing_answer(reply: object) -> list[Any]:
    """``{status, resume key, resume name, total, (name, key, record)...}``."""
    if not isinstance(reply, list) or len(reply) < 4 or (len(reply) - 4) % 3:
        raise TypeError("expected the listing script's list of a status and whole entries")
    status, total = reply[0], reply[3]
    if not (is_int(status) and status in (0, 1, 2) and is_int(total)):
        raise TypeError("expected a status of 0, 1 or 2 and a total")
    return reply
