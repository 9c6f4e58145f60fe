-- budget_pause.lua: pause a budget every worker shares, after a 429 or a RateLimit with no
-- requests remaining on one of its keys: the API limits the account, so every key of the
-- budget waits for the reset, not only the one that heard it.
-- KEYS[1] the bucket (a hash: tat µs, pausedUntil ms)
-- ARGV[1] now override ms or '', ARGV[2] the pause's length ms
-- Returns the end of the pause in force, ms.
-- First check: a pause already set that ends later is kept (never shortened).
local now = now_ms(ARGV[1])
local untl = now + tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[1], 'pausedUntil')) or 0
if cur >= untl then return cur end
redis.call('HSET', KEYS[1], 'pausedUntil', untl)
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat')) or 0
redis.call('PEXPIRE', KEYS[1], math.max(untl - now, math.ceil(tat / 1000) - now) + expiry_slack(ARGV[1]))
return untl
