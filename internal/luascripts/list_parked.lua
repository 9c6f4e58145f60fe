-- list_parked.lua: a page of a key's parked rows whose ids start with a prefix (poison events
-- are named by their event ids, 'ev_...', invalid items 'inv_...'), in id order.
-- KEYS[1] parked hash, KEYS[2] parked ids sorted set
-- ARGV[1] the id to start after ('' from the first), ARGV[2] the limit, ARGV[3] the prefix
-- ('' for every row)
-- Returns {id, row JSON, ...}, at most limit pairs.
-- First check: none; the script writes nothing.
local prefix = ARGV[3]
local from, to = '-', '+'
if prefix ~= '' then
  from = '[' .. prefix
  to = '(' .. string.sub(prefix, 1, -2) .. string.char(string.byte(prefix, -1) + 1)
end
if ARGV[1] ~= '' and (prefix == '' or not bytes_less(ARGV[1], prefix)) then from = '(' .. ARGV[1] end
local ids = redis.call('ZRANGEBYLEX', KEYS[2], from, to, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return {} end
local rows = redis.call('HMGET', KEYS[1], unpack(ids))
local out = {}
for i, id in ipairs(ids) do
  if rows[i] then
    out[#out + 1] = id
    out[#out + 1] = rows[i]
  end
end
return out
