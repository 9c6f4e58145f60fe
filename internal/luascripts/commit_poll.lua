-- commit_poll.lua: the atomic write of one page (or one chunk of a large page): cursor and
-- state patch, item rows, deletes and their tombstones, outbox events (and their replay log
-- copies), invalid items parked, parked rows removed; also renews the lease (G3: the cursor
-- moves only together with its page's events; a chunked page moves it with its last chunk).
-- KEYS[1] state hash (holds the lease), KEYS[2] items hash, KEYS[3] outbox stream,
-- KEYS[4] parked hash, KEYS[5] parked ids sorted set, KEYS[6] replay log stream,
-- KEYS[7] tombstones sorted set, KEYS[8] latest invalid observations hash (identity -> parked
-- id), KEYS[9] set of identities the live side wrote while a backfill runs, KEYS[10] holds
-- hash, KEYS[11] held events sorted set, KEYS[12] released ordering keys sorted set,
-- KEYS[13] listed identities hash of the commit's listing lane, KEYS[14] payloads hash
-- (identity -> the item as last emitted, '' when too large to keep)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id, ARGV[5] lease
-- TTL ms, ARGV[6] log retention ms ('0': no log), ARGV[7] tombstone retention ms ('0': none trimmed), ARGV[8] '1'
-- to empty KEYS[9] first, ARGV[9] '1' to empty KEYS[13] first, then sections, each a count
-- followed by its values:
--   state pairs (field, value), state counters (field, increment), item upserts (identity,
--   row), item deletes (identity), tombstones (identity, generation; the highest kept in
--   state field lastLife), tombstones lifted
--   (identity), events (id, orderingKey, envelope JSON), invalid rows (parkedId, identity or
--   '', version, row JSON; HSETNX so the same invalid item is parked once; with an identity it
--   becomes the identity's latest invalid observation, "parkedId\nversion" in KEYS[8], and the
--   row of the one it replaces is removed), unparked rows (parkedId, identity or ''; HDEL, and
--   the identity's latest invalid observation is forgotten if it is that row), touched
--   identities (SADD to KEYS[9]), listed identities (identity, '1' valid | '0'; HSET to
--   KEYS[13]: what a listing that goes on in a later cycle has shown), payloads (identity,
--   item; HSET to KEYS[14]), payloads dropped (identity; HDEL from KEYS[14])
-- Returns {expiresAt, paused 0|1, firstId, duplicate 0|1, {diverted event indexes}}: the
-- events get the outbox stream ids firstId, then the same milliseconds with the sequence
-- counted up one by one (ms-s, ms-s+1, ...), so the caller knows every id from the first. An
-- event whose ordering key is held by a parked event, or has released held events still to
-- deliver, joins that ordering key's held events at once (G4): its index (from 0) is in the
-- list, and the caller does not deliver it. The outbox stream (and its group) is made for the
-- first event when missing (a drained outbox is deleted), its ids above the state's
-- outboxLast. Expired tombstones go a thousand at most per commit. A write id applied before
-- (the client re-sent it after a read timeout) writes nothing again and returns the first
-- reply's firstId and diverted events, with duplicate 1.
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired.
local now = now_ms(ARGV[3])
local err, dup = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4])
if err then return err end
if dup then
  local l = redis.call('HMGET', KEYS[1], 'expiresAt', 'reply')
  -- A write (of what is there) moves this connection's replication offset past the first
  -- attempt, so a WAIT that follows covers it.
  redis.call('HSET', KEYS[1], 'reply', l[2] or '')
  local first, rest = string.match(l[2] or '', '^([^ ]*) ?(.*)$')
  local diverted = {}
  for d in string.gmatch(rest or '', '%d+') do diverted[#diverted + 1] = tonumber(d) end
  return {tonumber(l[1]) or 0, paused(KEYS[1]), first or '', 1, diverted}
end

local retention = tonumber(ARGV[6])

if ARGV[8] == '1' then redis.call('UNLINK', KEYS[9]) end
if ARGV[9] == '1' then redis.call('UNLINK', KEYS[13]) end
local i = 10
local function section(width)
  local n = tonumber(ARGV[i])
  local from = i + 1
  i = from + n * width
  return from, from + n * width - 1, n
end

local from, to, n = section(2)
if to >= from then chunked('HSET', KEYS[1], ARGV, from, to, 1000) end
from, to, n = section(2)
for k = 0, n - 1 do
  local j = from + k * 2
  redis.call('HINCRBY', KEYS[1], ARGV[j], ARGV[j + 1])
end
from, to = section(2)
if to >= from then chunked('HSET', KEYS[2], ARGV, from, to, 1000) end
from, to = section(1)
if to >= from then chunked('HDEL', KEYS[2], ARGV, from, to, 1000) end
from, to, n = section(2)
local highest = 0
for k = 0, n - 1 do
  local j = from + k * 2
  redis.call('ZADD', KEYS[7], ARGV[j + 1], ARGV[j])
  highest = math.max(highest, tonumber(ARGV[j + 1]))
end
-- The highest generation ever given (a life may run ahead of the clock): an incarnation after
-- a partitions delete starts above it.
if n > 0 and highest > tonumber(redis.call('HGET', KEYS[1], 'lastLife') or '0') then
  redis.call('HSET', KEYS[1], 'lastLife', string.format('%d', highest))
end
-- Tombstones keep an identity's generation past its deletion for a while only (a commit that
-- names no retention trims none); a thousand expired ones go per commit at most, so that many
-- expiring together never make one long script.
if tonumber(ARGV[7]) > 0 then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[7])), 'LIMIT', 0, 1000)
  if #expired > 0 then redis.call('ZREM', KEYS[7], unpack(expired)) end
