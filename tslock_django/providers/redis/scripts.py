"""The Lua side of the Redis provider: one script per operation, run atomically on the
server (sent by redis-py's ``register_script``: ``EVALSHA``, loaded again after
``NOSCRIPT``).

Keys, given ``key_prefix`` P (``tslock:`` by default):

- ``P records``: a hash, lock name -> the record as JSON in one fixed layout::

      {"u":"<lock_until>","r":<state>,"l":"<at-least deadline>","a":"<locked_at>",
       "f":"<fencing token>","t":"<token>","n":<name as JSON>,"b":<locked_by as JSON>}

  Times are epoch microseconds written as exactly 16 digits (zero-padded), and the
  state one digit (0 held / 1 released by its holder / 2 released by force), so the
  times and the state sit at fixed places: the lock scripts read them with
  ``string.sub``, which costs a fraction of ``cjson.decode``. The fencing token (a
  record's ``f``) is the name's counter while the record exists.
- ``P fencing``: a hash, lock name -> the last fencing token of a record that ``purge``
  deleted (a high-water mark). Never deleted. Acquiring a name that has no record
  continues from it.
- ``P by-name``, ``P by-lock-until``, ``P by-locked-at``: sorted sets of the names,
  scored 0 (listed by ``ZRANGEBYLEX``), by lock_until and by locked_at (microseconds;
  exact in a double until the year 2255). Every script that changes a record keeps
  them in step, so a listing is a range walk, never a ``SCAN`` of the keyspace.

Rules every script follows:

- Time is Redis's own (``TIME``): the caller sends durations, never moments.
- Numbers go into Redis as strings formatted here with ``%.0f`` / ``%016.0f``: Lua
  would write a number through ``%.14g`` and lose the last digits of a microsecond time.
- Strings are compared with ``==`` or byte by byte (``before``), never with ``<``:
  Lua's ``<`` on strings follows the server's locale (``strcoll``).
- Scripts start with a ``#!lua`` line (Redis 7): Redis then refuses a writing script on
  a read-only replica before running it, so even "held" is never answered from a
  replica's copy, and the effects (not the ``TIME`` call) are what replicas replay.

A fencing token is ``max(last token of the name + 1, Redis time in microseconds)``: the
record's (or, after a purge, the high-water mark's) last token makes tokens grow while
Redis keeps its data, and the clock makes them grow past a restart that lost it (the
new time is later than every token handed out before).
"""

from __future__ import annotations

from ...core.decode import MAX_RECORD_BYTES

# Helpers every script starts with. HEAD matches the fixed start of a record (see the
# module docstring) up to the name's JSON, and captures where the token's '","t":"'
# and the name's JSON start. Tokens tslock writes are hex: a quote or backslash in one
# means another writer.
_DIGITS16 = "%d" * 16
_HEAD = (
    f'^{{"u":"{_DIGITS16}","r":[012],"l":"{_DIGITS16}","a":"{_DIGITS16}",'
    + '"f":"%d+()","t":"[^"\\]*","n":()'
)
_COMMON = (
    f"local MAX_RECORD_BYTES = {MAX_RECORD_BYTES}\n"
    f"local HEAD = [==[{_HEAD}]==]"
    + r"""
local sub, find = string.sub, string.find
local function fmt(x) return string.format('%.0f', x) end
local function now_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
-- Where '","t":"' and the name's JSON start in a record in the fixed layout, or nil for
-- a value tslock did not write (too large, another layout, a fencing token of more
-- than 20 digits). A string match, much cheaper than cjson.decode.
local function head(raw)
  if #raw > MAX_RECORD_BYTES then return nil end
  local _, _, t_at, n_at = find(raw, HEAD)
  if t_at and t_at <= 102 then return t_at, n_at end
  return nil
end
-- The record of lock `name` decoded in full, or nil for a value tslock did not write:
-- not in the fixed layout, not JSON, a field missing or of another type, or the record
-- of another name.
local function readable(raw, name)
  if not head(raw) then return nil end
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or type(rec) ~= 'table' or type(rec.u) ~= 'string' or type(rec.l) ~= 'string'
      or type(rec.a) ~= 'string' or type(rec.f) ~= 'string' or type(rec.t) ~= 'string'
      or type(rec.b) ~= 'string' or rec.n ~= name or not (rec.r == 0 or rec.r == 1 or rec.r == 2) then
    return nil
  end
  return rec
end
"""
)

