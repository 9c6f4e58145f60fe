-- repair_due.lua: give registered keys of one poller that lack a due entry one (the repair
-- sweep). The caller found them without an entry and not deleted; this script re-checks,
-- atomically with the write, that each is still registered and not deleted (partitions
-- delete drops the due entry with the registry's, retire_key.lua) and still has no due entry
-- (ZADD NX never overwrites a due time a cycle or a trigger wrote meanwhile).
-- KEYS[1] the poller's registry index, KEYS[2] the poller's due set, both under {global}
-- ARGV[1] now override ms or '', ARGV[2] the poller's name, then pairs: partition, due time
--   ms ('0': now)
-- Returns the members given a due entry.
-- First check: per key, registered, not deleted and without a due entry; otherwise nothing is
-- written.
local now = now_ms(ARGV[1])
local out = {}
for i = 3, #ARGV, 2 do
  local member, due = ARGV[2] .. '|' .. ARGV[i], tonumber(ARGV[i + 1])
  if reg_live(reg_get(KEYS[1], ARGV[i])) and not redis.call('ZSCORE', KEYS[2], member) then
    if due <= 0 then due = now end
    redis.call('ZADD', KEYS[2], 'NX', due, member)
    out[#out + 1] = member
  end
end
return out
