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
-- left: it goes
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
local l = redis.call('HMGET', KEYS[1], 'epoch', 'token', 'expiresAt')
local seed = nil
if not l[1] then
  if ARGV[6] == 'gone' then
    redis.call('DEL', KEYS[1])
    return {'deleted'}
  end
  local e, f, at, age = string.match(ARGV[6], '^(%d+) (%d+) (%d+) (%d+)$')
  if not e or now - tonumber(at) > tonumber(age) then return {'fresh', now} end
  seed = {epoch = e, floor = tonumber(f)}
end
local outbox_len = redis.call('XLEN', KEYS[2])
local ready = redis.call('ZCOUNT', KEYS[3], '-inf', now)
local function granted(epoch)
  return {'ok', epoch, now, outbox_len, state_fields(KEYS[1]), ready, redis.call('HLEN', KEYS[4]), redis.call('HLEN', KEYS[5])}
end
if l[3] and tonumber(l[3]) > now and l[2] == token then return granted(tonumber(l[1])) end
if mode == 'op' then
  if redis.call('HGET', KEYS[1], 'deleted') == '1' then return {'deleted'} end
elseif mode == 'cycle' then
  local s = redis.call('HMGET', KEYS[1], 'paused', 'nextDue', 'deleted', 'blocked')
  if s[3] == '1' then return {'deleted'} end
  if s[1] == '1' then return {'paused'} end
  local next_due = tonumber(s[2] or '0')
  if next_due > now and (outbox_len == 0 or s[4]) and ready == 0 then return {'notDue', next_due, now} end
end
if l[3] and tonumber(l[3]) > now then return {'leased', tonumber(l[3]), now} end

if seed then
  -- The key's first grant (or its first since a deletion was forgotten): its epochs start
  -- above every epoch a deleted key of the poller had, and when the poller ever deleted one,
  -- its identities' lives and outbox ids start above the deleted keys' (G2). partitions add
  -- starts from nothing: what a pause racing a deletion left there does not come back.
  if mode == 'add' then redis.call('DEL', KEYS[1]) end
  redis.call('HSET', KEYS[1], 'epoch', seed.epoch)
  if seed.floor > 0 then redis.call('HSET', KEYS[1], 'incarnation', string.format('%d', math.max(now, seed.floor))) end
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'expiresAt', now + tonumber(ARGV[2]))
redis.call('HDEL', KEYS[1], 'write')
if mode == 'delete' then redis.call('HSET', KEYS[1], 'deleted', '1') end
-- A grant on a deletion mark (a delete again, an add) keeps the mark until it ends: expiring
-- under the grant, it would take the grant's epoch, which no high-water mark holds yet.
if mode == 'delete' or mode == 'add' then redis.call('PERSIST', KEYS[1]) end
return granted(epoch)
