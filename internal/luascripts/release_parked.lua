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

-- take_pending removes the outbox entries of ordering key ok that wait undelivered (e.g.
-- committed by a process that died before delivering them): they are newer than the parked
-- event and must follow it and the held events back into the outbox.
local function take_pending(ok)
  local out = {}
  for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
    local f = {}
    for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
    if f['ok'] == ok then
      out[#out + 1] = {id = f['id'], ok = f['ok'], ev = f['ev'], seq = f['seq'] or e[1]}
      redis.call('XACK', KEYS[2], 'dispatch', e[1])
      redis.call('XDEL', KEYS[2], e[1])
    end
  end
  return out
end

local released, returned = 0, 0
for k = 4, #ARGV do
  local pid = ARGV[k]
  local raw = redis.call('HGET', KEYS[3], pid)
  if raw then
    local row = cjson.decode(raw)
    if row.kind == 'poison' then
      local holds = redis.call('HGET', KEYS[4], row.event.ok) == pid
      local pending = {}
      if holds then pending = take_pending(row.event.ok) end
      if ARGV[3] == 'retry' then
        requeue(row.event)
        returned = returned + 1
      end
      if holds then
        redis.call('HDEL', KEYS[4], row.event.ok)
        local held = {}
        local all = redis.call('HGETALL', KEYS[5])
        for h = 1, #all, 2 do
          local e = cjson.decode(all[h + 1])
          if e.ok == row.event.ok then
            held[#held + 1] = e
            redis.call('HDEL', KEYS[5], all[h])
          end
        end
        table.sort(held, seq_less)
        for _, e in ipairs(held) do
          requeue(e)
          returned = returned + 1
        end
        for _, e in ipairs(pending) do
          requeue(e)
        end
      end
    end
    redis.call('HDEL', KEYS[3], pid)
    released = released + 1
  end
end
return {released, returned}
