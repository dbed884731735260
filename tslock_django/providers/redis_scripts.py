"""The Lua side of the Redis provider: one script per operation, run atomically on the
server, and how they are run (``EVALSHA``, loaded again after ``NOSCRIPT``).

Keys, given ``key_prefix`` P (``tslock:`` by default):

- ``P records``: a hash, lock name -> the record as JSON: ``n`` name, ``u`` lock_until,
  ``a`` locked_at, ``l`` the at-least deadline (all epoch microseconds, as decimal
  strings), ``b`` locked_by, ``t`` token, ``f`` fencing token (decimal string), ``r``
  0 held / 1 released by its holder / 2 released by force.
- ``P fencing``: a hash, lock name -> the last fencing token handed out. Never deleted:
  not on expiry, not on force release, not by ``purge``.
- ``P by-name``, ``P by-lock-until``, ``P by-locked-at``: sorted sets of the names,
  scored 0 (listed by ``ZRANGEBYLEX``), by lock_until and by locked_at (microseconds;
  exact in a double until the year 2255). Every script that changes a record keeps
  them in step, so a listing is a range walk, never a ``SCAN`` of the keyspace.

Rules every script follows:

- Time is Redis's own (``TIME``): the caller sends durations, never moments.
- Numbers go into Redis as strings formatted here with ``%.0f``: Lua would write a
  number through ``%.14g`` and lose the last digits of a microsecond time.
- Strings are compared with ``==`` or byte by byte (``before``), never with ``<``:
  Lua's ``<`` on strings follows the server's locale (``strcoll``).
- Scripts start with a ``#!lua`` line (Redis 7): Redis then refuses a writing script on
  a read-only replica before running it, so even "held" is never answered from a
  replica's copy, and the effects (not the ``TIME`` call) are what replicas replay.

A fencing token is ``max(last token of the name + 1, Redis time in microseconds)``: the
counter makes tokens grow while Redis keeps its data, and the clock makes them grow past
a restart that lost it (the new time is later than every token handed out before).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError

from ..core.decode import MAX_RECORD_BYTES

# Helpers every script starts with.
_PRELUDE = (
    f"local MAX_RECORD_BYTES = {MAX_RECORD_BYTES}\n"
    + """
local function fmt(x) return string.format('%.0f', x) end
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- A record is JSON in one fixed layout, built here by concatenation (cjson.encode costs
-- more than the rest of a script) and read back with cjson.decode:
-- {"u":"..","r":0,"l":"..","a":"..","f":"..","t":"..","n":<JSON>,"b":<JSON>}
local function encode(u, r, l, a, f, t, n_json, b_json)
  return '{"u":"' .. u .. '","r":' .. r .. ',"l":"' .. l .. '","a":"' .. a .. '","f":"' .. f ..
    '","t":"' .. t .. '","n":' .. n_json .. ',"b":' .. b_json .. '}'
end
-- The record of lock `name` in raw, or nil for a value tslock did not write: larger
-- than a record can be, not JSON, a field missing or of another type, a time or token
-- that is not a number of at most 20 characters, or the record of another name.
local function readable(raw, name)
  if #raw > MAX_RECORD_BYTES then return nil end
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or type(rec) ~= 'table' or type(rec.u) ~= 'string' or type(rec.l) ~= 'string'
      or type(rec.a) ~= 'string' or type(rec.f) ~= 'string' or type(rec.t) ~= 'string'
      or type(rec.b) ~= 'string' or rec.n ~= name or not (rec.r == 0 or rec.r == 1 or rec.r == 2)
      or #rec.u > 20 or #rec.l > 20 or #rec.f > 20
      or not tonumber(rec.u) or not tonumber(rec.l) or not tonumber(rec.f) then
    return nil
  end
  return rec
