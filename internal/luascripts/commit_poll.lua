-- commit_poll.lua: the atomic write of one page: cursor and state patch, item rows, deletes,
-- outbox events, invalid items parked, parked rows removed; also renews the lease (G3: the
-- cursor moves only together with its page's events).
-- KEYS[1] state hash, KEYS[2] lease hash, KEYS[3] items hash, KEYS[4] outbox stream,
-- KEYS[5] parked hash
-- ARGV[1] epoch, ARGV[2] now override ms or '', ARGV[3] lease TTL ms, then sections, each a
-- count followed by its values:
--   state pairs (field, value), item upserts (identity, row), item deletes (identity),
--   events (id, orderingKey, envelope JSON), invalid rows (parkedId, row JSON; HSETNX so the
--   same invalid item is parked once), unparked ids (HDEL)
-- Returns {expiresAt, streamId...} with one stream id per event, in order.
-- Fence check first: LEASE_LOST when stale or expired, before any write.
local now = now_ms(ARGV[2])
local err = fence(KEYS[2], ARGV[1], now)
if err then return err end

local i = 4
local function section(width)
  local n = tonumber(ARGV[i])
  local from = i + 1
  i = from + n * width
  return from, from + n * width - 1, n
end

local from, to = section(2)
if to >= from then chunked('HSET', KEYS[1], ARGV, from, to, 1000) end
from, to = section(2)
if to >= from then chunked('HSET', KEYS[3], ARGV, from, to, 1000) end
from, to = section(1)
if to >= from then chunked('HDEL', KEYS[3], ARGV, from, to, 1000) end
local out = {}
local n
from, to, n = section(3)
for k = 0, n - 1 do
  local j = from + k * 3
  out[#out + 1] = redis.call('XADD', KEYS[4], '*', 'id', ARGV[j], 'ok', ARGV[j + 1], 'ev', ARGV[j + 2])
end
from, to, n = section(2)
for k = 0, n - 1 do
  local j = from + k * 2
  redis.call('HSETNX', KEYS[5], ARGV[j], ARGV[j + 1])
end
from, to = section(1)
if to >= from then chunked('HDEL', KEYS[5], ARGV, from, to, 1000) end

local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[2], 'expiresAt', exp)
table.insert(out, 1, exp)
return out
