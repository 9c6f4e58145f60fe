-- read_outbox.lua: take the next deliverable outbox entries for this lease holder. Entries
-- left pending by an earlier owner come first (XAUTOCLAIM), then new ones (XREADGROUP >).
-- Entries whose ordering key is held by a parked event move to the held hash instead (G4).
-- KEYS[1] lease hash, KEYS[2] outbox stream, KEYS[3] holds hash, KEYS[4] held hash
-- ARGV[1] epoch, ARGV[2] now override ms or '', ARGV[3] consumer name, ARGV[4] count
-- Returns {{streamId, id, orderingKey, envelope, origSeq}, ...} in stream order.
-- Fence check first: LEASE_LOST when stale or expired, before any write.
local now = now_ms(ARGV[2])
local err = fence(KEYS[1], ARGV[1], now)
if err then return err end

local entries = {}
local claimed = redis.call('XAUTOCLAIM', KEYS[2], 'dispatch', ARGV[3], 0, '0-0', 'COUNT', ARGV[4])
for _, e in ipairs(claimed[2]) do
  if e and e[2] then entries[#entries + 1] = e end
end
if #entries == 0 then
  local r = redis.call('XREADGROUP', 'GROUP', 'dispatch', ARGV[3], 'COUNT', ARGV[4], 'STREAMS', KEYS[2], '>')
  if r and r[1] then entries = r[1][2] end
end

local out = {}
for _, e in ipairs(entries) do
  local f = {}
  local kv = e[2]
  for k = 1, #kv, 2 do f[kv[k]] = kv[k + 1] end
  local seq = f['seq'] or e[1]
  if redis.call('HEXISTS', KEYS[3], f['ok']) == 1 then
    redis.call('HSET', KEYS[4], e[1], cjson.encode({id = f['id'], ok = f['ok'], ev = f['ev'], seq = seq}))
    redis.call('XACK', KEYS[2], 'dispatch', e[1])
    redis.call('XDEL', KEYS[2], e[1])
  else
    out[#out + 1] = {e[1], f['id'], f['ok'], f['ev'], seq}
  end
end
return out
