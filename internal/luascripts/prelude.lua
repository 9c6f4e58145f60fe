-- prelude.lua: prepended to every script by luascripts.Load (never run alone).
-- now_ms: the test clock override when ARGV carries one, else the Redis server clock, so
-- leases never depend on an instance's own clock.
local function now_ms(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fence: the first check of every mutating script. The lease must carry our epoch and must
-- not have expired; otherwise the script fails with LEASE_LOST before any write.
local function fence(lease_key, epoch, now)
  local l = redis.call('HMGET', lease_key, 'epoch', 'expiresAt')
  if l[1] ~= epoch then
    return redis.error_reply('LEASE_LOST epoch ' .. epoch .. ' is stale (current ' .. tostring(l[1]) .. ')')
  end
  if not l[2] or tonumber(l[2]) <= now then
    return redis.error_reply('LEASE_LOST lease of epoch ' .. epoch .. ' expired')
  end
  return nil
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
