-- read_registry.lua: what is known of one key without reading its poller's other keys: its
-- poller's description, its registry entry and its poller's high-water marks (the epoch and
-- floor its deleted keys reached), for a lookup and for the first Begin of a key.
-- KEYS[1] the poller's registry index, KEYS[2] the high-water marks hash (poller -> 'epoch
-- floor'), KEYS[3] the pollers hash, all under {global}
-- ARGV[1] the poller's name, ARGV[2] the partition
-- Returns {description or '', entry or '', epoch, floor}.
-- First check: none; the script writes nothing.
local marks = redis.call('HGET', KEYS[2], ARGV[1]) or ''
local e, f = string.match(marks, '^(%d+) (%d+)$')
return {redis.call('HGET', KEYS[3], ARGV[1]) or '', reg_get(KEYS[1], ARGV[2]) or '', tonumber(e or '0'), tonumber(f or '0')}
