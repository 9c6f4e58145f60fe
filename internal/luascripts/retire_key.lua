-- retire_key.lua: partitions delete, the registry's half, under the key's lease and after its
-- data went (delete_key.lua): raise the poller's high-water marks to the key's epoch and
-- floor, so that the key begun again after its mark expired starts above them, forget the key
-- (a config key stays, marked deleted: its config may list it still) and drop its due entry.
-- KEYS[1] the poller's registry index, KEYS[2] the poller's due set, KEYS[3] the high-water
-- marks hash (poller -> 'epoch floor'), all under {global}
-- ARGV[1] the poller's name, ARGV[2] the partition, ARGV[3] the key's epoch, ARGV[4] its floor
-- Returns the entry the key had ('' when none).
-- First check: none is needed; every write is idempotent (a mark is only ever raised).
local marks = redis.call('HGET', KEYS[3], ARGV[1]) or ''
local e, f = string.match(marks, '^(%d+) (%d+)$')
e = math.max(tonumber(e or '0'), tonumber(ARGV[3]))
f = math.max(tonumber(f or '0'), tonumber(ARGV[4]))
redis.call('HSET', KEYS[3], ARGV[1], string.format('%d %d', e, f))
local v = reg_get(KEYS[1], ARGV[2])
if v == 'c' then
  reg_put(KEYS[1], ARGV[2], '-c')
elseif v and v ~= '-c' then
  reg_del(KEYS[1], ARGV[2])
end
redis.call('ZREM', KEYS[2], ARGV[1] .. '|' .. ARGV[2])
return v or ''
