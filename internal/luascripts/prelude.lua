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

-- fence: the first check of every mutating script. The lease (its fields in the state hash)
-- must carry our epoch and our grant's token (an epoch alone can repeat after a failover lost
-- the grant that raised it) and must not have expired; otherwise the script fails with
-- LEASE_LOST before any write.
-- wid, when not '', names this write with a number that grows with every write of the grant:
-- a write whose number is not above the last one the lease recorded ran before (the client
-- re-sent it after a read timeout) or is overtaken (a late copy arriving after later writes),
-- and returns true for "already applied", so the caller writes nothing.
local function fence(state_key, epoch, token, now, wid)
  local l = redis.call('HMGET', state_key, 'epoch', 'token', 'expiresAt', 'write')
  if l[1] ~= epoch or l[2] ~= token then
    return redis.error_reply('LEASE_LOST epoch ' .. epoch .. ' is stale (current ' .. tostring(l[1]) .. ')')
  end
  if wid ~= nil and wid ~= '' and l[4] and tonumber(wid) <= tonumber(l[4]) then return nil, true end
  if not l[3] or tonumber(l[3]) <= now then
    return redis.error_reply('LEASE_LOST lease of epoch ' .. epoch .. ' expired')
  end
  return nil, false
end

-- The lease's fields in the state hash (layout 5; before it they were a hash of their own,
-- prefix:{key}:lease): epoch, token, owner, expiresAt, write, reply. Go names them in
-- statehash (LeaseEpoch, ..., IsLeaseField).
local LEASE_FIELDS = {epoch = true, token = true, owner = true, expiresAt = true, write = true, reply = true}

-- state_fields: the state hash as field, value pairs without the lease's fields, which are
-- the scripts' business, never the cycle's.
local function state_fields(state_key)
  local all = redis.call('HGETALL', state_key)
  local out = {}
  for i = 1, #all, 2 do
    if not LEASE_FIELDS[all[i]] then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end

-- fold_legacy_lease moves a layout-4 lease hash into the state hash and deletes it, so that
-- its holder (a layout-4 process, whose fence reads that hash) is cut off. The state takes the
-- higher epoch, so epochs never repeat; raising it cuts off a live state lease too, which
-- then keeps the key leased until it would have lapsed. A live layout-4 grant that the state
-- does not hold live under an epoch at least as high keeps the key leased until it would have
-- expired, under a token no one holds (its holder may still be delivering). Returns 1 when it
-- folded a hash, else 0.
local function fold_legacy_lease(legacy_key, state_key, now)
  if redis.call('EXISTS', legacy_key) == 0 then return 0 end
  local o = redis.call('HMGET', legacy_key, 'epoch', 'owner', 'expiresAt')
  local s = redis.call('HMGET', state_key, 'epoch', 'expiresAt')
  local oe, se = tonumber(o[1] or '0'), tonumber(s[1] or '0')
  local o_exp, s_exp = tonumber(o[3] or '0'), tonumber(s[2] or '0')
  local raised = oe > se
  if raised then redis.call('HSET', state_key, 'epoch', string.format('%d', oe)) end
  if o_exp > now and (raised or s_exp <= now) then
    redis.call('HSET', state_key, 'owner', o[2] or '', 'expiresAt', string.format('%d', math.max(o_exp, s_exp)), 'token', 'layout-4')
    redis.call('HDEL', state_key, 'write', 'reply')
  end
  redis.call('DEL', legacy_key)
  return 1
end

-- claim_mark: the fraction of a millisecond a marked claim adds to its keys' due scores until
-- confirmed (claim_due.lua, confirm_claims.lua), n/1024 for the claim's own n in 1..1023: every
-- other writer of a due time writes whole milliseconds, so a confirmation can tell that no
-- cycle's end, trigger or hold came since, and another claim in the same millisecond has
-- another n but once in 1023. Exact in a double below 2^43 ms (the year 2248).
local function claim_mark(n)
  return tonumber(n) / 1024
end

-- poller_claim_ms: how long a claim of the poller's keys holds them: fixed when not 0, else
-- the leaseTTLMs its entry in the pollers hash records plus grace, else default_ms (an entry
-- of an older release). cache[slot] keeps the answer for the rest of the script.
local function poller_claim_ms(pollers_key, poller, fixed, grace, default_ms, cache, slot)
  if fixed > 0 then return fixed end
  if not cache[slot] then
    cache[slot] = default_ms
    local info = redis.call('HGET', pollers_key, poller)
    -- Found, not decoded: the entry lists every partition (1.6 MB at 100,000), which cjson
    -- took 23 ms to decode at every claim; a plain find takes about 1 ms. The text cannot
    -- occur inside a JSON string, where every '"' is escaped.
    local at = info and string.find(info, '"leaseTTLMs":', 1, true)
    local ttl = at and string.match(info, '^%d+', at + 13)
    if ttl then cache[slot] = tonumber(ttl) + grace end
  end
  return cache[slot]
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

-- stream_id parses a stream id into its milliseconds and sequence; nil for anything else
-- (miniredis reports an empty stream's last id as '', Redis as '0-0').
local function stream_id(s)
  local ms, seq = string.match(s or '', '^(%d+)%-(%d+)$')
  if not ms or s == '0-0' then return nil end
  return tonumber(ms), tonumber(seq)
end

-- later_id: the higher of two stream ids, either of which may be missing or no id; nil when
-- neither is one.
local function later_id(a, b)
  local am, as = stream_id(a)
  local bm, bs = stream_id(b)
  if not am then
    if bm then return b end
    return nil
  end
  if bm and (bm > am or (bm == am and bs > as)) then return b end
  return a
end

-- The outbox stream exists only while it holds entries: an empty stream with its group costs
-- ~700 B of Redis per key (issue 14). outbox_open makes it (with the group 'dispatch') before
-- an XADD and returns the id for that XADD: '*' for a key that never had an outbox, else an
-- explicit id above the last one it ever gave (state field outboxLast), so ids never go
-- backwards when the clock does (a failover). Never '*' on a made-again stream: from Redis 7.2
-- XADD * takes the time the script started, which can be at or before outboxLast while TIME
-- is past it.
local function outbox_open(outbox_key, state_key)
  if redis.call('EXISTS', outbox_key) == 1 then return '*' end
  redis.call('XGROUP', 'CREATE', outbox_key, 'dispatch', '0', 'MKSTREAM')
  local lms, lseq = stream_id(redis.call('HGET', state_key, 'outboxLast'))
  if not lms then return '*' end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now > lms then return string.format('%d-0', now) end
  return string.format('%d-%d', lms, lseq + 1)
end

-- outbox_last: the last id the outbox stream gave, or nil without a stream or an id.
local function outbox_last(outbox_key)
  if redis.call('EXISTS', outbox_key) == 0 then return nil end
  local info = redis.call('XINFO', 'STREAM', outbox_key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' and stream_id(info[i + 1]) then return info[i + 1] end
  end
  return nil
end

-- outbox_drop_if_empty deletes a drained outbox stream (no entry left; an id the group still
-- lists as pending names a deleted entry, nothing to deliver), keeping the higher of its last
-- id and the state's outboxLast there for outbox_open: never a lower one.
local function outbox_drop_if_empty(outbox_key, state_key)
  if redis.call('XLEN', outbox_key) ~= 0 or redis.call('EXISTS', outbox_key) == 0 then return end
  local kept = redis.call('HGET', state_key, 'outboxLast')
  local last = later_id(kept, outbox_last(outbox_key))
  if last and last ~= kept then redis.call('HSET', state_key, 'outboxLast', last) end
  redis.call('DEL', outbox_key)
end
