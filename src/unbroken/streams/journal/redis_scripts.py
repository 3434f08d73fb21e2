"""The Lua scripts of ``RedisJournal``: each write is one script, so it lands whole or not at all.

Redis runs a script atomically but does not roll back what a script wrote before an error, so
every script checks everything first and writes after. Keys (``P`` is the journal's prefix, the
stream id in braces so that one stream's keys share a hash slot)::

    P{id}:s   hash: meta, state (JSON), status, top (last frame's seq), token, cred, idem,
              owner, expires
    P{id}:f   stream of frames, entry id 0-<seq>: e (event, absent for None), d (data),
              t (text, absent when empty), a (receive time, epoch seconds; absent: unknown)
    P{id}:e   stream of ends: an entry each time the stream reaches an end state (wakes the
              readers blocked in other processes)
    P{id}:x   string: the stream's text so far (APPEND per frame)
    P{id}:t   hash: a purged stream's tombstone (token, cred)
    Punfinished        set of ids whose status is not an end state
    Pupdated           sorted set: id by its last update (retention)
    Ptombstones        sorted set: id by the time it was purged
    Pcreated           sorted set: id by its creation time (listings, newest first)
    Pcreated:<cred>    sorted set: the ids a credential (its hash) created, by creation time
    Pidem:<hash>       string: the newest stream created with that idempotency hash
    Powner:<owner>     set: ids whose lease ``owner`` holds
"""

from __future__ import annotations

from typing import Final

__all__ = ["ANSWERED", "APPEND", "CLAIM", "CREATE", "DISCARD", "PURGE", "PURGE_TOMBSTONES",
           "RELEASE", "RENEW", "SET_LEASE"]

# KEYS: s, unfinished, updated, idem ('' for none), owner set ('' for none), created,
#       the credential's created ('' for none)
# ARGV: id, meta, state, status, token, cred, owner, expires, updated, ended, idem hash, created
CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('EXISTS stream ' .. ARGV[1] .. ' exists')
end
redis.call('HSET', KEYS[1], 'meta', ARGV[2], 'state', ARGV[3], 'status', ARGV[4], 'top', 0,
           'token', ARGV[5], 'cred', ARGV[6], 'owner', ARGV[7], 'expires', ARGV[8],
           'idem', ARGV[11])
redis.call('ZADD', KEYS[3], ARGV[9], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[12], ARGV[1])
if KEYS[7] ~= '' then redis.call('ZADD', KEYS[7], ARGV[12], ARGV[1]) end
if ARGV[10] == '0' then redis.call('SADD', KEYS[2], ARGV[1]) end
if KEYS[4] ~= '' then redis.call('SET', KEYS[4], ARGV[1]) end
if KEYS[5] ~= '' then redis.call('SADD', KEYS[5], ARGV[1]) end
return 1
"""

# One group commit: every append of one turn of the event loop, in one script call (a command
# per append cost the proxy more CPU than the append itself). ARGV: prefix, then the appends as
# netstrings ("<length>:<bytes>"), each: id, state JSON ('' = progress only: keep the stored
# state, the frames tell the last seq), status, updated, ended ('1'/'0'), n, then n times: seq,
# event ('' or '=' .. name), data, text, receive time ('' = unknown). Each append is checked
# whole, then written; a refused one does not stop the others. Returns, per append, the
# stream's new last seq or the refusal.
APPEND: Final = """
local p, blob, pos = ARGV[1], ARGV[2], 1
local function take()
  local colon = string.find(blob, ':', pos, true)
  local size = tonumber(string.sub(blob, pos, colon - 1))
  pos = colon + size + 1
  return string.sub(blob, colon + 1, colon + size)
end
-- The same frames again (redis-py resends a command whose reply a dropped connection lost,
-- receive times and all): stored by the first call, so this one is a no-op; anything else
-- stored there is a conflict.
local function stored_already(key, frames)
  local n = #frames
  local entries = redis.call('XRANGE', key, '0-' .. frames[1][1], '0-' .. frames[n][1])
  if #entries ~= n then return false end
  for k = 1, n do
    local fields, got = entries[k][2], {}
    for i = 1, #fields, 2 do got[fields[i]] = fields[i + 1] end
    local frame = frames[k]
    local event = frame[2] ~= '' and string.sub(frame[2], 2) or nil
    local text = frame[4] ~= '' and frame[4] or nil
    local at = frame[5] ~= '' and frame[5] or nil
    if got['d'] ~= frame[3] or got['e'] ~= event or got['t'] ~= text or got['a'] ~= at then
      return false
    end
  end
  return true
