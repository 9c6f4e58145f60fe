-- claim_due.lua: claim due keys from the global due set. Claimed keys are pushed forward by
-- the claim timeout, so a key whose worker dies becomes due again by itself, and two
-- claimers never take the same key at once. A claimer names the pollers it runs; keys of
-- other pollers (another deployment's, a removed poller's) are left for others.
-- KEYS[1] due sorted set (member: "poller|partition", score: due time ms)
-- ARGV[1] now override ms or '', ARGV[2] limit, ARGV[3] claim timeout ms,
-- ARGV[4...] poller names to claim for (none: every poller)
-- Returns the claimed members, earliest due first.
-- First check: only members with score <= now and of a named poller are taken; nothing is
-- written otherwise.
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
local until_ms = now + tonumber(ARGV[3])
local allowed = nil
if #ARGV >= 4 then
  allowed = {}
  for i = 4, #ARGV do allowed[ARGV[i]] = true end
end
local out = {}
local skipped = 0
local batch = math.max(limit * 4, 100)
-- Claimed members leave the due range, so the next batch starts after the skipped ones.
while #out < limit and skipped < 10000 do
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', skipped, batch)
  if #due == 0 then break end
  for _, m in ipairs(due) do
    if #out < limit and (allowed == nil or allowed[string.match(m, '^(.-)|')]) then
      redis.call('ZADD', KEYS[1], until_ms, m)
      out[#out + 1] = m
    else
      skipped = skipped + 1
    end
  end
end
return out
