-- park.lua: move failed events aside. Poison events are parked and hold their ordering keys;
-- events to try again later join their ordering key's held events (they are its oldest) and
-- the ordering key is released at their time (read_outbox.lua delivers it from then on,
-- oldest first); the events of those ordering keys that follow in the outbox join their held
-- events (they return, in order, on retry, discard or the wait's end).
-- KEYS[1] state hash (holds the lease; an outbox left empty is deleted, its last id kept
-- there as outboxLast), KEYS[2] outbox stream, KEYS[3] parked hash, KEYS[4] parked ids
-- sorted set, KEYS[5] holds hash, KEYS[6] held events sorted set, KEYS[7] released ordering
-- keys sorted set
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', then three sections, each a
-- count and values: poison (streamId or '', held member's name or '', parkedId, orderingKey,
-- row JSON: an outbox entry by its stream id, a released held event by its name), wait
-- (streamId or '', held member's name or '', orderingKey, seq, until ms, entry JSON with its
-- retry record), held (streamId, orderingKey, seq, entry JSON: outbox entries)
-- Returns the number of entries moved out of the outbox. Running it twice moves nothing more.
-- Fence check first: LEASE_LOST when the epoch or token is not ours or the lease expired,
-- before any write.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end
local moved = 0
-- take removes an event from where it is, the outbox (by stream id) or the held events (by
-- name), and reports whether it was there (a re-sent call finds an outbox entry gone, and a
-- held event under its name again: the same member).
local function take(stream_id, name)
  if name ~= '' then return held_remove(KEYS[6], name) == 1 end
  redis.call('XACK', KEYS[2], 'dispatch', stream_id)
  local gone = redis.call('XDEL', KEYS[2], stream_id)
  moved = moved + gone
  return gone == 1
end
local i = 4
local n = tonumber(ARGV[i])
for k = 0, n - 1 do
  local j = i + 1 + k * 5
  redis.call('HSET', KEYS[3], ARGV[j + 2], ARGV[j + 4])
  redis.call('ZADD', KEYS[4], 0, ARGV[j + 2])
  redis.call('HSET', KEYS[5], ARGV[j + 3], ARGV[j + 2])
  redis.call('ZREM', KEYS[7], ARGV[j + 3])
  take(ARGV[j], ARGV[j + 1])
end
i = i + 1 + n * 5
n = tonumber(ARGV[i])
for k = 0, n - 1 do
  local j = i + 1 + k * 6
  if take(ARGV[j], ARGV[j + 1]) then
    redis.call('ZADD', KEYS[6], 0, held_member(ARGV[j + 2], ARGV[j + 3], ARGV[j + 5]))
    redis.call('ZADD', KEYS[7], ARGV[j + 4], ARGV[j + 2])
  end
end
i = i + 1 + n * 6
n = tonumber(ARGV[i])
for k = 0, n - 1 do
  local j = i + 1 + k * 4
  if take(ARGV[j], '') then redis.call('ZADD', KEYS[6], 0, held_member(ARGV[j + 1], ARGV[j + 2], ARGV[j + 3])) end
end
outbox_drop_if_empty(KEYS[2], KEYS[1])
return moved
