-- claim_due.lua: claim due keys from the due sets of the named pollers (one sorted set per
-- poller, so a claim never reads the keys of pollers it does not run: a retired poller's
-- thousands of overdue keys cost nothing). The earliest-due members across the sets are
-- taken first. Claimed keys are pushed forward by the claim timeout, so a key whose worker
-- dies becomes due again by itself, and two claimers never take the same key at once.
-- KEYS[1], KEYS[2], ... the due sets of the pollers to claim for, all under {global}
--   (member: "poller|partition", score: due time ms)
-- ARGV[1] now override ms or '', ARGV[2] limit, ARGV[3] claim timeout ms
-- Returns the claimed members, earliest due first.
-- First check: only members with score <= now are taken; nothing is written otherwise.
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
local until_ms = now + tonumber(ARGV[3])
-- Each set gives at most limit candidates: the merge reads limit x sets members at most.
local due = {}
for k = 1, #KEYS do
  local r = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #r, 2 do
    due[#due + 1] = {member = r[i], score = tonumber(r[i + 1]), set = k}
  end
end
table.sort(due, function(a, b)
  if a.score ~= b.score then return a.score < b.score end
  return a.member < b.member
end)
local out = {}
for i = 1, math.min(limit, #due) do
  redis.call('ZADD', KEYS[due[i].set], until_ms, due[i].member)
  out[#out + 1] = due[i].member
end
return out
