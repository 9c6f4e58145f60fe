-- renew.lua: extend the lease (LeaseKeeper heartbeat, and the confirmation a cycle makes
-- before a request when nothing fenced confirmed its lease lately).
-- KEYS[1] state hash (holds the lease)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] lease TTL ms
-- Returns {expiresAt ms, paused 0|1}. Fence check first: LEASE_LOST when the epoch or token is
-- not ours or the lease expired. Running it twice only extends the lease again.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end
local exp = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'expiresAt', exp)
return {exp, paused(KEYS[1])}
