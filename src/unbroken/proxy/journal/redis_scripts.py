"""The Lua scripts of ``RedisJournal``: each write is one script, so it lands whole or not at all.

Redis runs a script atomically but does not roll back what a script wrote before an error, so
every script checks everything first and writes after. Keys (``P`` is the journal's prefix, the
stream id in braces so that one stream's keys share a hash slot)::

    P{id}:s   hash: meta, state (JSON), status, top (last frame's seq), token, cred, idem,
              owner, expires
    P{id}:f   stream of frames, entry id 0-<seq>: e (event, absent for None), d (data),
              t (text, absent when empty)
    P{id}:e   stream of ends: an entry each time the stream reaches an end state (wakes the
              readers blocked in other processes)
    P{id}:x   string: the stream's text so far (APPEND per frame)
    P{id}:t   hash: a purged stream's tombstone (token, cred)
    Punfinished        set of ids whose status is not an end state
    Pupdated           sorted set: id by its last update (retention)
    Ptombstones        sorted set: id by the time it was purged
    Pidem:<hash>       string: the newest stream created with that idempotency hash
    Powner:<owner>     set: ids whose lease ``owner`` holds
"""

from __future__ import annotations

from typing import Final

__all__ = ["APPEND", "CREATE", "PURGE", "PURGE_TOMBSTONES", "RENEW", "SET_LEASE"]

# KEYS: s, unfinished, updated, idem ('' for none), owner set ('' for none)
# ARGV: id, meta, state, status, token, cred, owner, expires, updated, ended, idem hash
CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('EXISTS stream ' .. ARGV[1] .. ' exists')
end
redis.call('HSET', KEYS[1], 'meta', ARGV[2], 'state', ARGV[3], 'status', ARGV[4], 'top', 0,
           'token', ARGV[5], 'cred', ARGV[6], 'owner', ARGV[7], 'expires', ARGV[8],
           'idem', ARGV[11])
redis.call('ZADD', KEYS[3], ARGV[9], ARGV[1])
if ARGV[10] == '0' then redis.call('SADD', KEYS[2], ARGV[1]) end
if KEYS[4] ~= '' then redis.call('SET', KEYS[4], ARGV[1]) end
if KEYS[5] ~= '' then redis.call('SADD', KEYS[5], ARGV[1]) end
return 1
"""

# KEYS: s, f, e, x, unfinished, updated
# ARGV: id, state, status, updated, ended, n, then n times: seq, event ('' or '=' .. name),
#       data, text
APPEND: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOSTREAM unknown stream ' .. ARGV[1])
end
local top = tonumber(redis.call('HGET', KEYS[1], 'top'))
local n = tonumber(ARGV[6])
for k = 0, n - 1 do
  local seq = tonumber(ARGV[7 + 4 * k])
  if seq ~= top + 1 + k then
    return redis.error_reply('BADSEQ stream ' .. ARGV[1] .. ': seq ' .. ARGV[7 + 4 * k] ..
                             ', expected the next after ' .. (top + k))
  end
end
for k = 0, n - 1 do
  local i = 7 + 4 * k
  local fields = {'d', ARGV[i + 2]}
  if ARGV[i + 1] ~= '' then
    table.insert(fields, 'e'); table.insert(fields, string.sub(ARGV[i + 1], 2))
  end
  if ARGV[i + 3] ~= '' then
    table.insert(fields, 't'); table.insert(fields, ARGV[i + 3])
    redis.call('APPEND', KEYS[4], ARGV[i + 3])
  end
  redis.call('XADD', KEYS[2], '0-' .. ARGV[i], unpack(fields))
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'status', ARGV[3], 'top', top + n)
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[1])
if ARGV[5] == '1' then
  redis.call('SREM', KEYS[5], ARGV[1])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', 16, '*', 's', ARGV[3])
else
  redis.call('SADD', KEYS[5], ARGV[1])
end
return top + n
"""

# KEYS: s, f, e, x, t, unfinished, updated, tombstones
# ARGV: id, now, prefix
PURGE: Final = """
local h = redis.call('HMGET', KEYS[1], 'token', 'cred', 'idem', 'owner')
if not h[1] then return 0 end
redis.call('HSET', KEYS[5], 'token', h[1], 'cred', h[2] or '')
redis.call('ZADD', KEYS[8], ARGV[2], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
if h[3] and h[3] ~= '' then
  local idem = ARGV[3] .. 'idem:' .. h[3]
  if redis.call('GET', idem) == ARGV[1] then redis.call('DEL', idem) end
end
if h[4] and h[4] ~= '' then redis.call('SREM', ARGV[3] .. 'owner:' .. h[4], ARGV[1]) end
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
