-- prelude.lua: prepended to each script by luascripts.Source, as far as the script uses it (never run alone).
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

-- expiry_slack: what a key that expires once its state says nothing more (a full budget
-- bucket) keeps past that, in ms. Redis expires keys on its own clock, which a test's clock
-- (the override) does not move: under one the key keeps an hour more, so it never goes early in
-- the test's time.
local function expiry_slack(override)
  if override ~= nil and override ~= '' then return 3600000 end
  return 1000
end

-- fence: the first check of every mutating script. The lease (its fields in the state hash)
-- must carry our epoch and our grant's token (an epoch alone can repeat after a failover lost
-- the grant that raised it) and must not have expired; otherwise the script fails with
-- LEASE_LOST before any write.
-- wid, when not '', names this write with a number that grows with every write of the grant:
-- a write whose number is not above the last one the lease recorded ran before (the client
-- re-sent it after a read timeout) or is overtaken (a late copy arriving after later writes),
-- and returns true for "already applied", so the caller writes nothing.
-- Further arguments name state fields read in the same HMGET: their values come third, from
-- index 5 on (a command less for a script that needs them).
local function fence(state_key, epoch, token, now, wid, ...)
  local l = redis.call('HMGET', state_key, 'epoch', 'token', 'expiresAt', 'write', ...)
  if l[1] ~= epoch or l[2] ~= token then
    return redis.error_reply('LEASE_LOST epoch ' .. epoch .. ' is stale (current ' .. tostring(l[1]) .. ')')
  end
  if wid ~= nil and wid ~= '' and l[4] and tonumber(wid) <= tonumber(l[4]) then return nil, true end
  if not l[3] or tonumber(l[3]) <= now then
    return redis.error_reply('LEASE_LOST lease of epoch ' .. epoch .. ' expired')
  end
  return nil, false, l
end

-- The lease's fields in the state hash: epoch, token, owner, expiresAt, write, reply. Go names
-- them in statehash (LeaseEpoch, ..., IsLeaseField).
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
-- without one). cache[slot] keeps the answer for the rest of the script.
local function poller_claim_ms(pollers_key, poller, fixed, grace, default_ms, cache, slot)
  if fixed > 0 then return fixed end
  if not cache[slot] then
    cache[slot] = default_ms
    local info = redis.call('HGET', pollers_key, poller)
    -- Found, not decoded (the text cannot occur inside a JSON string, where every '"' is
    -- escaped): a claim reads one entry per poller it claims for, every time.
    local at = info and string.find(info, '"leaseTTLMs":', 1, true)
    local ttl = at and string.match(info, '^%d+', at + 13)
    if ttl then cache[slot] = tonumber(ttl) + grace end
  end
  return cache[slot]
end

-- due_write: write (or remove) member's entry in the due set due_key, unless something made
-- the key due since it was claimed: a claim always pushes a claimed key past now before its
-- Begin runs, so a score <= now is a trigger, resume or partitions add that landed in between,
-- and that due-now entry is kept. due is a time in ms, '+<ms>' for that long from now, or
-- 'remove'. Returns 1 when written (or removed), 0 when the due-now entry was kept.
local function due_write(due_key, member, due, now)
  local score = redis.call('ZSCORE', due_key, member)
  if score and tonumber(score) <= now then return 0 end
  if due == 'remove' then
    redis.call('ZREM', due_key, member)
  elseif string.sub(due, 1, 1) == '+' then
    redis.call('ZADD', due_key, now + tonumber(string.sub(due, 2)), member)
  else
    redis.call('ZADD', due_key, due, member)
  end
  return 1
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
-- ~700 B of Redis per key. outbox_open makes it (with the group 'dispatch') before an XADD and
-- returns the id for that XADD: '*' for a key that never had an outbox, else an explicit id
-- above the last one it ever gave (state field outboxLast) and above the key's incarnation
-- (a partition deleted and added again starts there), so ids never go backwards when the
-- clock does (a failover) nor below the deleted partition's. Never '*' on a made-again stream:
-- from Redis 7.2 XADD * takes the time the script started, which can be at or before
-- outboxLast while TIME is past it.
local function outbox_open(outbox_key, state_key)
  if redis.call('EXISTS', outbox_key) == 1 then return '*' end
  redis.call('XGROUP', 'CREATE', outbox_key, 'dispatch', '0', 'MKSTREAM')
  local marks = redis.call('HMGET', state_key, 'outboxLast', 'incarnation')
  local floor = marks[2] and (marks[2] .. '-0')
  local lms, lseq = stream_id(later_id(marks[1], floor))
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

