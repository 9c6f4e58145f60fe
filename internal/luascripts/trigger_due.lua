-- trigger_due.lua: a triggered key's due entry, due now, unless the registry no longer holds
-- the key live: partitions delete drops the entry and the due entry in one script
-- (retire_key.lua), so a trigger either lands before it (and its entry goes with the key) or
-- writes nothing after it. A trigger always wins over an older due time.
-- KEYS[1] the poller's registry index, KEYS[2] the poller's due set, both under {global}
-- ARGV[1] now override ms or '', ARGV[2] the poller's name, ARGV[3] the partition
-- Returns 1 when written, 0 when the key is deleted or not registered (nothing written).
-- First check: the registry entry; only then the write.
local now = now_ms(ARGV[1])
local v = reg_get(KEYS[1], ARGV[3])
if not v or string.sub(v, 1, 1) == '-' then return 0 end
redis.call('ZADD', KEYS[2], now, ARGV[2] .. '|' .. ARGV[3])
return 1
