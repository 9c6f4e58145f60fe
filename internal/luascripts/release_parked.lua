-- release_parked.lua: retry or discard parked rows. A retried poison event goes back to the
-- outbox; for retry and discard alike, the hold on its ordering key is released and the held
-- events return to the outbox in their original order, followed by any entries of that
-- ordering key still waiting in the outbox (G4). Invalid rows are removed.
-- KEYS[1] lease hash, KEYS[2] outbox stream, KEYS[3] parked hash, KEYS[4] holds hash,
-- KEYS[5] held hash
-- ARGV[1] epoch, ARGV[2] now override ms or '', ARGV[3] 'retry' | 'discard', ARGV[4...] ids
-- Returns {released rows, events returned to the outbox}.
-- Fence check first: LEASE_LOST when stale or expired, before any write.
local now = now_ms(ARGV[2])
local err = fence(KEYS[1], ARGV[1], now)
if err then return err end

local function seq_less(a, b)
  local am, as = string.match(a.seq, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b.seq, '^(%d+)-(%d+)$')
  if tonumber(am) ~= tonumber(bm) then return tonumber(am) < tonumber(bm) end
  return tonumber(as) < tonumber(bs)
end
local function requeue(e)
  redis.call('XADD', KEYS[2], '*', 'id', e.id, 'ok', e.ok, 'ev', e.ev, 'seq', e.seq)
end

-- The rows, and the ordering keys whose holds they release.
local rows, releasing = {}, {}
for k = 4, #ARGV do
  local raw = redis.call('HGET', KEYS[3], ARGV[k])
  if raw then
    local row = cjson.decode(raw)
    row.pid = ARGV[k]
    rows[#rows + 1] = row
    if row.kind == 'poison' and redis.call('HGET', KEYS[4], row.event.ok) == row.pid then
      releasing[row.event.ok] = true
    end
  end
end

-- One pass over the held hash and the outbox for all released ordering keys: the held events
-- and the entries still waiting (e.g. committed by a process that died before delivering
-- them) are newer than the parked event and follow it.
local held, pending = {}, {}
if next(releasing) then
  local all = redis.call('HGETALL', KEYS[5])
  for h = 1, #all, 2 do
    local e = cjson.decode(all[h + 1])
    if releasing[e.ok] then
      held[e.ok] = held[e.ok] or {}
      table.insert(held[e.ok], e)
      redis.call('HDEL', KEYS[5], all[h])
    end
  end
  for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
    local f = {}
    for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
    if releasing[f['ok']] then
      pending[f['ok']] = pending[f['ok']] or {}
      table.insert(pending[f['ok']], {id = f['id'], ok = f['ok'], ev = f['ev'], seq = f['seq'] or e[1]})
      redis.call('XACK', KEYS[2], 'dispatch', e[1])
      redis.call('XDEL', KEYS[2], e[1])
    end
  end
end

local released, returned = 0, 0
for _, row in ipairs(rows) do
  if row.kind == 'poison' then
    local ok = row.event.ok
    if ARGV[3] == 'retry' then
      requeue(row.event)
      returned = returned + 1
    end
    if releasing[ok] then
      redis.call('HDEL', KEYS[4], ok)
      local hs = held[ok] or {}
      table.sort(hs, seq_less)
      for _, e in ipairs(hs) do
        requeue(e)
        returned = returned + 1
      end
      for _, e in ipairs(pending[ok] or {}) do requeue(e) end
      releasing[ok] = nil
    end
  end
  redis.call('HDEL', KEYS[3], row.pid)
  released = released + 1
end
return {released, returned}