end
from, to = section(1)
if to >= from then chunked('ZREM', KEYS[7], ARGV, from, to, 1000) end
local first, ms, seq = '', nil, nil
local diverted = {}
from, to, n = section(3)
-- The outbox exists only while it holds entries: made here, with its group, for the first one.
local open = '*'
if n > 0 then open = outbox_open(KEYS[3], KEYS[1]) end
for k = 0, n - 1 do
  local j = from + k * 3
  local id = open
  if ms then id = ms .. '-' .. (seq + k) end
  id = redis.call('XADD', KEYS[3], id, 'id', ARGV[j], 'ok', ARGV[j + 1], 'ev', ARGV[j + 2])
  if k == 0 then
    first = id
    ms, seq = string.match(id, '^(%d+)-(%d+)$')
    seq = tonumber(seq)
  end
  if redis.call('HEXISTS', KEYS[10], ARGV[j + 1]) == 1 or redis.call('ZSCORE', KEYS[12], ARGV[j + 1]) then
    redis.call('XDEL', KEYS[3], id)
    redis.call('ZADD', KEYS[11], 0, held_member(ARGV[j + 1], id, cjson.encode({id = ARGV[j], ok = ARGV[j + 1], ev = ARGV[j + 2], seq = id})))
    diverted[#diverted + 1] = k
  end
  if retention > 0 then
    redis.call('XADD', KEYS[6], '*', 'id', ARGV[j], 'ok', ARGV[j + 1], 'ev', ARGV[j + 2])
  end
end
if #diverted > 0 then outbox_drop_if_empty(KEYS[3], KEYS[1]) end
if retention > 0 and n > 0 then
  -- Log ids are the server's real time (XADD *), whatever the test clock says.
  local t = redis.call('TIME')
  local real = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('XTRIM', KEYS[6], 'MINID', tostring(real - retention))
end
from, to, n = section(4)
for k = 0, n - 1 do
  local j = from + k * 4
  redis.call('HSETNX', KEYS[4], ARGV[j], ARGV[j + 3])
  redis.call('ZADD', KEYS[5], 0, ARGV[j])
  if ARGV[j + 1] ~= '' then
    -- Superseded here, not by a later chunk: a death in between must not leave two.
    local old = indexed(KEYS[8], ARGV[j + 1])
    if old and old ~= ARGV[j] then
      redis.call('HDEL', KEYS[4], old)
      redis.call('ZREM', KEYS[5], old)
    end
    redis.call('HSET', KEYS[8], ARGV[j + 1], ARGV[j] .. '\n' .. ARGV[j + 2])
  end
end
from, to, n = section(2)
for k = 0, n - 1 do
  local j = from + k * 2
  redis.call('HDEL', KEYS[4], ARGV[j])
  redis.call('ZREM', KEYS[5], ARGV[j])
  if ARGV[j + 1] ~= '' and indexed(KEYS[8], ARGV[j + 1]) == ARGV[j] then
    redis.call('HDEL', KEYS[8], ARGV[j + 1])
  end
end
from, to = section(1)
if to >= from then chunked('SADD', KEYS[9], ARGV, from, to, 1000) end
from, to = section(2)
if to >= from then chunked('HSET', KEYS[13], ARGV, from, to, 1000) end
from, to = section(2)
if to >= from then
  chunked('HSET', KEYS[14], ARGV, from, to, 1000)
  -- Marks the key: a poller with patch turned off drops the payloads of what changes.
  redis.call('HSET', KEYS[1], 'payloads', '1')
end
from, to = section(1)
if to >= from then chunked('HDEL', KEYS[14], ARGV, from, to, 1000) end

local exp = now + tonumber(ARGV[5])
local reply = first
if #diverted > 0 then reply = first .. ' ' .. table.concat(diverted, ',') end
redis.call('HSET', KEYS[1], 'expiresAt', exp, 'write', ARGV[4], 'reply', reply)
return {exp, paused(KEYS[1]), first, 0, diverted}
