-- delete_key.lua: partitions delete: drop a key's state, snapshot, outbox, parked and held
-- rows and replay log, leave a deletion mark (cycles of stale tasks skip the key), and
-- release the lease. The lease hash keeps its epoch, so epochs never repeat.
-- KEYS[1] lease hash, KEYS[2] state hash, KEYS[3] items hash, KEYS[4] outbox stream,
-- KEYS[5] parked hash, KEYS[6] holds hash, KEYS[7] held hash, KEYS[8] replay log stream
-- ARGV[1] epoch, ARGV[2] now override ms or ''
-- Returns 1.
-- Fence check first: LEASE_LOST when stale or expired, before any write.
local now = now_ms(ARGV[2])
local err = fence(KEYS[1], ARGV[1], now)
if err then return err end
for k = 2, 8 do redis.call('UNLINK', KEYS[k]) end -- big hashes are freed in the background
redis.call('HSET', KEYS[2], 'deleted', '1')
redis.call('HDEL', KEYS[1], 'owner', 'expiresAt')
return 1
