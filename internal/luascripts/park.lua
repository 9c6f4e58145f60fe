-- park.lua: park poison events and hold their ordering keys; move events of held ordering
-- keys out of the outbox into the held hash (they return, in order, on retry or discard).
-- KEYS[1] state hash (holds the lease; an outbox left empty is deleted, its last id kept
-- there as outboxLast), KEYS[2] outbox stream, KEYS[3] parked hash, KEYS[4] holds hash,
-- KEYS[5] held hash
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', then two sections, each a count
-- and values: poison (streamId, parkedId, orderingKey, row JSON), held (streamId, held JSON)
-- Returns the number of entries moved out of the outbox. Running it twice moves nothing more.
-- Fence check first: LEASE_LOST when the epoch or token is not ours or the lease expired,
-- before any write.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end
local i = 4
local moved = 0
local n = tonumber(ARGV[i])
for k = 0, n - 1 do
  local j = i + 1 + k * 4
  redis.call('HSET', KEYS[3], ARGV[j + 1], ARGV[j + 3])
  redis.call('HSETNX', KEYS[4], ARGV[j + 2], ARGV[j + 1])
  redis.call('XACK', KEYS[2], 'dispatch', ARGV[j])
  moved = moved + redis.call('XDEL', KEYS[2], ARGV[j])
end
i = i + 1 + n * 4
n = tonumber(ARGV[i])
for k = 0, n - 1 do
  local j = i + 1 + k * 2
  redis.call('HSET', KEYS[5], ARGV[j], ARGV[j + 1])
  redis.call('XACK', KEYS[2], 'dispatch', ARGV[j])
  moved = moved + redis.call('XDEL', KEYS[2], ARGV[j])
end
outbox_drop_if_empty(KEYS[2], KEYS[1])
return moved