-- bytes_less orders two strings by their bytes, as Redis orders members by lex and Go orders
-- strings. Lua's own < uses the server's collation locale, which need not.
local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Events waiting behind (held) or released from a poison event of their ordering key live in
-- one sorted set per key, all at score 0, ordered by member: held_prefix(ok) (the ordering
-- key's length, 8 hex digits, then the ordering key: no ordering key's prefix starts
-- another's), the event's sequence with both parts zero-padded (so members of one ordering
-- key sort in commit order), a newline and the entry's JSON ({id, ok, ev, seq}).
local function held_prefix(ok)
  return string.format('%08x', #ok) .. ok
end
local function held_member(ok, seq, json)
  local ms, n = string.match(seq, '^(%d+)-(%d+)$')
  return held_prefix(ok) .. string.format('%015d-%020d', tonumber(ms or '0'), tonumber(n or '0')) .. '\n' .. json
end
-- held_first: the first (oldest) held member of ok, or nil. Its range ends before ':', the
-- character after the digits that follow the prefix.
local function held_first(held_key, ok)
  local p = held_prefix(ok)
  return redis.call('ZRANGEBYLEX', held_key, '[' .. p, '(' .. p .. ':', 'LIMIT', 0, 1)[1]
end
-- held_ok: the ordering key of a held member, or of its name (held_name).
local function held_ok(member)
  return string.sub(member, 9, 8 + tonumber(string.sub(member, 1, 8), 16))
end
-- held_name: a held member up to its newline (the ordering key with its length and the
-- sequence): it names the member, which held_remove removes. The ordering key may hold
-- newlines of its own, so the search starts after it.
local function held_name(member)
  local nl = string.find(member, '\n', 9 + tonumber(string.sub(member, 1, 8), 16), true)
  return string.sub(member, 1, nl - 1), string.sub(member, nl + 1)
end
-- held_remove removes the member held_name named; returns 1 when there was one.
local function held_remove(held_key, name)
  return redis.call('ZREMRANGEBYLEX', held_key, '[' .. name .. '\n', '(' .. name .. '\11')
end

-- A poller's registry: one entry per key, partition -> 'c' (a config key), 'a<ms>' (added
-- with partitions add at ms) or '-c' (a config key deleted: it stays deleted while a config
-- lists it). The entries live in hashes of at most REG_LEAF_MAX entries (leaves, small enough
-- for Redis' compact encoding), each holding the partitions from its lower bound up to the
-- next leaf's; a sorted set (the index, index_key) holds the lower bounds at score 0, the
-- first leaf's being ''. A leaf is the index key, '|' and its lower bound (no poller name
-- holds '|'). Finding, writing or paging one key reads a leaf and one index member: the cost
-- does not depend on the poller's size.
local REG_LEAF_MAX = 100
local function reg_leaf(index_key, lb) return index_key .. '|' .. lb end
-- reg_bound: the lower bound of the leaf that holds (or would hold) partition p.
local function reg_bound(index_key, p)
  return redis.call('ZREVRANGEBYLEX', index_key, '[' .. p, '-', 'LIMIT', 0, 1)[1] or ''
end
local function reg_get(index_key, p)
  return redis.call('HGET', reg_leaf(index_key, reg_bound(index_key, p)), p)
end
-- reg_put writes p's entry; a leaf that outgrows REG_LEAF_MAX gives its upper half to a new
-- leaf whose lower bound is the first partition moved.
local function reg_put(index_key, p, v)
  local lb = reg_bound(index_key, p)
  local leaf = reg_leaf(index_key, lb)
  if redis.call('HSET', leaf, p, v) == 0 then return end
  if lb == '' then redis.call('ZADD', index_key, 0, '') end
  if redis.call('HLEN', leaf) <= REG_LEAF_MAX then return end
  local names = redis.call('HKEYS', leaf)
  table.sort(names, bytes_less)
  local moved = {}
  for i = math.floor(#names / 2) + 1, #names do moved[#moved + 1] = names[i] end
  local vals = redis.call('HMGET', leaf, unpack(moved))
  local kv = {}
  for i, name in ipairs(moved) do
    kv[#kv + 1] = name
    kv[#kv + 1] = vals[i]
  end
  redis.call('HSET', reg_leaf(index_key, moved[1]), unpack(kv))
  redis.call('HDEL', leaf, unpack(moved))
  redis.call('ZADD', index_key, 0, moved[1])
end
-- reg_del removes p's entry; a leaf left empty leaves the index (its range joins the leaf
-- before), and the first leaf's bound goes with the last entry of the poller.
local function reg_del(index_key, p)
  local lb = reg_bound(index_key, p)
  local leaf = reg_leaf(index_key, lb)
  if redis.call('HDEL', leaf, p) == 0 or redis.call('EXISTS', leaf) == 1 then return end
  if lb ~= '' then redis.call('ZREM', index_key, lb) end
  if redis.call('ZCARD', index_key) == 1 and redis.call('EXISTS', reg_leaf(index_key, '')) == 0 then
    redis.call('DEL', index_key)
  end
end
-- reg_live: whether a registry entry is a registered key that is not deleted.
local function reg_live(v)
  return v and string.sub(v, 1, 1) ~= '-'
end
