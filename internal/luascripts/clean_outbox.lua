-- clean_outbox.lua: migrate 2→3: hand every pending entry of a key's outbox group to the
-- fixed consumer ARGV[1], then delete every other consumer (layout 2 left one per process
-- lifetime). Claiming and deleting in one script means no entry read in between can be
-- dropped with its consumer (XGROUP DELCONSUMER discards the consumer's pending entries).
-- KEYS[1] outbox stream
-- ARGV[1] the holder consumer ('holder')
-- Returns {pending entries handed to the holder, consumers deleted}.
-- First check: the stream and its group 'dispatch' exist; otherwise nothing is written.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
-- field reads a field of an XINFO reply (a flat name, value list in scripts).
local function field(reply, name)
  for i = 1, #reply, 2 do
    if reply[i] == name then return reply[i + 1] end
  end
end
local has_group = false
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  if field(g, 'name') == 'dispatch' then has_group = true end
end
if not has_group then return {0, 0} end

local moved, cursor = 0, '0-0'
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], 'dispatch', ARGV[1], 0, cursor, 'COUNT', 1000)
  cursor = r[1]
  moved = moved + #r[2]
until cursor == '0-0'
local deleted = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], 'dispatch')) do
  local name = field(c, 'name')
  if name ~= ARGV[1] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], 'dispatch', name)
    deleted = deleted + 1
  end
end
return {moved, deleted}
