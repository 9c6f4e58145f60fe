-- repair_due.lua: give registered keys that lack a due entry one (the repair sweep). The
-- caller found them without an entry and not deleted; this script re-checks, atomically with
-- the write, that each still has no entry (ZADD NX never overwrites a due time a cycle or a
-- trigger wrote meanwhile) and that each key found by its registry entry is still registered
-- (partitions delete drops the registry entry and the due entry together). A key its
-- poller's entry lists has no registry entry to re-check, and stays listed when deleted: one
-- deleted meanwhile gets a due entry that its next claim's Begin drops.
-- KEYS[1] registry hash, KEYS[2...] due sets (all under {global})
-- ARGV[1] now override ms or '', then quadruples: member "poller|partition", index into KEYS
--   of its poller's due set, due time ms ('0': now), '1' when its poller's entry lists it
--   ('0': found by its registry entry)
-- Returns the members given a due entry.
-- First check: per member, registered and without a due entry; otherwise nothing is written.
local now = now_ms(ARGV[1])
local out = {}
for i = 2, #ARGV, 4 do
  local member, set, due = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  local known = ARGV[i + 3] == '1' or redis.call('HEXISTS', KEYS[1], member) == 1
  if known and not redis.call('ZSCORE', set, member) then
    if due <= 0 then due = now end
    redis.call('ZADD', set, 'NX', due, member)
    out[#out + 1] = member
  end
end
return out