end
local results = {}
while pos <= #blob do
  local id, state, status, updated, ended = take(), take(), take(), take(), take()
  local n = tonumber(take())
  local frames = {}
  for k = 1, n do frames[k] = {take(), take(), take(), take(), take()} end
  local base = p .. '{' .. id .. '}:'
  local h = redis.call('HMGET', base .. 's', 'top', 'status')
  local top = tonumber(h[1])
  local refused, landed = nil, false
  if not top then
    refused = 'NOSTREAM unknown stream ' .. id
  elseif n > 0 and tonumber(frames[n][1]) <= top then
    landed = stored_already(base .. 'f', frames)
    if not landed then
      refused = 'BADSEQ stream ' .. id .. ': seq ' .. frames[1][1] ..
                ' is stored already, with other data'
    end
  else
    for k = 1, n do
      if tonumber(frames[k][1]) ~= top + k then
        refused = 'BADSEQ stream ' .. id .. ': seq ' .. frames[k][1] ..
                  ', expected the next after ' .. (top + k - 1)
        break
      end
    end
  end
  if refused then
    table.insert(results, refused)
  elseif landed then
    table.insert(results, top)
  else
    for k = 1, n do
      local frame = frames[k]
      local fields = {'d', frame[3]}
      if frame[2] ~= '' then
        table.insert(fields, 'e'); table.insert(fields, string.sub(frame[2], 2))
      end
      if frame[4] ~= '' then
        table.insert(fields, 't'); table.insert(fields, frame[4])
        redis.call('APPEND', base .. 'x', frame[4])
      end
      if frame[5] ~= '' then table.insert(fields, 'a'); table.insert(fields, frame[5]) end
      redis.call('XADD', base .. 'f', '0-' .. frame[1], unpack(fields))
    end
    if state ~= '' then
      redis.call('HSET', base .. 's', 'state', state, 'status', status, 'top', top + n)
      redis.call('ZADD', p .. 'updated', updated, id)
    else
      redis.call('HSET', base .. 's', 'top', top + n)
    end
    if ended == '1' then
      redis.call('SREM', p .. 'unfinished', id)
      redis.call('XADD', base .. 'e', 'MAXLEN', '~', 16, '*', 's', status)
    elseif status ~= h[2] then
      redis.call('SADD', p .. 'unfinished', id)
    end
    table.insert(results, top + n)
  end
end
return results
"""

# KEYS: s, f, e, x, t, unfinished, updated, tombstones, created
# ARGV: id, now, prefix
PURGE: Final = """
local h = redis.call('HMGET', KEYS[1], 'token', 'cred', 'idem', 'owner')
if not h[1] then return 0 end
redis.call('HSET', KEYS[5], 'token', h[1], 'cred', h[2] or '')
redis.call('ZADD', KEYS[8], ARGV[2], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[9], ARGV[1])
if h[2] and h[2] ~= '' then redis.call('ZREM', ARGV[3] .. 'created:' .. h[2], ARGV[1]) end
if h[3] and h[3] ~= '' then
  local idem = ARGV[3] .. 'idem:' .. h[3]
  if redis.call('GET', idem) == ARGV[1] then redis.call('DEL', idem) end
end
if h[4] and h[4] ~= '' then redis.call('SREM', ARGV[3] .. 'owner:' .. h[4], ARGV[1]) end
return 1
"""

# A stream whose upstream never started a generation: gone without a tombstone.
# KEYS: s, f, e, x, unfinished, updated, created.  ARGV: id, prefix
DISCARD: Final = """
local h = redis.call('HMGET', KEYS[1], 'cred', 'idem', 'owner')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('SREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
if h[1] and h[1] ~= '' then redis.call('ZREM', ARGV[2] .. 'created:' .. h[1], ARGV[1]) end
if h[2] and h[2] ~= '' then
  local idem = ARGV[2] .. 'idem:' .. h[2]
  if redis.call('GET', idem) == ARGV[1] then redis.call('DEL', idem) end
end
if h[3] and h[3] ~= '' then redis.call('SREM', ARGV[2] .. 'owner:' .. h[3], ARGV[1]) end
return 1
"""

# The upstream answered a write-ahead stream: its meta with the media type and headers.
# KEYS: s.  ARGV: meta, id
ANSWERED: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOSTREAM unknown stream ' .. ARGV[2])
end
redis.call('HSET', KEYS[1], 'meta', ARGV[1])
return 1
"""

# KEYS: tombstones.  ARGV: older_than, prefix
PURGE_TOMBSTONES: Final = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
for _, id in ipairs(gone) do redis.call('DEL', ARGV[2] .. '{' .. id .. '}:t') end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
return #gone
"""

# KEYS: s.  ARGV: owner, expires, prefix, id
SET_LEASE: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOSTREAM unknown stream ' .. ARGV[4])
end
local old = redis.call('HGET', KEYS[1], 'owner')
if old and old ~= '' and old ~= ARGV[1] then
  redis.call('SREM', ARGV[3] .. 'owner:' .. old, ARGV[4])
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'expires', ARGV[2])
redis.call('SADD', ARGV[3] .. 'owner:' .. ARGV[1], ARGV[4])
return 1
"""

# KEYS: owner set.  ARGV: owner, expires, prefix
# Streams that ended (or changed owner) leave the owner's set as they are met.
RENEW: Final = """
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local s = ARGV[3] .. '{' .. id .. '}:s'
  local h = redis.call('HMGET', s, 'owner', 'status')
  if h[1] == ARGV[1] and (h[2] == 'pending' or h[2] == 'streaming') then
    redis.call('HSET', s, 'expires', ARGV[2])
    n = n + 1
  else
    redis.call('SREM', KEYS[1], id)
  end
end
return n
"""

# An idempotency key claimed before its upstream request (CREATE then names the stream).
# KEYS: idem.  ARGV: claimer, ttl in ms, a stream id the key may name and be taken from ('' none)
CLAIM: Final = """
local held = redis.call('GET', KEYS[1])
if held == false or held == ARGV[1] or (ARGV[3] ~= '' and held == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# KEYS: idem.  ARGV: claimer
RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""
