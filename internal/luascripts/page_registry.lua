-- page_registry.lua: a page of a poller's registry, in partition order: the entries after a
-- partition, leaf by leaf, until at least the limit (the caller sorts them and keeps the
-- limit; the next page starts after its last).
-- KEYS[1] the poller's registry index (its leaves share its {global} tag)
-- ARGV[1] '1' to start after ARGV[2], '0' to start from the first key, ARGV[2] the partition
-- to start after, ARGV[3] the limit
-- Returns {partition, entry, ...}, at least limit pairs unless the registry ends first, at
-- most limit + REG_LEAF_MAX.
-- First check: none; the script writes nothing.
local after = nil
if ARGV[1] == '1' then after = ARGV[2] end
local limit = tonumber(ARGV[3])
local out = {}
local lb = after and reg_bound(KEYS[1], after) or ''
while true do
  local all = redis.call('HGETALL', reg_leaf(KEYS[1], lb))
  for i = 1, #all, 2 do
    if not after or bytes_less(after, all[i]) then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  if #out >= limit * 2 then break end
  lb = redis.call('ZRANGEBYLEX', KEYS[1], '(' .. lb, '+', 'LIMIT', 0, 1)[1]
  if not lb then break end
end
return out
