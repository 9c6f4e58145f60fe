-- claim_due.lua: claim due keys from the due sets of the named pollers (one sorted set per
-- poller, so a claim never reads the keys of pollers it does not run: a retired poller's
-- thousands of overdue keys cost nothing). The earliest-due members across the sets are
-- taken first. A claimed key is pushed forward by its poller's lease TTL plus a grace (the
-- leaseTTLMs its pollers entry records), so two claimers never take the same key at once and
-- a key whose cycle died is due again about when its lease lapses; a running cycle keeps its
-- key claimed as it renews its lease (hold_claim.lua).
-- KEYS[1] the pollers hash, KEYS[2], KEYS[3], ... the due sets of the pollers to claim for,
--   all under {global} (member: "poller|partition", score: due time ms)
-- ARGV[1] now override ms or '', ARGV[2] limit, ARGV[3] claim timeout ms: a fixed claim for
--   every key when not '0'; ARGV[4] grace ms added to a lease TTL; ARGV[5] the claim of a
--   poller whose entry records no lease TTL, ms;
--   ARGV[6] the claim's mark n in 1..1023 to mark it for a confirmation (a scheduler's window
--   claim: every claimed score then carries n/1024 of a millisecond, prelude's claim_mark,
--   which no other writer of a due time writes), else '0'; ARGV[7], ARGV[8], ... the poller
--   names of KEYS[2], KEYS[3], ...
-- Returns {the claim's time ms (now), the claimed members, earliest due first...}: a claimed
-- key's score is that time + its claim (+ the mark), which confirm_claims.lua checks.
-- First check: only members with score <= now are taken; nothing is written otherwise.
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
-- Each set gives at most limit candidates: the merge reads limit x sets members at most.
local due = {}
for k = 2, #KEYS do
  local r = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #r, 2 do
    due[#due + 1] = {member = r[i], score = tonumber(r[i + 1]), set = k}
  end
end
table.sort(due, function(a, b)
  if a.score ~= b.score then return a.score < b.score end
  return a.member < b.member
end)
local claim = {}
local function claim_ms(set)
  return poller_claim_ms(KEYS[1], ARGV[set + 5], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), claim, set)
end
local mark = claim_mark(ARGV[6])
local out = {now}
-- One ZADD per due set (a thousand keys a call at most), not one per key: each command a script
-- runs costs Redis up to a few microseconds.
local adds = {}
for i = 1, math.min(limit, #due) do
  local d = due[i]
  adds[d.set] = adds[d.set] or {}
  local a = adds[d.set]
  a[#a + 1] = now + claim_ms(d.set) + mark
  a[#a + 1] = d.member
  out[#out + 1] = d.member
end
for set, a in pairs(adds) do chunked('ZADD', KEYS[set], a, 1, #a, 2000) end
return out
