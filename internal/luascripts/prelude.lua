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
