-- park.lua: park poison events and hold their ordering keys; the events of a held ordering key
-- that follow in the outbox join its held events (they return, in order, on retry or
-- discard).
-- KEYS[1] state hash (holds the lease; an outbox left empty is deleted, its last id kept
-- there as outboxLast), KEYS[2] outbox stream, KEYS[3] parked hash, KEYS[4] parked ids
-- sorted set, KEYS[5] holds hash, KEYS[6] held events sorted set, KEYS[7] released ordering
-- keys sorted set
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', then two sections, each a count
-- and values: poison (streamId or '', held member's name or '', parkedId, orderingKey, row
-- JSON: an outbox entry by its stream id, a released held event by its name), held (streamId,
-- orderingKey, seq, entry JSON: outbox entries)
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
  local j = i + 1 + k * 5
  redis.call('HSET', KEYS[3], ARGV[j + 2], ARGV[j + 4])
  redis.call('ZADD', KEYS[4], 0, ARGV[j + 2])
  redis.call('HSET', KEYS[5], ARGV[j + 3], ARGV[j + 2])
  redis.call('ZREM', KEYS[7], ARGV[j + 3])
  if ARGV[j + 1] ~= '' then
    held_remove(KEYS[6], ARGV[j + 1])
  else
    redis.call('XACK', KEYS[2], 'dispatch', ARGV[j])
    moved = moved + redis.call('XDEL', KEYS[2], ARGV[j])
  end
end
i = i + 1 + n * 5
n = tonumber(ARGV[i])
for k = 0, n - 1 do
  local j = i + 1 + k * 4
  redis.call('XACK', KEYS[2], 'dispatch', ARGV[j])
  if redis.call('XDEL', KEYS[2], ARGV[j]) == 1 then
    redis.call('ZADD', KEYS[6], 0, held_member(ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]))
    moved = moved + 1
  end
end
outbox_drop_if_empty(KEYS[2], KEYS[1])
return moved
