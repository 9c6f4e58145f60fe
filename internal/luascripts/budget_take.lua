-- budget_take.lua: take one request's token of a budget every worker shares (GCRA on the
-- Redis server clock; the rules are internal/budget's). The bucket keeps the theoretical
-- arrival time of the next request (tat): a request may go when, after it, the bucket still
-- holds the tokens the lanes above it keep (the reserve: 0 for live). A live request whose
-- wait is too long to sit out may hold its token: its slot is kept in the bucket's held set
-- under its key, so the key yields its worker and keeps its place in the queue.
-- KEYS[1] the bucket (a hash: tat µs, pausedUntil ms, interval µs), KEYS[2] the bucket's held
-- set (a sorted set: key "poller|partition" → the slot of the token it holds, µs)
-- ARGV[1] now override ms or '', ARGV[2] the interval one token takes to come back, µs
-- (Per/Rate, may be fractional), ARGV[3] burst (tokens), ARGV[4] reserve (tokens),
-- ARGV[5] the longest wait the caller sits out now, µs, ARGV[6] the longest wait a token may
-- be held for, µs (0: never held), ARGV[7] the key, when it may hold a token (or '')
-- Returns {taken 1|0, wait µs, pausedUntil ms or 0, now µs, held 1|0}. Taken with wait w: the
-- token is the caller's and its slot is kept (later askers queue behind it): the request goes
-- w from now; a w longer than ARGV[5] means the token is held for the key (it yields and
-- asks again near its slot). held 1: the token is one the key held, handed over now (or kept
-- on, if the key came back too early). Not taken: nothing was written but a held slot moved
-- to a pause's end, and the bucket could serve this lane in wait µs (the pause's end when
-- paused).
-- First check: the pause that a 429 or an exhausted RateLimit of any of the budget's keys set;
-- inside it nothing is taken (a held slot is moved to the pause's end: the key keeps its
-- place). No lease is checked: a bucket is no key's. A token whose request is never sent is
-- spent, never given back; a held slot is good until 5 s past it (its key may come back that
-- late), then spent; a change of the interval (a reload) rescales the queue and drops the
-- held slots. A re-sent call takes another token (errs towards the API), never a held one twice.
-- (µs times are written with %.0f: Lua's own number format keeps 14 digits.)
local now = now_us(ARGV[1])
local b = redis.call('HMGET', KEYS[1], 'tat', 'pausedUntil', 'interval')
local paused = tonumber(b[2]) or 0
local member = ARGV[7]
local held = nil
if member ~= '' then held = tonumber(redis.call('ZSCORE', KEYS[2], member)) end
if paused * 1000 > now then
  if held and held < paused * 1000 then redis.call('ZADD', KEYS[2], 'XX', string.format('%.0f', paused * 1000), member) end
  return {0, math.ceil(paused * 1000 - now), paused, now, 0}
end
local interval, burst, reserve = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local sitout, hold = tonumber(ARGV[5]), tonumber(ARGV[6])
local stale = 5000000
local tat = tonumber(b[1]) or now
local old = tonumber(b[3])
if old and old ~= interval then
  if tat > now then tat = now + (tat - now) * interval / old end
  redis.call('UNLINK', KEYS[2])
  held = nil
end
-- Spent held slots go a hundred at most per take: many keys' slots going stale together never
-- make one long script.
local spent = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', now - stale), 'LIMIT', 0, 100)
if #spent > 0 then redis.call('ZREM', KEYS[2], unpack(spent)) end
if held and held >= now - stale then
  local wait = math.max(0, math.ceil(held - now))
  if wait <= sitout then redis.call('ZREM', KEYS[2], member) end
  return {1, wait, 0, now, 1}
end
tat = math.max(tat, now) + interval
local slot = tat - (burst - reserve) * interval
local wait = slot - now
if wait > sitout and (wait > hold or member == '') then return {0, math.ceil(wait), 0, now, 0} end
-- Rounded up: rounding down would run a bucket of a fractional interval fast, without bound.
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', math.ceil(tat)), 'interval', ARGV[2])
local keep = math.max(tat - now, paused * 1000 - now)
if wait > sitout then
  redis.call('ZADD', KEYS[2], string.format('%.0f', math.ceil(slot)), member)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[2], math.ceil((tonumber(last[2]) - now + stale) / 1000) + expiry_slack(ARGV[1]))
  keep = math.max(keep, tonumber(last[2]) - now + stale)
end
-- Once tat has passed the bucket is full again: the hash says nothing a missing one does not.
redis.call('PEXPIRE', KEYS[1], math.ceil(keep / 1000) + expiry_slack(ARGV[1]))
return {1, math.max(0, math.ceil(wait)), 0, now, 0}
