-- ack.lua: acknowledge delivered events, in sequence order (XACK + XDEL, so the outbox holds
-- only undelivered events).
-- KEYS[1] lease hash, KEYS[2] outbox stream
-- ARGV[1] epoch, ARGV[2] now override ms or '', ARGV[3...] stream ids in commit order
-- Returns the number of ids deleted.
-- Fence check first: LEASE_LOST when stale or expired, before any write.
local now = now_ms(ARGV[2])
local err = fence(KEYS[1], ARGV[1], now)
if err then return err end
if #ARGV < 3 then return 0 end
local i = 3
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('XACK', KEYS[2], 'dispatch', unpack(ARGV, i, j))
  i = j + 1
end
local deleted = 0
i = 3
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  deleted = deleted + redis.call('XDEL', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
return deleted
