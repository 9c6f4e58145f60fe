-- end_delete.lua: the last step of partitions delete, once the registry forgot the key (or
-- marked it deleted) and the poller's high-water marks cover its epoch and floor: release the
-- lease and let the deletion mark expire. Until then it refuses cycles and operations of
-- stale tasks (begin.lua); after it, the registry does, and a key begun again starts above the
-- high-water marks.
-- KEYS[1] state hash (holds the lease)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id,
-- ARGV[5] how long the mark lives, ms (longer than a seed's age, begin.lua's SEED_MAX_AGE)
-- Returns 1, or DUPLICATE when this write was applied before.
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired.
local now = now_ms(ARGV[3])
local err, dup = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4])
if err then return err end
if dup then return DUPLICATE end
redis.call('HDEL', KEYS[1], 'owner', 'expiresAt')
redis.call('HSET', KEYS[1], 'write', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