end
-- u, r (a number), l, a, f, t of lock `name`; an error for a value tslock did not
-- write (the caller names the lock). A script that changes u, r or l keeps the rest of
-- the string as it is: u and r end at #u + 13, l at #u + #l + 20. (cjson.decode is
-- cheaper here than one string.match.)
local function decode(raw, name)
  local rec = readable(raw, name)
  if not rec or string.sub(raw, #rec.u + 7, #rec.u + 12) ~= '","r":' then
    error('tslock: the record is not one tslock wrote')
  end
  return rec.u, rec.r, rec.l, rec.a, rec.f, rec.t
end
-- A holding as the caller reads it: 'lock_until|locked_at|at-least|fencing|state|token|
-- locked_by' (split in C, cheaper than JSON; locked_by last, as it may hold a '|').
local function holding(u, a, l, f, r, t, b)
  return u .. '|' .. a .. '|' .. l .. '|' .. f .. '|' .. r .. '|' .. t .. '|' .. b
end
local function holding_of(raw)
  local rec = cjson.decode(raw)
  return holding(rec.u, rec.a, rec.l, rec.f, rec.r, rec.t, rec.b)
end
"""
)

ACQUIRE = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, fencing, by-name, by-lock-until, by-locked-at
-- ARGV: name, lock_at_most_for (us), lock_at_least_for (us), locked_by, token,
--       name as JSON, locked_by as JSON
-- Returns {1, holding} when acquired, {0, the holder's holding} when held.
local name, token = ARGV[1], ARGV[5]
local now = now_us()
local raw = redis.call('HGET', KEYS[1], name)
local last
if raw then
  local u, r, l, a, f, t = decode(raw, ARGV[1])
  if tonumber(u) > now then
    -- Our own token: this request already took the lock (a client library retried
    -- it after losing the answer); hand back the same holding.
    if t == token and r == 0 then return {1, holding_of(raw)} end
    return {0, holding_of(raw)}
  end
  -- The record's token is the name's counter: both are written together below.
  last = tonumber(f)
else
  -- A new name, or one purged: the counter hash still has its last token.
  redis.call('ZADD', KEYS[3], 0, name)
  last = tonumber(redis.call('HGET', KEYS[2], name) or '0')
end
local fencing = fmt(math.max(last + 1, now))
local lock_until, locked_at, at_least = fmt(now + tonumber(ARGV[2])), fmt(now), fmt(now + tonumber(ARGV[3]))
raw = encode(lock_until, 0, at_least, locked_at, fencing, token, ARGV[6], ARGV[7])
redis.call('HSET', KEYS[1], name, raw)
redis.call('HSET', KEYS[2], name, fencing)
redis.call('ZADD', KEYS[4], lock_until, name)
redis.call('ZADD', KEYS[5], locked_at, name)
return {1, holding(lock_until, locked_at, at_least, fencing, 0, token, ARGV[4])}
"""
)

