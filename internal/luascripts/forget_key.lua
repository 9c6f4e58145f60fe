-- forget_key.lua: the global half of partitions delete, after delete_key.lua: drop the key's
-- registry entry and due entry, but only if the registry entry is still the one read before
-- the delete. A partitions add landing in between writes a new entry (with its addedAt), and
-- the key it brings back must stay registered and due. A key without an entry (a config key:
-- its poller's entry lists it, and keeps listing it, deleted) is matched by its due entry
-- instead: a partitions add of it writes no entry but makes it due now, and that due entry
-- stays (so does one a claim moved meanwhile; the claim's Begin finds the key deleted and
-- drops it).
-- KEYS[1] registry hash, KEYS[2] the poller's due set (both under {global})
-- ARGV[1] member "poller|partition", ARGV[2] the registry entry read before the delete
--   ('' when there was none), ARGV[3] the due score read with it ('' when there was none)
-- Returns 1 when forgotten, 0 when the key was added again meanwhile.
-- First check: the registry entry equals ARGV[2] (and, without one, the due score equals
-- ARGV[3]); otherwise nothing is written.
local entry = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if entry ~= ARGV[2] then return 0 end
if entry == '' then
  local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if (score and tonumber(score)) ~= (ARGV[3] ~= '' and tonumber(ARGV[3]) or nil) then return 0 end
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
