-- ack.lua: acknowledge delivered events, in sequence order: outbox entries by stream id (XACK +
-- XDEL, so the outbox holds only undelivered events), released held events by name; an
-- ordering key with no held event left is no longer released.
-- KEYS[1] state hash (holds the lease), KEYS[2] outbox stream (missing: empty), KEYS[3] held
-- events sorted set, KEYS[4] released ordering keys sorted set
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] n, ARGV[5...4+n]
-- stream ids in commit order, then the names of held members (held_name)
-- Returns {number of events acknowledged, paused 0|1}. Running it twice acknowledges nothing
-- more. An outbox left empty is deleted, its last id kept in the state (outboxLast).
-- Fence check first: LEASE_LOST when the epoch or token is not ours or the lease expired,
-- before any write.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end
local n = tonumber(ARGV[4])
local acked = 0
local i = 5
while i <= 4 + n do
  local j = math.min(i + 999, 4 + n)
  redis.call('XACK', KEYS[2], 'dispatch', unpack(ARGV, i, j))
  acked = acked + redis.call('XDEL', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
local oks = {}
for k = 5 + n, #ARGV do
  if held_remove(KEYS[3], ARGV[k]) == 1 then
    acked = acked + 1
    oks[held_ok(ARGV[k])] = true
  end
end
for ok in pairs(oks) do
  if not held_first(KEYS[3], ok) then redis.call('ZREM', KEYS[4], ok) end
end
if n > 0 then outbox_drop_if_empty(KEYS[2], KEYS[1]) end
return {acked, paused(KEYS[1])}
