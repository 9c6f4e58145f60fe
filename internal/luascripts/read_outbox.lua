-- read_outbox.lua: take the next deliverable outbox entries for this lease holder. Entries
-- left pending by an earlier holder come first (XAUTOCLAIM), then new ones (XREADGROUP >).
-- Entries whose ordering key is held by a parked event move to the held hash instead (G4).
-- Every holder reads as the one consumer 'holder': the lease already makes readers
-- exclusive, and a consumer per process would pile up in the group for good.
-- KEYS[1] state hash (holds the lease; a drained outbox's last id is kept there as
-- outboxLast), KEYS[2] outbox stream (missing: empty; one left empty is deleted),
-- KEYS[3] holds hash, KEYS[4] held hash
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] count
-- Returns {read, paused 0|1, {{streamId, id, orderingKey, envelope, origSeq}, ...}}: read counts
-- every entry taken, held ones included, so a batch that was all held is not taken for an
-- empty outbox; the entries are the deliverable ones, in stream order. Running it twice
-- returns the same entries (the second run reclaims them).
-- Fence check first: LEASE_LOST when the epoch or token is not ours or the lease expired,
-- before any write.
local now = now_ms(ARGV[3])
local err = fence(KEYS[1], ARGV[1], ARGV[2], now)
if err then return err end

-- A drained outbox is deleted: nothing to read (XAUTOCLAIM would fail on the missing group).
if redis.call('EXISTS', KEYS[2]) == 0 then return {0, paused(KEYS[1]), {}} end
local entries = {}
local claimed = redis.call('XAUTOCLAIM', KEYS[2], 'dispatch', 'holder', 0, '0-0', 'COUNT', ARGV[4])
for _, e in ipairs(claimed[2]) do
  if e and e[2] then entries[#entries + 1] = e end
end
if #entries == 0 then
  local r = redis.call('XREADGROUP', 'GROUP', 'dispatch', 'holder', 'COUNT', ARGV[4], 'STREAMS', KEYS[2], '>')
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
-- Entries all moved to the held hash may leave the outbox empty.
if #out == 0 then outbox_drop_if_empty(KEYS[2], KEYS[1]) end
return {#entries, paused(KEYS[1]), out}
