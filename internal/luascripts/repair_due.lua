-- repair_due.lua: give registered keys that lack a due entry one (the repair sweep). The
-- caller found them without an entry and not deleted; this script re-checks, atomically with
-- the write, that each is still registered (partitions delete drops the registry entry and
-- the due entry together) and still has no entry (ZADD NX never overwrites a due time a cycle
-- or a trigger wrote meanwhile).
-- KEYS[1] registry hash, KEYS[2...] due sets (all under {global})
-- ARGV[1] now override ms or '', then triples: member "poller|partition", index into KEYS of
--   its poller's due set, due time ms ('0': now)
-- Returns the members given a due entry.
-- First check: per member, registered and without a due entry; otherwise nothing is written.
local now = now_ms(ARGV[1])
local out = {}
for i = 2, #ARGV, 3 do
  local member, set, due = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  if redis.call('HEXISTS', KEYS[1], member) == 1 and not redis.call('ZSCORE', set, member) then
    if due <= 0 then due = now end
    redis.call('ZADD', set, 'NX', due, member)
    out[#out + 1] = member
  end
end
return out
