-- release_parked.lua: retry or discard parked rows. For retry and discard alike, the hold on
-- a poison event's ordering key is released: its held events become deliverable, oldest
-- first, before anything newer of that ordering key (read_outbox.lua), and a retried poison
-- event joins them in its commit order (G4). Invalid rows are removed. The cost is that of
-- the rows named, whatever the outbox and the held events hold.
-- KEYS[1] state hash (holds the lease), KEYS[2] parked hash, KEYS[3] parked ids sorted set,
-- KEYS[4] holds hash, KEYS[5] held events sorted set, KEYS[6] released ordering keys sorted
-- set, KEYS[7] latest invalid observations hash (an invalid row removed is forgotten there if
-- it is its identity's entry)
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] now override ms or '', ARGV[4] write id,
-- ARGV[5] 'retry' | 'discard', ARGV[6...] ids
-- Returns {released rows, events returned to delivery}; a write id applied before returns the
-- reply it had then, having written nothing.
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

local released, returned = 0, 0
for k = 6, #ARGV do
  local pid = ARGV[k]
  local raw = redis.call('HGET', KEYS[2], pid)
  if raw then
    local row = cjson.decode(raw)
    if row.kind == 'poison' and type(row.event) == 'table' then
      local ok = row.event.ok
      if redis.call('HGET', KEYS[4], ok) == pid then redis.call('HDEL', KEYS[4], ok) end
      if ARGV[5] == 'retry' then
        redis.call('ZADD', KEYS[5], 0, held_member(ok, row.event.seq, cjson.encode(row.event)))
      end
      if redis.call('HEXISTS', KEYS[4], ok) == 0 and held_first(KEYS[5], ok) then
        redis.call('ZADD', KEYS[6], 'NX', now, ok)
        local p = held_prefix(ok)
        returned = returned + redis.call('ZLEXCOUNT', KEYS[5], '[' .. p, '(' .. p .. ':')
      end
    end
    redis.call('HDEL', KEYS[2], pid)
    redis.call('ZREM', KEYS[3], pid)
    if row.kind == 'invalid' and type(row.identity) == 'string' and row.identity ~= '' then
      if indexed(KEYS[7], row.identity) == pid then redis.call('HDEL', KEYS[7], row.identity) end
    end
    released = released + 1
  end
end
redis.call('HSET', KEYS[1], 'write', ARGV[4], 'reply', released .. ',' .. returned)
return {released, returned}
