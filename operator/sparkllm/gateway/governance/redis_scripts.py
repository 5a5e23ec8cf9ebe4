"""The Lua scripts behind the Redis governance store: each store call is one script.

Why Lua: Redis runs one script at a time, to the end, so a script that reads a user's
counters, decides and writes is atomic across every gateway replica — two replicas can
never both see the last tokens of a budget as free. WATCH/MULTI would give the same
guarantee only with retries under contention, which is exactly when it matters.

The keys, all under one prefix that carries a hash tag (``sparkllm:{ns/cluster}``), so
they live in one slot and the scripts may build key names from the prefix::

    P:tokens:<window>:<start>:<user>  tokens charged or reserved in one aligned window
    P:rpm:<minute start>:<user>       requests admitted in one minute
    P:busy:<user>                     the user's requests in progress
    P:ticket:<ticket>                 hash: user, input, granted, reserved, keys (windows)
    P:leases                          zset: ticket -> lease deadline (server ms)
    P:slots                           zset: holder -> lease deadline (global in flight)
    P:ledger:<day>                    hash: <user>|requests|<outcome>, <user>|input|output
    P:days                            zset: days (days since 1970-01-01 UTC) with a ledger

Windows are aligned to the *caller's* clock (``AdmitRequest.now``, the rule store.py
states for every store); leases use the Redis server's clock (``TIME``), so a gateway
with a wrong clock cannot keep another's reservations alive or let them die early. A
window's key expires an hour after its window ends (tolerating that much clock skew
between gateways and Redis); the ledger never expires.

Round trips: a request costs two. ``ADMIT`` reserves the budget and, when the gateway
has a local slot free at once, takes the global slot too; ``SETTLE`` charges what was
used and releases a global slot. ``ACQUIRE_SLOT`` is the extra trip of a request that
queued (or found every global slot taken at admission); ``REFRESH`` runs once a third
of a lease per gateway, not per request.

A lease is refreshed while its request runs. One that expires (its gateway died) is
settled at what it reserved: the windows keep the reservation, the ledger counts the
request as ``expired`` with its input and granted output, the user's place is freed.
Every admit and refresh first settles up to ``SWEEP_BATCH`` expired leases.
"""

from __future__ import annotations

from typing import Final

EXPIRED_OUTCOME: Final = "expired"
WINDOW_GRACE_SECONDS: Final = 3600
SWEEP_BATCH: Final = 256
FIELD_SEPARATOR: Final = "|"  # user names are Secret data keys: [-._a-zA-Z0-9]+, never "|"

_PRELUDE = f"""
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ledger(prefix, day, user, outcome, input, output)
  local key = prefix .. ':ledger:' .. day
  redis.call('HINCRBY', key, user .. '|requests|' .. outcome, 1)
  redis.call('HINCRBY', key, user .. '|input', input)
  redis.call('HINCRBY', key, user .. '|output', output)
  redis.call('ZADD', prefix .. ':days', day, day)
end

local function release_user(prefix, user)
  local key = prefix .. ':busy:' .. user
  if redis.call('DECR', key) <= 0 then redis.call('DEL', key) end
end

-- Take one of `limit` global slots for `holder` (kept if it holds one): 1, or 0 if full.
-- Two calls while slots are free; lapsed slots are dropped only when the set looks full
-- (they can only make it look fuller than it is).
local function take_slot(slots, holder, limit, lease, now)
  if redis.call('ZCARD', slots) >= limit then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
    if not redis.call('ZSCORE', slots, holder) and redis.call('ZCARD', slots) >= limit then
      return 0
    end
  end
  redis.call('ZADD', slots, now + lease, holder)
  return 1
end

-- Settle reservations whose gateway stopped refreshing them, at what they reserved.
local function sweep(prefix, now)
  local leases = prefix .. ':leases'
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, {SWEEP_BATCH})
  local day = math.floor(now / 86400000)
  for _, ticket in ipairs(expired) do
    local key = prefix .. ':ticket:' .. ticket
    local held = redis.call('HMGET', key, 'user', 'input', 'granted')
    if held[1] then
      release_user(prefix, held[1])
      ledger(prefix, day, held[1], '{EXPIRED_OUTCOME}', held[2], held[3])
      redis.call('DEL', key)
    end
    redis.call('ZREM', leases, ticket)
  end
end
"""

