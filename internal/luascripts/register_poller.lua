-- register_poller.lua: write one poller's pollers entry and keep the registry to the keys that
-- the entry does not list (issue 14: a config key costs no registry entry, its poller's entry
-- lists it). When the entry changes: a key the old entry listed and the new one drops gets
-- {"source":"config"} (it stays registered, as a config key dropped from the config always
-- did), unless it has an entry; an entry of a key the new one lists goes (a partitions add of
-- it wrote one; the config lists it now). An entry without partitions lists the poller's one
-- unpartitioned key (partition '').
-- KEYS[1] the pollers hash, KEYS[2] registry hash (both under {global})
-- ARGV[1] the poller's name, ARGV[2] its new pollers entry (JSON)
-- Returns {changed: 1, or 0 when the entry was already ARGV[2]; registry entries written;
--   registry entries removed}.
-- First check: the old entry equals ARGV[2]; then nothing is written.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old == ARGV[2] then return {0, 0, 0} end
-- listed: the partitions an entry lists, nil when it is not a JSON object.
local function listed(raw)
  local ok, v = pcall(cjson.decode, raw)
  if not ok or type(v) ~= 'table' then return nil end
  local out = {}
  if type(v['partitions']) == 'table' then
    for _, p in ipairs(v['partitions']) do
      if type(p) == 'string' then out[#out + 1] = p end
    end
  end
  if #out == 0 then out[1] = '' end
  return out
end
local new = listed(ARGV[2])
if not new then
  return redis.error_reply('BAD_ENTRY the pollers entry of ' .. ARGV[1] .. ' is not a JSON object')
end
local in_new = {}
for _, p in ipairs(new) do in_new[p] = true end
local prefix = ARGV[1] .. '|'
local written = 0
if old then
  for _, p in ipairs(listed(old) or {}) do
    if not in_new[p] then
      written = written + redis.call('HSETNX', KEYS[2], prefix .. p, '{"source":"config"}')
    end
  end
end
local before = redis.call('HLEN', KEYS[2])
if before > 0 then
  local drop = {}
  if before <= #new then
    -- Fewer entries than listed keys (the usual case: entries are cli keys): look at those.
    for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
      if string.sub(f, 1, #prefix) == prefix and in_new[string.sub(f, #prefix + 1)] then
        drop[#drop + 1] = f
      end
    end
  else
    for i, p in ipairs(new) do drop[i] = prefix .. p end
  end
  chunked('HDEL', KEYS[2], drop, 1, #drop, 1000)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {1, written, before - redis.call('HLEN', KEYS[2])}
