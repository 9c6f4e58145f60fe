-- end.lua: finish a cycle: save the schedule into the state and release the lease (the epoch
-- stays, so it only ever grows; the token and the write id stay, so a re-sent end is
-- recognised).
-- KEYS[1] state hash (holds the lease)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id,
-- ARGV[5] count of state pairs, then the pairs, then a count of state fields to delete, then
-- the fields, then the trigger generation (state field 'trig') the cycle saw at Begin
-- Returns 1, or 2 when a trigger (or resume) landed during the cycle: nextDue then stays 0
-- (due now) whatever the pairs said, and the caller keeps the due entry due now; DUPLICATE
-- when this write was applied before (the due entry, kept due now by a trigger, stays so).
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired.
local now = now_ms(ARGV[3])
local err, dup = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4])
if err then return err end
if dup then return DUPLICATE end
local n = tonumber(ARGV[5])
if n > 0 then chunked('HSET', KEYS[1], ARGV, 6, 5 + n * 2, 1000) end
local d = 6 + n * 2
local m = tonumber(ARGV[d])
redis.call('HDEL', KEYS[1], 'owner', 'expiresAt', unpack(ARGV, d + 1, d + m))
if (redis.call('HGET', KEYS[1], 'trig') or '') ~= ARGV[d + m + 1] then
  redis.call('HSET', KEYS[1], 'write', ARGV[4], 'nextDue', '0')
  return 2
end
redis.call('HSET', KEYS[1], 'write', ARGV[4])
return 1
