-- read_outbox.lua: take the next deliverable events for this lease holder: first the held
-- events of ordering keys released by now (a parked event retried or discarded, a failed
-- event's wait over), oldest first, then
-- the outbox: entries left pending by an earlier holder (XAUTOCLAIM), then new ones
-- (XREADGROUP >). An outbox entry whose ordering key is held by a parked event, or still has
-- released events to deliver, joins that ordering key's held events instead (G4): they are
-- older than it. So does one whose ordering key waits for a failed event's next try.
-- Every holder reads as the one consumer 'holder': the lease already makes readers
-- exclusive, and a consumer per process would pile up in the group for good.
-- KEYS[1] state hash (holds the lease; a drained outbox's last id is kept there as
-- outboxLast), KEYS[2] outbox stream (missing: empty; one left empty is deleted),
-- KEYS[3] holds hash, KEYS[4] held events sorted set, KEYS[5] released ordering keys sorted
-- set
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] count
-- Returns {read, paused 0|1, {{streamId, id, orderingKey, envelope, origSeq, heldMember,
-- retry}, ...}}:
-- read counts every entry taken, those that joined held events included, so a batch whose
-- entries all did is not taken for an empty outbox; the entries are the deliverable ones
-- (released held events carry their member's name, held_name, and no stream id, outbox
-- entries the reverse; retry is a held event's retry record, JSON, or '').
-- Running it twice returns the same entries (the second run reclaims them).
-- Fence check first: LEASE_LOST when the epoch or token is not ours or the lease expired,
-- before any write.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end
local count = tonumber(ARGV[4])

local out = {}
for _, ok in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, count)) do
  local p = held_prefix(ok)
  local ms = redis.call('ZRANGEBYLEX', KEYS[4], '[' .. p, '(' .. p .. ':', 'LIMIT', 0, count - #out)
  if #ms == 0 then redis.call('ZREM', KEYS[5], ok) end
  for _, m in ipairs(ms) do
    local name, entry = held_name(m)
    local e = cjson.decode(entry)
    local retry = ''
    if type(e.r) == 'table' then retry = cjson.encode(e.r) end
    out[#out + 1] = {'', e.id, e.ok, e.ev, e.seq, name, retry}
  end
  if #out >= count then break end
end
local read = #out
-- A drained outbox is deleted: nothing to read (XAUTOCLAIM would fail on the missing group).
if #out >= count or redis.call('EXISTS', KEYS[2]) == 0 then return {read, paused(KEYS[1]), out} end

local entries = {}
local claimed = redis.call('XAUTOCLAIM', KEYS[2], 'dispatch', 'holder', 0, '0-0', 'COUNT', count - #out)
for _, e in ipairs(claimed[2]) do
  if e and e[2] then entries[#entries + 1] = e end
end
if #entries == 0 then
  local r = redis.call('XREADGROUP', 'GROUP', 'dispatch', 'holder', 'COUNT', count - #out, 'STREAMS', KEYS[2], '>')
  if r and r[1] then entries = r[1][2] end
end
local moved = 0
for _, e in ipairs(entries) do
  local f = {}
  local kv = e[2]
  for k = 1, #kv, 2 do f[kv[k]] = kv[k + 1] end
  local seq = f['seq'] or e[1]
  if redis.call('HEXISTS', KEYS[3], f['ok']) == 1 or redis.call('ZSCORE', KEYS[5], f['ok']) then
    redis.call('ZADD', KEYS[4], 0, held_member(f['ok'], seq, cjson.encode({id = f['id'], ok = f['ok'], ev = f['ev'], seq = seq})))
    redis.call('XACK', KEYS[2], 'dispatch', e[1])
    redis.call('XDEL', KEYS[2], e[1])
    moved = moved + 1
  else
    out[#out + 1] = {e[1], f['id'], f['ok'], f['ev'], seq, '', ''}
  end
end
-- Entries that all joined held events may leave the outbox empty.
if moved > 0 then outbox_drop_if_empty(KEYS[2], KEYS[1]) end
return {read + #entries, paused(KEYS[1]), out}
