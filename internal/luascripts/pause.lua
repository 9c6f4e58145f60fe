-- pause.lua: pause a key (watukuy pause, the admin API's pause) unless partitions delete
-- has deleted it: a pause written into a deletion mark would come back with the partition
-- when partitions add revives it.
-- KEYS[1] state hash
-- ARGV[1] none: the script takes no argument
-- Returns 1 when paused, 0 when the key is deleted (nothing written).
-- First check: the state's deleted mark; only then the write.
local deleted = redis.call('HGET', KEYS[1], 'deleted')
if deleted == '1' then return 0 end
redis.call('HSET', KEYS[1], 'paused', '1')
return 1
