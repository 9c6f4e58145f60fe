-- ack.lua: acknowledge delivered events, in sequence order (XACK + XDEL, so the outbox holds
-- only undelivered events).
-- KEYS[1] state hash (holds the lease), KEYS[2] outbox stream (missing: empty)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4...] stream ids in commit
-- order
-- Returns {number of ids deleted, paused 0|1}. Running it twice deletes nothing more. An outbox
-- left empty is deleted, its last id kept in the state (outboxLast).
-- Fence check first: LEASE_LOST when the epoch or token is not ours or the lease expired,
-- before any write.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end
local deleted = 0
local i = 4
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('XACK', KEYS[2], 'dispatch', unpack(ARGV, i, j))
  deleted = deleted + redis.call('XDEL', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
outbox_drop_if_empty(KEYS[2], KEYS[1])
return {deleted, paused(KEYS[1])}
