-- begin.lua: start a cycle (or an operation) for one key in a single round trip.
-- KEYS[1] state hash (it holds the lease too: statehash.IsLeaseField), KEYS[2] outbox stream,
-- KEYS[3] released ordering keys sorted set, KEYS[4] items hash, KEYS[5] latest invalid
-- observations hash
-- ARGV[1] owner (instance id), ARGV[2] lease TTL ms, ARGV[3] now override ms or '',
-- ARGV[4] mode: 'cycle' (checks deleted, paused and due), 'op' (an operator's action: checks
-- deleted), 'delete' (partitions delete: checks the lease only, and marks the key deleted as
-- it grants) or 'add' (partitions add: checks the lease only),
-- ARGV[5] token: a random value the caller made for this grant; every fenced script checks it
-- with the epoch,
-- ARGV[6] seed: '' or, for a key without an epoch (never begun, or deleted and forgotten),
-- 'epoch floor at maxAge': the poller's high-water marks, read from the registry after this
-- key's clock said 'at' (ms), good for maxAge ms; or 'gone': the registry has no such key (or
-- it is deleted), and a state without an epoch is what a trigger or pause racing a deletion
-- left: it goes; or 'registry': on one server (not a cluster, where the registry lives in
-- another slot), this script reads the seed itself from KEYS[6] the poller's registry index
-- and KEYS[7] the high-water marks hash, for ARGV[7] the poller and ARGV[8] the partition
-- Returns {'fresh', now} (no epoch, and no seed or one older than its maxAge: the caller reads
--       the registry and sends one) | {'deleted'} | {'paused'} | {'notDue', nextDue, now}
--       | {'leased', expiresAt, now}
--       | {'ok', epoch, now, outboxLen, {state field, value, ...} without the lease's fields,
--          count of ordering keys released by now (their held events are deliverable),
--          itemCount, count of identities with a latest invalid observation in KEYS[5] (so a
--          cycle reads them only where there are any)}
-- The checks, in order, before any write: a key without an epoch needs a seed no older than
-- its maxAge (a deletion completed since it was read left a mark, which lives longer, or its
-- age refuses it); a live lease that carries ARGV[5] (this very grant, sent again by the
-- client after a read timeout: returned as granted, not taken twice); in modes 'cycle' and
-- 'op' deleted (an operation that waited for a delete's lease writes nothing into the
-- deletion mark); in mode 'cycle' paused, due (nextDue <= now, or outbox entries to deliver
-- while the key's delivery is not blocked, or held events released by now); a live lease. A
-- missing outbox stream is an empty one.
local now = now_ms(ARGV[3])
local mode = ARGV[4]
local token = ARGV[5]
-- The whole state in one read: the lease, the checks and the reply all come from it.
local all = redis.call('HGETALL', KEYS[1])
local h = {}
for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
local seed = nil
if not h.epoch then
  local s = ARGV[6]
  if s == 'registry' then
    local e, f = string.match(redis.call('HGET', KEYS[7], ARGV[7]) or '', '^(%d+) (%d+)$')
    local entry = reg_get(KEYS[6], ARGV[8])
    if (mode == 'cycle' or mode == 'op') and (not entry or string.sub(entry, 1, 1) == '-') then
      s = 'gone'
    else
      seed = {epoch = e or '0', floor = tonumber(f or '0')}
    end
  end
  if s == 'gone' then
    redis.call('DEL', KEYS[1])
    return {'deleted'}
  end
  if not seed then
    local e, f, at, age = string.match(s, '^(%d+) (%d+) (%d+) (%d+)$')
    if not e or now - tonumber(at) > tonumber(age) then return {'fresh', now} end
    seed = {epoch = e, floor = tonumber(f)}
  end
end
-- An idle key has no outbox, released ordering keys or invalid observations: one EXISTS
-- tells, where reading each would be a command apiece.
local outbox_len, ready, invalid = 0, 0, 0
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[5]) > 0 then
  outbox_len = redis.call('XLEN', KEYS[2])
  ready = redis.call('ZCOUNT', KEYS[3], '-inf', now)
  invalid = redis.call('HLEN', KEYS[5])
end
local function granted(epoch)
  local fields = {}
  for k, v in pairs(h) do
    if not LEASE_FIELDS[k] then
      fields[#fields + 1] = k
      fields[#fields + 1] = v
    end
  end
  return {'ok', epoch, now, outbox_len, fields, ready, redis.call('HLEN', KEYS[4]), invalid}
end
local expires = tonumber(h.expiresAt or '0')
if expires > now and h.token == token then return granted(tonumber(h.epoch)) end
if mode == 'op' then
  if h.deleted == '1' then return {'deleted'} end
elseif mode == 'cycle' then
  if h.deleted == '1' then return {'deleted'} end
  if h.paused == '1' then return {'paused'} end
  local next_due = tonumber(h.nextDue or '0')
  if next_due > now and (outbox_len == 0 or h.blocked) and ready == 0 then return {'notDue', next_due, now} end
end
if expires > now then return {'leased', expires, now} end

-- The grant's fields go in one HSET: the epoch one above the last (or the seed's), computed
-- here while its digits are exact as a Lua number; past that HINCRBY raises it first, before
-- anything else is written, so that its failure (past int64) leaves the state as it was. The
-- stored epoch stays exact past 2^53; the reply carries it as a Lua number.
local base = h.epoch
local grant = {}
if seed then
  -- The key's first grant (or its first since a deletion was forgotten): its epochs start
  -- above every epoch a deleted key of the poller had, and when the poller ever deleted one,
  -- its identities' lives and outbox ids start above the deleted keys' (G2). partitions add
  -- starts from nothing: what a pause racing a deletion left there does not come back.
  if mode == 'add' then
    redis.call('DEL', KEYS[1])
    h = {}
  end
  base = seed.epoch
  if seed.floor > 0 then
    h.incarnation = string.format('%d', math.max(now, seed.floor))
    grant = {'incarnation', h.incarnation}
  end
end
base = base or '0'
local epoch
if #base < 16 then
  epoch = tonumber(base) + 1
  grant[#grant + 1] = 'epoch'
  grant[#grant + 1] = string.format('%d', epoch)
else
  if seed then redis.call('HSET', KEYS[1], 'epoch', base) end
  epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
end
grant[#grant + 1] = 'owner'
grant[#grant + 1] = ARGV[1]
grant[#grant + 1] = 'token'
grant[#grant + 1] = token
grant[#grant + 1] = 'expiresAt'
grant[#grant + 1] = now + tonumber(ARGV[2])
-- The last grant's write id goes (0: no write of this grant yet).
if h.write then
  grant[#grant + 1] = 'write'
  grant[#grant + 1] = '0'
end
if mode == 'delete' then
  h.deleted = '1'
  grant[#grant + 1] = 'deleted'
  grant[#grant + 1] = '1'
end
redis.call('HSET', KEYS[1], unpack(grant))
-- A grant on a deletion mark (a delete again, an add) keeps the mark until it ends: expiring
-- under the grant, it would take the grant's epoch, which no high-water mark holds yet.
if mode == 'delete' or mode == 'add' then redis.call('PERSIST', KEYS[1]) end
return granted(epoch)