# KEYS[1] = P:leases, KEYS[2] = P:slots. ARGV: prefix, ticket, user, slot holder ('': no
# slot asked), then: input, requested output, min output, max concurrent (-1: none),
# requests per minute (-1: none), minute start, lease ms, slot limit, window count, then
# per window: name, start, seconds, limit. (Each its own argument again: packed into one,
# as when redis-py encoded each argument slowly, the script spent ~10-20 us splitting it.)
# Returns {admitted (0/1), granted, in progress, requests this minute, slot taken (0/1),
# charged per window}: the state it decided on, so the caller explains a refusal with
# store.grant(). An admission never waits for the slot: all taken, it admits without.
ADMIT: Final = (
    _PRELUDE
    + f"""
local prefix, ticket, user, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local input, requested, min_output = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local max_busy, rpm, minute = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local lease, slot_limit, windows = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local now = now_ms()
sweep(prefix, now)
local busy_key = prefix .. ':busy:' .. user
local rpm_key = prefix .. ':rpm:' .. minute .. ':' .. user
-- A count whose limit is unset decides nothing: not read (still counted, below).
local busy, this_minute = 0, 0
if max_busy >= 0 then busy = tonumber(redis.call('GET', busy_key) or '0') end
if rpm >= 0 then this_minute = tonumber(redis.call('GET', rpm_key) or '0') end
local state = {{0, 0, busy, this_minute, 0}}
local refused = (max_busy >= 0 and busy >= max_busy) or (rpm >= 0 and this_minute >= rpm)
local granted = requested
local least = math.min(min_output, requested)  -- a request may ask for less than the minimum
local keys, ends = {{}}, {{}}
for i = 1, windows do
  local at = 13 + (i - 1) * 4  -- the window's name, start, seconds, limit follow
  local start = tonumber(ARGV[at + 2])
  keys[i] = prefix .. ':tokens:' .. ARGV[at + 1] .. ':' .. start .. ':' .. user
  ends[i] = start + tonumber(ARGV[at + 3])
  local charged = tonumber(redis.call('GET', keys[i]) or '0')
  state[5 + i] = charged
  local left = tonumber(ARGV[at + 4]) - charged - input
  if left < least or left <= 0 then refused = true end
  if left < granted then granted = left end
end
if refused then return state end
local reserved = input + granted
-- A key's expiry is fixed by its window: set once, when the key is made.
for i = 1, windows do
  if redis.call('INCRBY', keys[i], reserved) == reserved then
    redis.call('EXPIREAT', keys[i], ends[i] + {WINDOW_GRACE_SECONDS})
  end
end
if redis.call('INCR', rpm_key) == 1 then
  redis.call('EXPIREAT', rpm_key, minute + 60 + {WINDOW_GRACE_SECONDS})
end
redis.call('INCR', busy_key)
redis.call('HSET', prefix .. ':ticket:' .. ticket, 'user', user, 'input', input,
  'granted', granted, 'reserved', reserved, 'keys', table.concat(keys, ' '))
redis.call('ZADD', KEYS[1], now + lease, ticket)
state[1], state[2] = 1, granted
if holder ~= '' then state[5] = take_slot(KEYS[2], holder, slot_limit, lease, now) end
return state
"""
)

# KEYS[1] = P:leases, KEYS[2] = P:slots. ARGV: prefix, ticket, input tokens, output
# tokens, outcome, day, slot holder to release ('': none; released whatever the ticket).
# Returns 1 when settled, 0 for an unknown ticket (settled before, or expired and swept).
SETTLE: Final = (
    _PRELUDE
    + """
local prefix, ticket = ARGV[1], ARGV[2]
if ARGV[7] ~= '' then redis.call('ZREM', KEYS[2], ARGV[7]) end
local key = prefix .. ':ticket:' .. ticket
local held = redis.call('HMGET', key, 'user', 'reserved', 'keys')
if not held[1] then return 0 end
local input, output = tonumber(ARGV[3]), tonumber(ARGV[4])
local delta = input + output - tonumber(held[2])
if delta ~= 0 then
  for window in string.gmatch(held[3], '%S+') do
    if redis.call('EXISTS', window) == 1 then redis.call('INCRBY', window, delta) end
  end
end
release_user(prefix, held[1])
ledger(prefix, ARGV[6], held[1], ARGV[5], input, output)
redis.call('DEL', key)
redis.call('ZREM', KEYS[1], ticket)
return 1
"""
)

# KEYS[1] = P:leases, KEYS[2] = P:slots. ARGV: prefix, lease ms, ticket count, tickets...,
# holders... Extends the leases this gateway holds (never revives a lost one) and
# sweeps. Returns the tickets and holders no longer there (expired before this refresh).
REFRESH: Final = (
    _PRELUDE
    + """
local prefix, lease, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local lost = {}
for i = 4, #ARGV do
  local set = KEYS[1]
  if i > 3 + count then set = KEYS[2] end
  if redis.call('ZSCORE', set, ARGV[i]) then
    redis.call('ZADD', set, now + lease, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
sweep(prefix, now)
return lost
"""
)

# KEYS[1] = P:slots. ARGV: holder, limit, lease ms. 1: the holder has a slot; 0: all taken.
ACQUIRE_SLOT: Final = (
    _PRELUDE
    + """
return take_slot(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms())
"""
)

__all__ = [
    "ACQUIRE_SLOT",
    "ADMIT",
    "EXPIRED_OUTCOME",
    "FIELD_SEPARATOR",
    "REFRESH",
    "SETTLE",
    "SWEEP_BATCH",
    "WINDOW_GRACE_SECONDS",
]
