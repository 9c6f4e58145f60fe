-- renew.lua: extend the lease (LeaseKeeper heartbeat).
-- KEYS[1] lease hash
-- ARGV[1] epoch, ARGV[2] now override ms or '', ARGV[3] lease TTL ms
-- Returns the new expiresAt (ms). Fence check first: LEASE_LOST when stale or expired.
local now = now_ms(ARGV[2])
local err = fence(KEYS[1], ARGV[1], now)
if err then return err end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'expiresAt', exp)
return exp
