-- release_parked.lua: retry or discard parked rows. For retry and discard alike, the hold on
-- a poison event's ordering key is released and the events of that ordering key go back to
-- the outbox in their original commit order (G4): the retried poison event itself, the held
-- events, and any entries of that ordering key still waiting in the outbox (e.g. committed by
-- a process that died before delivering them, or delivered but not acked when it died between
-- park and ack). Invalid rows are removed.
-- KEYS[1] state hash (holds the lease; the outbox is made when missing, its ids above
-- outboxLast; one left empty is deleted, its last id kept there), KEYS[2] outbox stream,
-- KEYS[3] parked hash, KEYS[4] holds hash, KEYS[5] held hash, KEYS[6] latest invalid
-- observations hash (an invalid row removed is forgotten there if it is its identity's entry)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id,
-- ARGV[5] 'retry' | 'discard', ARGV[6...] ids
-- Returns {released rows, events returned to the outbox}; a write id applied before returns
-- the reply it had then, having written nothing.
-- Fence check first, before any write: LEASE_LOST when the epoch or token is not ours; then
-- the write id (applied before: the reply above, even if the lease expired since); then
-- LEASE_LOST when the lease expired.
local now = now_ms(ARGV[3])
local err, dup = fence(KEYS[1], ARGV[1], ARGV[2], now, ARGV[4])
if err then return err end
if dup then
  local r = redis.call('HGET', KEYS[1], 'reply') or '0,0'
  local a, b = string.match(r, '^(%d+),(%d+)$')
  return {tonumber(a), tonumber(b)}
end

-- Sequences are parsed once per event, not once per comparison: a hot ordering key can hold
-- a hundred thousand events.
local function parse_seq(e)
  local m, q = string.match(e.seq, '^(%d+)-(%d+)$')
  e.m, e.q = tonumber(m), tonumber(q)
  return e
end
local function seq_less(a, b)
  if a.m ~= b.m then return a.m < b.m end
  return a.q < b.q
end

-- The rows, and the ordering keys whose holds they release.
local rows, releasing = {}, {}
for k = 6, #ARGV do
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

-- One pass over the held hash and the outbox for all released ordering keys.
local back = {} -- ordering key -> events to requeue
if next(releasing) then
  local all = redis.call('HGETALL', KEYS[5])
  for h = 1, #all, 2 do
    local e = cjson.decode(all[h + 1])
    if releasing[e.ok] then
      back[e.ok] = back[e.ok] or {}
      table.insert(back[e.ok], parse_seq(e))
      redis.call('HDEL', KEYS[5], all[h])
    end
  end
  for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
    local f = {}
    for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
    if releasing[f['ok']] then
      back[f['ok']] = back[f['ok']] or {}
      table.insert(back[f['ok']], parse_seq({id = f['id'], ok = f['ok'], ev = f['ev'], seq = f['seq'] or e[1]}))
      redis.call('XACK', KEYS[2], 'dispatch', e[1])
      redis.call('XDEL', KEYS[2], e[1])
    end
  end
end

local released, returned = 0, 0
for _, row in ipairs(rows) do
  if row.kind == 'poison' then
    local ok = row.event.ok
    local evs = back[ok] or {}
    if ARGV[5] == 'retry' then table.insert(evs, parse_seq(row.event)) end
    if releasing[ok] then
      redis.call('HDEL', KEYS[4], ok)
      releasing[ok] = nil
    end
    table.sort(evs, seq_less)
    for _, e in ipairs(evs) do
      redis.call('XADD', KEYS[2], outbox_open(KEYS[2], KEYS[1]), 'id', e.id, 'ok', e.ok, 'ev', e.ev, 'seq', e.seq)
      returned = returned + 1
    end
    back[ok] = nil
  end
  redis.call('HDEL', KEYS[3], row.pid)
  if row.kind == 'invalid' and type(row.identity) == 'string' and row.identity ~= '' then
    if indexed(KEYS[6], row.identity) == row.pid then redis.call('HDEL', KEYS[6], row.identity) end
  end
  released = released + 1
end
outbox_drop_if_empty(KEYS[2], KEYS[1])
redis.call('HSET', KEYS[1], 'write', ARGV[4], 'reply', released .. ',' .. returned)
return {released, returned}
