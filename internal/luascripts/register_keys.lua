-- register_keys.lua: register a batch of a poller's config keys (a worker's start, a reload):
-- each gets a registry entry and, unless deleted, a due entry (ZADD NX: a key keeps its due
-- time). A key added with partitions add becomes a config key (the config lists it now); a
-- deleted one stays deleted until partitions add.
-- KEYS[1] the poller's registry index (its leaves share its {global} tag), KEYS[2] the poller's
-- due set
-- ARGV[1] now override ms or '', ARGV[2] the poller's name, ARGV[3...] partitions ('' for an
-- unpartitioned poller's key), at most 250 (a call stays well under 50 ms at a million keys)
-- Returns the number of keys new to the registry.
-- First check: each key's registry entry; a deleted key is left as it is.
local now = now_ms(ARGV[1])
local added = 0
for i = 3, #ARGV do
  local p = ARGV[i]
  local v = reg_get(KEYS[1], p)
  if not v or string.sub(v, 1, 1) == 'a' then
    if not v then added = added + 1 end
    reg_put(KEYS[1], p, 'c')
  end
  if v ~= '-c' then redis.call('ZADD', KEYS[2], 'NX', now, ARGV[2] .. '|' .. p) end
end
return added
