"""Reading values that a store holds, which anyone with access to the store may have
written: the one size- and shape-checked decoder every provider reads records through.

A record is a few hundred bytes of JSON holding two times, a holder and a token. What
is not that must become a clear "this record is unreadable, because ..." (the
:class:`Unreadable` error, which providers turn into a ``LockProviderError`` for that
lock or an unreadable row in a listing), never a ``ValueError`` from a 5,000-digit
number, a ``RecursionError`` from deep nesting, or a 25 MiB string rendered into a page.

Limits (checked before anything is built from the value):

- at most :data:`MAX_RECORD_BYTES` bytes, UTF-8;
- nesting at most :data:`MAX_DEPTH` arrays/objects deep;
- numbers of at most :data:`MAX_NUMBER_CHARS` characters, finite (no ``NaN``,
  ``Infinity``, ``1e999``);
- epoch milliseconds from 1970 to year 9999; a fraction is accepted and rounded down
  (``@tslock/cloudflare-kv`` writes ``lockUntil: 1796051977497.7`` for a non-integer
  duration, and reads it as held);
- strings shown to people are cut to :data:`MAX_SHOWN_CHARS` (:func:`shown`), and a
  store's words in a message have their control characters escaped (:func:`visible`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The largest stored value read as a record. Records are well under 2 KiB.
MAX_RECORD_BYTES = 64 * 1024
#: The deepest nesting of arrays and objects accepted in a value.
MAX_DEPTH = 16
#: The longest number accepted (an epoch in milliseconds has 13 digits).
MAX_NUMBER_CHARS = 40
#: The longest string shown on a page or a terminal (a holder, a name in a message).
MAX_SHOWN_CHARS = 2048
#: The last millisecond a ``datetime`` can hold (9999-12-31T23:59:59.999Z).
MAX_EPOCH_MS = 253_402_300_799_999


class Unreadable(ValueError):
    """A stored value that is not a record this library can read; the message says why
    (never quoting the value, which may be huge or hold a token)."""


@dataclass(frozen=True)
class BadNumber:
    """A number no field can hold (too long, or not finite), in place of the number:
    what :func:`load_json` gives with ``mark_bad_numbers``, so that only the record
    holding it is unreadable, not the whole answer around it."""

    problem: str

    def __str__(self) -> str:
        return self.problem


def load_json(
    raw: bytes | str,
    *,
    max_bytes: int = MAX_RECORD_BYTES,
    max_depth: int = MAX_DEPTH,
    mark_bad_numbers: bool = False,
) -> Any:
    """The JSON value in ``raw``, within the limits above.

    Args:
        mark_bad_numbers: a number too long or not finite becomes a :class:`BadNumber`
            instead of failing the whole value (for answers holding many records).

    Raises:
        Unreadable: too large, not UTF-8, not JSON, too deep, or (unless
            ``mark_bad_numbers``) a number too long or not finite.
    """
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise Unreadable(f"the value is {size:,} bytes, more than the {max_bytes:,} a lock record can be")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Unreadable("the value is not UTF-8 text") from None
    else:
        text = raw
    depth = _depth(text)
    if depth > max_depth:
        raise Unreadable(f"the value nests {depth} levels deep, more than the {max_depth} accepted")
    try:
        if mark_bad_numbers:
            return json.loads(
                text,
                parse_int=_marked(_integer),
                parse_float=_marked(_fraction),
                parse_constant=_marked(_constant),
            )
        return json.loads(text, parse_int=_integer, parse_float=_fraction, parse_constant=_constant)
    except json.JSONDecodeError:
        raise Unreadable("the value is not JSON") from None


def _marked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_or_mark(text: str) -> Any:
        try:
            return parse(text)
        except Unreadable as err:
            return BadNumber(str(err).replace("the value holds ", "", 1))

    return parse_or_mark


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings: found without recursion, so a
    value a million brackets deep is measured, not followed."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _integer(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise Unreadable(f"the value holds a number of {len(text):,} digits")
    return int(text)


def _fraction(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise Unreadable(f"the value holds a number of {len(text):,} characters")
    value = float(text)
    if not math.isfinite(value):
        raise Unreadable("the value holds a number too large to be finite")
    return value


def _constant(text: str) -> float:
    raise Unreadable(f"the value holds {text}, which is not a number a record can hold")


def epoch_ms(value: Any, field: str) -> int:
    """``value`` as whole epoch milliseconds (a fraction rounded down).

    Raises:
        Unreadable: not a finite number, or outside 1970..9999.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unreadable(f"{field} is not a number of epoch milliseconds")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unreadable(f"{field} is not a finite number")
        value = math.floor(value)
    if not 0 <= value <= MAX_EPOCH_MS:
        raise Unreadable(f"{field} is not a time between 1970 and year 9999")
    return int(value)


def text(value: Any, field: str, *, max_chars: int = MAX_RECORD_BYTES) -> str:
    """``value`` if it is a string of at most ``max_chars`` characters.

    Raises:
        Unreadable: not a string, or longer.
    """
    if not isinstance(value, str):
        raise Unreadable(f"{field} is not a string")
    if len(value) > max_chars:
        raise Unreadable(f"{field} is {len(value):,} characters long, more than {max_chars:,}")
    return value


def shown(value: str, max_chars: int = MAX_SHOWN_CHARS) -> str:
    """``value`` cut to ``max_chars`` characters for display, saying how much was left out."""
    if len(value) <= max_chars:
        return value
    return f"{value[:max_chars]}... ({len(value) - max_chars:,} more characters)"


def visible(value: str) -> str:
    """``value`` with control, format and line-separator characters (ESC, CR, LF, bidi
    overrides) written as ``\\x..``/``\\u....`` escapes: a store's words end up in
    messages that ``tslock list`` prints on a terminal and that logs keep one per line."""
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in value)
