-- budget_take.lua: take one request's token of a budget every worker shares (GCRA on the
-- Redis server clock; the rules are internal/budget's). The bucket keeps the theoretical
-- arrival time of the next request (tat): a request may go when, after it, the bucket still
-- holds the tokens the lanes above it keep (the reserve: 0 for live).
-- KEYS[1] the bucket (a hash: tat µs, pausedUntil ms), under a hash tag of its own
-- ARGV[1] now override ms or '', ARGV[2] the interval one token takes to come back, µs
-- (Per/Rate, may be fractional), ARGV[3] burst (tokens), ARGV[4] reserve (tokens),
-- ARGV[5] the longest wait a token may be held for, µs (0: only a token free now),
-- ARGV[6] the slot of a token the key holds from an earlier cycle, µs, or ''
-- Returns {taken 1|0, wait µs, pausedUntil ms or 0, now µs, held 1|0}. Taken with wait w: the
-- token is the caller's and its slot is held (later askers queue behind it): the request goes
-- w from now; held 1: it is the token the key held (nothing written). Not taken: nothing was
-- written, and the bucket could serve this lane in wait µs (the pause's end when paused). A
-- held slot is good until 5 s (plus the burst's tolerance) past it: its key may come back that
-- late (the scheduler's claim, a busy worker); a later one is spent and a new token taken.
-- First check: the pause that a 429 or an exhausted RateLimit of any of the budget's keys set;
-- inside it nothing is taken. No lease is checked: a bucket is no key's, and a token whose
-- request is never sent (its cycle died) is spent, never given back: that errs towards the API.
local now = now_us(ARGV[1])
local b = redis.call('HMGET', KEYS[1], 'tat', 'pausedUntil')
local paused = tonumber(b[2]) or 0
if paused * 1000 > now then return {0, math.ceil(paused * 1000 - now), paused, now, 0} end
local interval, burst, reserve, longest = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local held = tonumber(ARGV[6])
if held and now - held <= burst * interval + 5000000 then return {1, math.max(0, math.ceil(held - now)), 0, now, 1} end
local tat = math.max(tonumber(b[1]) or now, now) + interval
local wait = tat - (burst - reserve) * interval - now
if wait > longest then return {0, math.ceil(wait), 0, now, 0} end
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat))
-- Once tat has passed the bucket is full again: the hash says nothing a missing one does not.
redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(tat - now, paused * 1000 - now) / 1000) + 1000)
return {1, math.max(0, math.ceil(wait)), 0, now, 0}