# And those the scripts that read and write one record add.
_PRELUDE = (
    _COMMON
    + r"""
-- A time in the record's fixed width; past 16 digits (the year 2286) the layout breaks.
local function time_text(us)
  if us >= 1e16 then error('tslock: a time past the year 2286 does not fit a record') end
  return string.format('%016.0f', us)
end
-- The record of lock `name` (n_json: the name as tslock writes it in JSON): its
-- lock_until as a number and where '","t":"' starts (the fencing token ends before
-- it, the token starts 7 bytes after it). An error for a value tslock did not write,
-- so that nobody reads it as held or free.
local function layout(raw, name, n_json)
  local t_at, n_at = head(raw)
  if not t_at then error('tslock: the record is not one tslock wrote') end
  local b_at = n_at + #n_json
  -- As tslock writes it: this name's JSON, then locked_by as a JSON string without
  -- escapes (its first quote, backslash or control character is its closing quote)
  -- ending the record.
  if not (sub(raw, n_at, b_at + 5) == n_json .. ',"b":"' and sub(raw, -2) == '"}'
      and find(raw, '[%c"\]', b_at + 6) == #raw - 1) then
    -- A name or locked_by with escapes (or another writer's value): only a full
    -- decode tells them apart, and only this uncommon case pays for it.
    if not readable(raw, name) then error('tslock: the record is not one tslock wrote') end
  end
  return tonumber(sub(raw, 7, 22)), t_at
end
local function has_token(raw, t_at, token)
  return sub(raw, t_at + 7, t_at + 7 + #token) == token .. '"'
end
"""
)

ACQUIRE = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, fencing, by-name, by-lock-until, by-locked-at
-- ARGV: name, lock_at_most_for (us), lock_at_least_for (us), token, name as JSON,
--       locked_by as JSON
-- Returns 'locked_at|fencing' when acquired (the caller knows the rest), the record
-- as {1, record} when this request had already acquired it, {0, record} when held.
local name, token = ARGV[1], ARGV[4]
local now = now_us()
local raw = redis.call('HGET', KEYS[1], name)
local last
if raw then
  local u, t_at = layout(raw, name, ARGV[5])
  if u > now then
    -- Our own token: this request already took the lock (a client library retried
    -- it after losing the answer); hand back the same holding.
    if sub(raw, 29, 29) == '0' and has_token(raw, t_at, token) then return {1, raw} end
    return {0, raw}
  end
  last = tonumber(sub(raw, 82, t_at - 1))
else
  -- A new name, or one purged: the purge kept its last token.
  redis.call('ZADD', KEYS[3], 0, name)
  last = tonumber(redis.call('HGET', KEYS[2], name) or '0')
end
if not last then error('tslock: the fencing mark in ' .. KEYS[2] .. ' is not a number') end
local locked_at = time_text(now)
local fencing = fmt(math.max(last + 1, now))
local lock_until = time_text(now + ARGV[2])
local at_least = ARGV[3] == '0' and locked_at or time_text(now + ARGV[3])
redis.call('HSET', KEYS[1], name, '{"u":"' .. lock_until .. '","r":0,"l":"' .. at_least .. '","a":"' ..
  locked_at .. '","f":"' .. fencing .. '","t":"' .. token .. '","n":' .. ARGV[5] .. ',"b":' .. ARGV[6] .. '}')
redis.call('ZADD', KEYS[4], lock_until, name)
redis.call('ZADD', KEYS[5], locked_at, name)
return locked_at .. '|' .. fencing
"""
)

UNLOCK = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-lock-until
-- ARGV: name, token, name as JSON
-- Returns 1 when our holding is released (kept until its at-least deadline), else 0.
local name = ARGV[1]
local raw = redis.call('HGET', KEYS[1], name)
if not raw then return 0 end
local u, t_at = layout(raw, name, ARGV[3])
if not has_token(raw, t_at, ARGV[2]) then return 0 end
local state = sub(raw, 29, 29)
-- Already released by this token: a retried request whose first answer was lost.
if state == '1' then return 1 end
if state ~= '0' then return 0 end
local now = now_us()
if u <= now then return 0 end
local lock_until = time_text(math.max(now, tonumber(sub(raw, 36, 51))))
redis.call('HSET', KEYS[1], name, '{"u":"' .. lock_until .. '","r":1' .. sub(raw, 30))
redis.call('ZADD', KEYS[2], lock_until, name)
return 1
"""
)

