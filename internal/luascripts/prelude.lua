-- prelude.lua: prepended to every script by luascripts.Source (never run alone).
-- now_ms: the test clock override when ARGV carries one (only tests inside the module can set
-- it), else the Redis server clock, so leases never depend on an instance's own clock.
local function now_ms(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- now_us: now_ms in microseconds (budgets pace requests closer than a millisecond apart).
local function now_us(override)
  if override ~= nil and override ~= '' then return tonumber(override) * 1000 end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- fence: the first check of every mutating script. The lease must carry our epoch and our
-- grant's token (an epoch alone can repeat after a failover lost the grant that raised it)
-- and must not have expired; otherwise the script fails with LEASE_LOST before any write.
-- wid, when not '', names this write with a number that grows with every write of the grant:
-- a write whose number is not above the last one the lease recorded ran before (the client
-- re-sent it after a read timeout) or is overtaken (a late copy arriving after later writes),
-- and returns true for "already applied", so the caller writes nothing.
local function fence(lease_key, epoch, token, now, wid)
  local l = redis.call('HMGET', lease_key, 'epoch', 'token', 'expiresAt', 'write')
  if l[1] ~= epoch or l[2] ~= token then
    return redis.error_reply('LEASE_LOST epoch ' .. epoch .. ' is stale (current ' .. tostring(l[1]) .. ')')
  end
  if wid ~= nil and wid ~= '' and l[4] and tonumber(wid) <= tonumber(l[4]) then return nil, true end
  if not l[3] or tonumber(l[3]) <= now then
    return redis.error_reply('LEASE_LOST lease of epoch ' .. epoch .. ' expired')
  end
  return nil, false
end

-- DUPLICATE is the reply of a write that was applied before (see fence).
local DUPLICATE = {ok = 'DUPLICATE'}

-- paused reads the pause flag, which fenced scripts return so a running cycle stops at its
-- next step once an operator paused the key.
local function paused(state_key)
  return redis.call('HGET', state_key, 'paused') == '1' and 1 or 0
end

-- chunked: call cmd(key, args[from..to]) in slices, since unpack() of a huge table overflows
-- the Lua stack.
local function chunked(cmd, key, args, from, to, step)
  local i = from
  while i <= to do
    local j = math.min(i + step - 1, to)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- indexed: the parked id that an identity's entry in the invalid-observation index names
-- (entries are "parkedId\nversion"), or nil.
local function indexed(index_key, identity)
  local v = redis.call('HGET', index_key, identity)
  if not v then return nil end
  return string.match(v, '^[^\n]*')
end

-- The outbox stream exists only while it holds entries: an empty stream with its group costs
-- ~700 B of Redis per key (issue 14). outbox_open makes it (with the group 'dispatch') before
-- an XADD and returns the id for that XADD: '*', unless the key's outbox was deleted and the
-- server clock is not past the last id it ever gave (state field outboxLast: the clock moved
-- back, e.g. after a failover), then the id right after that one, so ids never go backwards.
local function outbox_open(outbox_key, state_key)
  if redis.call('EXISTS', outbox_key) == 1 then return '*' end
  redis.call('XGROUP', 'CREATE', outbox_key, 'dispatch', '0', 'MKSTREAM')
  local last = redis.call('HGET', state_key, 'outboxLast')
  local lms, lseq = string.match(last or '', '^(%d+)-(%d+)$')
  if not lms then return '*' end
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(lms) then return '*' end
  return lms .. '-' .. string.format('%d', tonumber(lseq) + 1)
end

-- outbox_last: the last id the outbox stream gave ('0-0' for none), or nil without a stream.
local function outbox_last(outbox_key)
  if redis.call('EXISTS', outbox_key) == 0 then return nil end
  local info = redis.call('XINFO', 'STREAM', outbox_key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then return info[i + 1] end
  end
  return nil
end

-- outbox_drop_if_empty deletes a drained outbox stream (no entry left; an id the group still
-- lists as pending names a deleted entry, nothing to deliver), keeping its last id in the
-- state (outboxLast) for outbox_open.
local function outbox_drop_if_empty(outbox_key, state_key)
  if redis.call('XLEN', outbox_key) ~= 0 then return end
  local last = outbox_last(outbox_key)
  if not last then return end
  if last ~= '0-0' then redis.call('HSET', state_key, 'outboxLast', last) end
  redis.call('DEL', outbox_key)
end
