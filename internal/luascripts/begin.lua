-- begin.lua: start a cycle (or an operation) for one key in a single round trip.
-- KEYS[1] state hash (from layout 5 it holds the lease too: statehash.IsLeaseField),
-- KEYS[2] outbox stream, KEYS[3] holds hash, KEYS[4] items hash, KEYS[5] latest invalid
-- observations hash, KEYS[6] the layout-4 lease hash (folded into the state when found)
-- ARGV[1] owner (instance id), ARGV[2] lease TTL ms, ARGV[3] now override ms or '',
-- ARGV[4] mode: 'cycle' (checks deleted, paused and due), 'op' (an operator's action: checks
-- deleted) or 'delete' (partitions delete: checks the lease only),
-- ARGV[5] token: a random value the caller made for this grant; every fenced script checks it
-- with the epoch
-- Returns {'deleted'} | {'paused'} | {'notDue', nextDue, now} | {'leased', expiresAt, now}
--       | {'ok', epoch, now, outboxLen, {state field, value, ...} without the lease's fields,
--          {held ordering keys}, itemCount, count of identities with a latest invalid
--          observation in KEYS[5] (so a cycle reads them only where there are any)}
-- First, a layout-4 lease hash left by a migration that did not reach this key is folded into
-- the state (its epoch, a live grant's expiry and owner; never a lower epoch), which cuts off
-- any layout-4 holder. Then the checks, in order, before any other write: a live lease that
-- carries ARGV[5] (this very grant, sent again by the client after a read timeout: returned
-- as granted, not taken twice); in modes 'cycle' and 'op' deleted (partitions delete: an
-- operation that waited for a delete's lease writes nothing into the deletion mark); in mode
-- 'cycle' paused, due (nextDue <= now or outbox non-empty); a live lease. A missing outbox stream is an empty one.
local now = now_ms(ARGV[3])
local mode = ARGV[4]
local token = ARGV[5]
fold_legacy_lease(KEYS[6], KEYS[1], now)
local outbox_len = redis.call('XLEN', KEYS[2])
local function granted(epoch)
  return {'ok', epoch, now, outbox_len, state_fields(KEYS[1]), redis.call('HKEYS', KEYS[3]), redis.call('HLEN', KEYS[4]),
    redis.call('HLEN', KEYS[5])}
end
local l = redis.call('HMGET', KEYS[1], 'epoch', 'token', 'expiresAt')
if l[3] and tonumber(l[3]) > now and l[2] == token then return granted(tonumber(l[1])) end
if mode == 'op' then
  if redis.call('HGET', KEYS[1], 'deleted') == '1' then return {'deleted'} end
elseif mode == 'cycle' then
  local s = redis.call('HMGET', KEYS[1], 'paused', 'nextDue', 'deleted')
  if s[3] == '1' then return {'deleted'} end
  if s[1] == '1' then return {'paused'} end
  local next_due = tonumber(s[2] or '0')
  if next_due > now and outbox_len == 0 then return {'notDue', next_due, now} end
end
if l[3] and tonumber(l[3]) > now then return {'leased', tonumber(l[3]), now} end

local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'expiresAt', now + tonumber(ARGV[2]))
redis.call('HDEL', KEYS[1], 'write')
-- The outbox exists only while it holds entries (commit_poll.lua makes it): an empty one that
-- an older release made for every grant goes.
if outbox_len == 0 then outbox_drop_if_empty(KEYS[2], KEYS[1]) end
return granted(epoch)
