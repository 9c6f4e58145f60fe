-- claim_due.lua: claim due keys from the global due set. Claimed keys are pushed forward by
-- the claim timeout, so a key whose worker dies becomes due again by itself, and two
-- claimers never take the same key at once.
-- KEYS[1] due sorted set (member: "poller|partition", score: due time ms)
-- ARGV[1] now override ms or '', ARGV[2] limit, ARGV[3] claim timeout ms
-- Returns the claimed members, earliest due first.
-- First check: only members with score <= now are taken; nothing is written otherwise.
local now = now_ms(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local until_ms = now + tonumber(ARGV[3])
for _, m in ipairs(due) do
  redis.call('ZADD', KEYS[1], until_ms, m)
end
return due
