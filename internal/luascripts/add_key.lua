-- add_key.lua: partitions add, the registry's half, under the key's lease (begin.lua mode
-- 'add'): the key gets a registry entry (a deleted config key becomes a config key again, any
-- other an added one) and is due now.
-- KEYS[1] the poller's registry index, KEYS[2] the poller's due set, both under {global}
-- ARGV[1] now override ms or '', ARGV[2] the poller's name, ARGV[3] the partition, ARGV[4]
-- the entry of an added key ('a<ms>')
-- Returns the entry the key had ('' when none, or when it is ARGV[4]: this add sent again); a
-- live one is left as it is (nothing written).
-- First check: the key's registry entry; a live key is not added again.
local now = now_ms(ARGV[1])
local v = reg_get(KEYS[1], ARGV[3])
if v == ARGV[4] then return '' end -- this very add, sent again after a read timeout
if reg_live(v) then return v end
if v == '-c' then reg_put(KEYS[1], ARGV[3], 'c') else reg_put(KEYS[1], ARGV[3], ARGV[4]) end
redis.call('ZADD', KEYS[2], now, ARGV[2] .. '|' .. ARGV[3])
return v or ''
