-- end.lua: finish a cycle: save the schedule into the state and release the lease (the epoch
-- stays, so it only ever grows; the token and the write id stay, so a re-sent end is
-- recognised); on one server, write the key's next due time too.
-- KEYS[1] state hash (holds the lease), KEYS[2] (on one server only: on a cluster it lives in
-- another slot, and set_due.lua writes it) the poller's due set
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id,
-- ARGV[5] count of state pairs, then the pairs, then a count of state fields to delete, then
-- the fields, then the trigger generation (state field 'trig') the cycle saw at Begin, then
-- with KEYS[2] the member "poller|partition" and the due time ms to write
-- Returns 1, or 2 when a trigger (or resume) landed during the cycle: nextDue then stays 0
-- (due now) whatever the pairs said, and the caller keeps the due entry due now (with KEYS[2]
-- this script did); DUPLICATE when this write was applied before (with KEYS[2] its due write
-- was too; the due entry, kept due now by a trigger, stays so).
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired. The due write goes through prelude's due_write, as
-- set_due.lua's: never over a due-now entry.
local now = now_ms(ARGV[3])
local err, dup, l = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4], 'trig')
if err then return err end
if dup then return DUPLICATE end
local n = tonumber(ARGV[5])
local d = 6 + n * 2
local m = tonumber(ARGV[d])
local triggered = (l[5] or '') ~= ARGV[d + m + 1]
redis.call('HDEL', KEYS[1], 'owner', 'expiresAt', unpack(ARGV, d + 1, d + m))
-- The pairs, the write id and a trigger's due-now in one HSET, unless the pairs are too many
-- for one call.
local a = {}
if n <= 400 then a = {unpack(ARGV, 6, 5 + n * 2)} else chunked('HSET', KEYS[1], ARGV, 6, 5 + n * 2, 1000) end
a[#a + 1] = 'write'
a[#a + 1] = ARGV[4]
if triggered then
  a[#a + 1] = 'nextDue'
  a[#a + 1] = '0'
end
redis.call('HSET', KEYS[1], unpack(a))
if KEYS[2] then due_write(KEYS[2], ARGV[d + m + 2], triggered and '0' or ARGV[d + m + 3], now) end
if triggered then return 2 end
return 1
