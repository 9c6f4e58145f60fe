-- delete_key.lua: drop a key's data under its lease: for partitions delete (mode 'delete'),
-- leaving a deletion mark, and for partitions add of a deleted partition (mode 'revive'),
-- which comes back empty. The state keeps the lease (epoch, token, owner, expiry, write id)
-- and the floor, the point above which the next incarnation's lives and outbox ids start.
-- KEYS[1] state hash (holds the lease), KEYS[2] items hash, KEYS[3] outbox stream,
-- KEYS[4] parked hash, KEYS[5] parked ids sorted set, KEYS[6] holds hash, KEYS[7] held
-- events sorted set, KEYS[8] released ordering keys sorted set, KEYS[9] replay log stream,
-- KEYS[10] tombstones sorted set, KEYS[11] latest invalid observations hash, KEYS[12] set of
-- identities touched during a backfill, KEYS[13] listed identities hash of the live lane,
-- KEYS[14] listed identities hash of the reconcile lane, KEYS[15] payloads hash
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id,
-- ARGV[5] 'delete' | 'revive'
-- Returns {epoch, floor}: the lease's epoch and the floor (above every life the key gave and
-- every outbox id it made, and at least now), which partitions delete raises the poller's
-- high-water marks to; a write id applied before returns the reply it had then, having
-- written nothing.
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired.
local now = now_ms(ARGV[3])
local err, dup = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4])
if err then return err end
if dup then
  local e, f = string.match(redis.call('HGET', KEYS[1], 'reply') or '', '^(%d+) (%d+)$')
  return {tonumber(e or ARGV[1]), tonumber(f or '0')}
end
local s = redis.call('HMGET', KEYS[1], 'lastLife', 'incarnation', 'floor', 'outboxLast', 'owner', 'expiresAt')
local last_ms = stream_id(later_id(s[4], outbox_last(KEYS[3]))) or 0
local floor = math.max(now, tonumber(s[1] or '0') + 1, tonumber(s[2] or '0') + 1, tonumber(s[3] or '0'), last_ms + 1)
for k = 1, #KEYS do redis.call('UNLINK', KEYS[k]) end -- big structures are freed in the background
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'token', ARGV[2], 'owner', s[5], 'expiresAt', s[6], 'write', ARGV[4],
  'reply', ARGV[1] .. ' ' .. string.format('%d', floor))
if ARGV[5] == 'delete' then
  redis.call('HSET', KEYS[1], 'deleted', '1', 'floor', string.format('%d', floor))
else
  redis.call('HSET', KEYS[1], 'incarnation', string.format('%d', floor))
end
return {tonumber(ARGV[1]), floor}