UNLOCK = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-lock-until
-- ARGV: name, token
-- Returns 1 when our holding is released (kept until its at-least deadline), else 0.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local u, r, l, a, f, t = decode(raw, ARGV[1])
if t ~= ARGV[2] then return 0 end
-- Already released by this token: a retried request whose first answer was lost.
if r == 1 then return 1 end
if r ~= 0 then return 0 end
local now = now_us()
if tonumber(u) <= now then return 0 end
local lock_until = fmt(math.max(now, tonumber(l)))
redis.call('HSET', KEYS[1], ARGV[1], '{"u":"' .. lock_until .. '","r":1' .. string.sub(raw, #u + 14))
redis.call('ZADD', KEYS[2], lock_until, ARGV[1])
return 1
"""
)

EXTEND = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-lock-until
-- ARGV: name, token, lock_at_most_for (us), lock_at_least_for (us)
-- Returns the extended holding, or nil when it is no longer ours.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return nil end
local u, r, l, a, f, t = decode(raw, ARGV[1])
local now = now_us()
if t ~= ARGV[2] or r ~= 0 or tonumber(u) <= now then return nil end
local lock_until, at_least = fmt(now + tonumber(ARGV[3])), fmt(now + tonumber(ARGV[4]))
raw = '{"u":"' .. lock_until .. '","r":0,"l":"' .. at_least .. '"' .. string.sub(raw, #u + #l + 21)
redis.call('HSET', KEYS[1], ARGV[1], raw)
redis.call('ZADD', KEYS[2], lock_until, ARGV[1])
return holding_of(raw)
"""
)

FORCE_RELEASE = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-lock-until
-- ARGV: name, 'any' | 'fencing' | 'token', the expected value
-- Returns 1 when a held lock (or one kept for lock_at_least_for) was released, else 0.
-- The fencing counter is left alone: the next holder still gets a higher token.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local u, r, l, a, f, t = decode(raw, ARGV[1])
local now = now_us()
if tonumber(u) <= now then return 0 end
if ARGV[2] == 'fencing' and f ~= ARGV[3] then return 0 end
if ARGV[2] == 'token' and t ~= ARGV[3] then return 0 end
local released = fmt(now)
redis.call('HSET', KEYS[1], ARGV[1], '{"u":"' .. released .. '","r":2' .. string.sub(raw, #u + 14))
redis.call('ZADD', KEYS[2], released, ARGV[1])
return 1
"""
)

QUERY = (
    "#!lua flags=no-writes\n"
    + _PRELUDE
    + """
-- One page of a listing: walks one index from the cursor, filters server-side and
-- stops at limit + 1 records or after `budget` index entries, whichever comes first.
-- KEYS: records, the index (by-name, by-lock-until or by-locked-at), by-name, by-lock-until
-- ARGV: 1 order ('name' | 'lock_until' | 'locked_at'), 2 descending ('1' | '0'),
--       3 lower bound, 4 upper bound (ZRANGEBYLEX syntax for 'name'; unused otherwise),
--       5 after key (us, time orders; '' for none), 6 after name, 7 prefix,
--       8 search (ASCII-folded; '' for none), 9 states ('held,at_least,expired' as
--       three '1'/'0'), 10 limit, 11 budget
-- Returns {status, resume key, resume name, total, (name, key, record)...}: status 0 =
-- the range ended, 1 = more records, 2 = the budget ran out first (resume from the
-- resume key and name: the last index entry read); total = -1 when not cheap to
-- count. Each record comes with its index entry (name, and score or name: its place
-- in the walk). A value tslock did not write comes whatever states were asked for,
-- so the reader shows it as unreadable; one over MAX_RECORD_BYTES comes as its length.
local order, descending = ARGV[1], ARGV[2] == '1'
local prefix, search = ARGV[7], ARGV[8]
local want_held, want_at_least, want_expired =
  string.sub(ARGV[9], 1, 1) == '1', string.sub(ARGV[9], 2, 2) == '1', string.sub(ARGV[9], 3, 3) == '1'
local limit, budget = tonumber(ARGV[10]), tonumber(ARGV[11])
local now = now_us()

local LOWER = {}
for c = 65, 90 do LOWER[string.char(c)] = string.char(c + 32) end

-- a < b by bytes (Lua's own < follows the server's locale).
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function wanted_name(name)
  if #prefix > 0 and string.sub(name, 1, #prefix) ~= prefix then return false end
  if #search > 0 and not string.find((string.gsub(name, '[A-Z]', LOWER)), search, 1, true) then
    return false
  end
  return true
end

local function wanted_record(rec)
  if tonumber(rec.u) <= now then return want_expired end
  if rec.r == 0 then return want_held end
  return want_at_least
end

-- The range to read, and the keyset tie-break on the cursor's own score.
local time_order = order ~= 'name'
local lo, hi = ARGV[3], ARGV[4]
local after_key, after_name = tonumber(ARGV[5]), ARGV[6]
if time_order then
  lo, hi = '-inf', '+inf'
  local current_only = not want_expired
  local expired_only = want_expired and not want_held and not want_at_least
  if descending then
    if after_key then hi = fmt(after_key) end
    if order == 'lock_until' and current_only then lo = '(' .. fmt(now) end
    if order == 'lock_until' and expired_only and (not after_key or after_key > now) then
      hi, after_key = fmt(now), nil
    end
  else
    if after_key then lo = fmt(after_key) end
    if order == 'lock_until' and current_only and (not after_key or after_key <= now) then
      lo, after_key = '(' .. fmt(now), nil
    end
    if order == 'lock_until' and expired_only then hi = fmt(now) end
  end
end

local function read(offset, count)
  if time_order then
    if descending then
      return redis.call('ZREVRANGEBYSCORE', KEYS[2], hi, lo, 'WITHSCORES', 'LIMIT', offset, count)
    end
    return redis.call('ZRANGEBYSCORE', KEYS[2], lo, hi, 'WITHSCORES', 'LIMIT', offset, count)
  end
  if descending then return redis.call('ZREVRANGEBYLEX', KEYS[2], hi, lo, 'LIMIT', offset, count) end
  return redis.call('ZRANGEBYLEX', KEYS[2], lo, hi, 'LIMIT', offset, count)
end

local found, examined, offset = {}, 0, 0
local chunk = limit + 1
local status, resume_key, resume_name = 0, '', ''
while true do
  local entries = read(offset, chunk)
  local step = time_order and 2 or 1
  local n = #entries / step
  offset = offset + n
  local names, keys = {}, {}
  for i = 1, #entries, step do
    local name, score = entries[i], entries[i + 1]
    examined = examined + 1
    resume_name, resume_key = name, score or name
    local skip = false
    if after_key and tonumber(score) == after_key then
      -- Same score as the cursor's record: only names past it in the walk's direction.
      if descending then skip = not before(name, after_name) else skip = not before(after_name, name) end
    end
    if not skip and wanted_name(name) then
      names[#names + 1] = name
      keys[#keys + 1] = score or name
    end
  end
  if #names > 0 then
    local raws = redis.call('HMGET', KEYS[1], unpack(names))
    for i = 1, #raws do
      local raw = raws[i]
      if raw then
        local rec = readable(raw, names[i])
        if not rec or wanted_record(rec) then
          found[#found + 1] = {names[i], keys[i], #raw <= MAX_RECORD_BYTES and raw or #raw}
          if #found > limit then break end
        end
      end
    end
  end
  if #found > limit then status = 1 break end
  if n < chunk then status = 0 break end
  if examined >= budget then status = 2 break end
  chunk = math.min(chunk * 2, budget - examined)
end

local total = -1
if #prefix == 0 and #search == 0 then
  if want_held and want_at_least and want_expired then
    total = redis.call('ZCARD', KEYS[3])
  elseif want_held and want_at_least then
    total = redis.call('ZCOUNT', KEYS[4], '(' .. fmt(now), '+inf')
  elseif want_expired and not want_held and not want_at_least then
    total = redis.call('ZCOUNT', KEYS[4], '-inf', fmt(now))
  end
end
local reply = {status, resume_key, resume_name, total}
for i = 1, math.min(#found, limit + 1) do
  for j = 1, 3 do reply[#reply + 1] = found[i][j] end
end
return reply
"""
)

PURGE = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-name, by-lock-until, by-locked-at
-- ARGV: expired for (us), batch size, dry run ('1' | '0')
-- Deletes up to a batch of records whose lock_until is more than `expired for` in the
-- past (never a held lock nor one kept for lock_at_least_for); returns how many.
-- With dry run, counts them all instead. The fencing counters stay.
local cutoff = '(' .. fmt(now_us() - tonumber(ARGV[1]))
if ARGV[3] == '1' then return redis.call('ZCOUNT', KEYS[3], '-inf', cutoff) end
local names = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
if #names == 0 then return 0 end
redis.call('HDEL', KEYS[1], unpack(names))
redis.call('ZREM', KEYS[2], unpack(names))
redis.call('ZREM', KEYS[3], unpack(names))
redis.call('ZREM', KEYS[4], unpack(names))
return #names
"""
)


@dataclass(frozen=True)
class Script:
    """A Lua script and its SHA-1, run by ``EVALSHA`` (one round trip) and loaded once
    per server: after ``SCRIPT FLUSH`` or a restart the server answers ``NOSCRIPT``
    and :meth:`run` loads it and runs it again, once."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        # Redis names scripts by their SHA-1; it is an identifier here, not a safeguard.
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())

    def run(self, execute: Callable[..., Any], keys: Sequence[str], args: Sequence[object]) -> Any:
        """The script's answer, through ``execute`` (sends one command, returns its
        answer); redis-py errors pass through for the provider to turn into
        ``LockProviderError``."""
        try:
            return execute("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            execute("SCRIPT", "LOAD", self.source)
            return execute("EVALSHA", self.sha, len(keys), *keys, *args)


SCRIPTS = {
    "acquire": Script(ACQUIRE),
    "unlock": Script(UNLOCK),
    "extend": Script(EXTEND),
    "force_release": Script(FORCE_RELEASE),
    "query": Script(QUERY),
    "purge": Script(PURGE),
}
