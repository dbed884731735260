"""An acquire answered in the reply of a plain ``UPDATE``, on MariaDB.

MariaDB's one-statement acquire is an upsert with ``RETURNING``, and on the server it
costs far more than the bare conditional ``UPDATE`` of ShedLock's floor: the insert
attempt that finds the row, the fencing mark's subquery and a six-column result set. An
``UPDATE`` cannot return rows there, but ``LAST_INSERT_ID(expr)`` hands one 64-bit
number back in the statement's own reply (the OK packet's insert id, the cursor's
``lastrowid``). That number carries what a grant must learn:

- with the caller's clock, the new fencing token (the times are the caller's own);
- with the database's clock, the new fencing token in the high 32 bits and the low 32
  bits of the statement's "now" in epoch microseconds. The low bits pin "now" down
  exactly within a window of 2^32 µs (71.6 minutes) around an estimate; the estimate
  is the caller's clock plus the offset to the database's clock learned from the last
  full answer (an upsert's row), good while the caller's clock has not stepped and
  for an hour at most. ``lock_until`` is "now" + ``lock_at_most_for`` in the same
  statement, so it follows exactly. A fencing token past 2^31 - 1 does not fit: the
  reply then carries 0 and the provider reads the row back.

When it is tried, and what happens when it takes nothing, is ``take_first``'s.
"""

from __future__ import annotations

import time

#: Low bits of "now" carried with the database's clock, and the fencing token's bits.
_TIME_BITS = 32
_WINDOW = 1 << _TIME_BITS
_TIME_MASK = _WINDOW - 1
#: The largest fencing token a reply can carry (the reply carries 0 beyond it).
MAX_CARRIED_FENCING = (1 << 31) - 1
#: How long a learned clock offset is trusted, in seconds of the monotonic clock.
_OFFSET_TRUSTED_FOR = 3600.0
#: How far the caller's wall clock may move against its monotonic clock before the
#: learned offset is dropped (a step of the caller's clock changes the offset).
_STEP_TOLERATED_US = 1_000_000


def carried_fencing(fencing: str, now_us: str | None) -> str:
    """The SQL of ``fencing_token``'s new value in the taking ``UPDATE``, setting
    ``LAST_INSERT_ID`` to what the reply carries. ``fencing`` is the column,
    ``now_us`` the SQL of the statement's "now" in epoch microseconds (``None`` with
    the caller's clock, whose times need no carrying).

    The value assigned stays ``fencing + 1``: ``0 * LAST_INSERT_ID(...)`` only sets
    what the reply carries (an argument is always evaluated; nothing folds it away)."""
    if now_us is None:
        return f"LAST_INSERT_ID({fencing} + 1)"
    packed = (
        f"IF({fencing} < {MAX_CARRIED_FENCING}, "
        f"(({fencing} + 1) << {_TIME_BITS}) | ({now_us} & {_TIME_MASK}), 0)"
    )
    return f"{fencing} + 1 + 0 * LAST_INSERT_ID({packed})"


#: A grant as the reply carried it: (locked_at, lock_until, fencing token), the times
#: in epoch microseconds. A plain tuple: no class to build when the module is imported.
Taken = tuple[int, int, int]


class ClockOffset:
    """The offset from the caller's wall clock to the database's, learned from full
    answers, and the decoding of carried grants with it."""

    def __init__(self) -> None:
        # (offset in µs, wall µs and monotonic s when learned); None: not known.
        self._offset: tuple[int, int, float] | None = None

    @property
    def trusted(self) -> bool:
        return self._trusted_offset() is not None

    def learn(self, db_now_us: int, sent_us: int, received_us: int) -> None:
        """Learn the offset from a full answer: the database's "now" of a statement
        sent and answered at these wall times of the caller. Half the round trip of
        error is nothing against the window the low bits decide in."""
        offset = db_now_us - (sent_us + received_us) // 2
        self._offset = (offset, received_us, time.monotonic())

    def _trusted_offset(self) -> int | None:
        learned = self._offset
        if learned is None:
            return None
        offset, wall_us, mono = learned
        elapsed = time.monotonic() - mono
        stepped = abs((wall_clock_us() - wall_us) - int(elapsed * 1_000_000)) > _STEP_TOLERATED_US
        if elapsed > _OFFSET_TRUSTED_FOR or stepped:
            self._offset = None
            return None
        return offset

    def decode(self, carried: int, sent_us: int, at_most_us: int) -> Taken | None:
        """The grant a reply carried with the database's clock, for a statement sent at
        ``sent_us``; ``None`` when it carried nothing usable (a fencing token too
        large, or no trusted offset), and the row must be read back."""
        offset = self._trusted_offset()
        if carried <= 0 or offset is None:
            return None
        estimate = sent_us + offset
        # The one instant with these low bits within half a window of the estimate.
        delta = ((carried & _TIME_MASK) - estimate) & _TIME_MASK
        if delta >= _WINDOW // 2:
            delta -= _WINDOW
        locked_at = estimate + delta
        return locked_at, locked_at + at_most_us, carried >> _TIME_BITS


def wall_clock_us() -> int:
    """The caller's wall clock in epoch microseconds."""
    return time.time_ns() // 1000
