-- trigger.lua: make a key due now (watukuy trigger, and resume, which also lifts the pause),
-- unless partitions delete has deleted it: a trigger written into a deletion mark would come
-- back with the partition when partitions add revives it. The generation (trig) tells a cycle
-- running now to end due now (end.lua); the due entry is trigger_due.lua's.
-- KEYS[1] state hash
-- ARGV[1] 'trigger' or 'resume' (also drops the pause and the config's removal flag)
-- Returns 1 when written, 0 when the key is deleted (nothing written).
-- First check: the state's deleted mark; only then the writes (none into a state without an
-- epoch but the resume's).
local st = redis.call('HMGET', KEYS[1], 'deleted', 'epoch')
if st[1] == '1' then return 0 end
if ARGV[1] == 'resume' then redis.call('HDEL', KEYS[1], 'paused', 'removed') end
-- A key without an epoch runs no cycle to tell, and its due entry alone makes it due: what a
-- trigger wrote there would outlive a key its registry forgot (no claim would come to drop it).
if not st[2] then return 1 end
redis.call('HSET', KEYS[1], 'nextDue', '0')
redis.call('HINCRBY', KEYS[1], 'trig', 1)
return 1