EXTEND = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-lock-until
-- ARGV: name, token, lock_at_most_for (us), lock_at_least_for (us), name as JSON
-- Returns the extended record, or nil when it is no longer ours.
local name = ARGV[1]
local raw = redis.call('HGET', KEYS[1], name)
if not raw then return nil end
local u, t_at = layout(raw, name, ARGV[5])
local now = now_us()
if not has_token(raw, t_at, ARGV[2]) or sub(raw, 29, 29) ~= '0' or u <= now then return nil end
local lock_until = time_text(now + ARGV[3])
raw = '{"u":"' .. lock_until .. '","r":0,"l":"' .. time_text(now + ARGV[4]) .. sub(raw, 52)
redis.call('HSET', KEYS[1], name, raw)
redis.call('ZADD', KEYS[2], lock_until, name)
return raw
"""
)

FORCE_RELEASE = (
    "#!lua\n"
    + _PRELUDE
    + """
-- KEYS: records, by-lock-until
-- ARGV: name, 'any' | 'fencing' | 'token', the expected value, name as JSON
-- Returns 1 when a held lock (or one kept for lock_at_least_for) was released, else 0.
-- The record keeps its fencing token: the next holder still gets a higher one.
local name = ARGV[1]
local raw = redis.call('HGET', KEYS[1], name)
if not raw then return 0 end
local u, t_at = layout(raw, name, ARGV[4])
local now = now_us()
if u <= now then return 0 end
if ARGV[2] == 'fencing' and sub(raw, 82, t_at - 1) ~= ARGV[3] then return 0 end
if ARGV[2] == 'token' and not has_token(raw, t_at, ARGV[3]) then return 0 end
local released = time_text(now)
redis.call('HSET', KEYS[1], name, '{"u":"' .. released .. '","r":2' .. sub(raw, 30))
redis.call('ZADD', KEYS[2], released, name)
return 1
"""
)

QUERY = (
    "#!lua flags=no-writes\n"
    + _COMMON
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
    + _COMMON
    + """
-- KEYS: records, fencing, by-name, by-lock-until, by-locked-at
-- ARGV: expired for (us), batch size, dry run ('1' | '0')
-- Deletes up to a batch of records whose lock_until is more than `expired for` in the
-- past (never a held lock nor one kept for lock_at_least_for); returns how many.
-- With dry run, counts them all instead. Each deleted record leaves its fencing token
-- in the fencing hash, from which the name continues when it is locked again.
local cutoff = '(' .. fmt(now_us() - tonumber(ARGV[1]))
if ARGV[3] == '1' then return redis.call('ZCOUNT', KEYS[4], '-inf', cutoff) end
local names = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
if #names == 0 then return 0 end
local raws = redis.call('HMGET', KEYS[1], unpack(names))
local marks = {}
for i = 1, #names do
  -- A value tslock did not write has no token to keep; it goes all the same.
  local t_at = raws[i] and head(raws[i])
  if t_at then
    marks[#marks + 1] = names[i]
    marks[#marks + 1] = sub(raws[i], 82, t_at - 1)
  end
end
if #marks > 0 then redis.call('HSET', KEYS[2], unpack(marks)) end
redis.call('HDEL', KEYS[1], unpack(names))
redis.call('ZREM', KEYS[3], unpack(names))
redis.call('ZREM', KEYS[4], unpack(names))
redis.call('ZREM', KEYS[5], unpack(names))
return #names
"""
)


#: The scripts by operation, as a provider registers them on its clients.
SCRIPTS = {
    "acquire": ACQUIRE,
    "unlock": UNLOCK,
    "extend": EXTEND,
    "force_release": FORCE_RELEASE,
    "query": QUERY,
    "purge": PURGE,
}
