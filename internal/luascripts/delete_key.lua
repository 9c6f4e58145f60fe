-- delete_key.lua: partitions delete: drop a key's state, snapshot, tombstones, outbox, parked
-- and held rows, replay log, invalid-observation index and backfill's touched set, leave a
-- deletion mark (cycles of stale tasks skip the key) and the incarnation, and release the
-- lease. The lease's epoch and token stay in the state, so epochs never repeat on this node
-- and a re-sent delete is recognised.
-- KEYS[1] state hash (holds the lease), KEYS[2] items hash, KEYS[3] outbox stream,
-- KEYS[4] parked hash, KEYS[5] holds hash, KEYS[6] held hash, KEYS[7] replay log stream,
-- KEYS[8] tombstones sorted set, KEYS[9] latest invalid observations hash, KEYS[10] set of
-- identities touched during a backfill
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id
-- Returns 1, or DUPLICATE when this write was applied before.
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired.
local now = now_ms(ARGV[3])
local err, dup = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4])
if err then return err end
if dup then return DUPLICATE end
local lives = redis.call('HMGET', KEYS[1], 'lastLife', 'incarnation')
local above = math.max(tonumber(lives[1] or '0'), tonumber(lives[2] or '0')) + 1
-- The outbox's last id outlives the key, as the epoch does: an outbox of the partition added
-- again starts above it.
local last = later_id(redis.call('HGET', KEYS[1], 'outboxLast'), outbox_last(KEYS[3]))
for k = 1, 10 do redis.call('UNLINK', KEYS[k]) end -- big hashes are freed in the background
-- The incarnation starts the lives of the identities of a partition added again: their ids
-- never repeat the deleted one's (G2).
redis.call('HSET', KEYS[1], 'deleted', '1', 'incarnation', string.format('%d', math.max(now, above)),
  'epoch', ARGV[1], 'token', ARGV[2], 'write', ARGV[4])
if last then redis.call('HSET', KEYS[1], 'outboxLast', last) end
return 1
