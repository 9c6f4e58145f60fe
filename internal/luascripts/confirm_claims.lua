-- confirm_claims.lua: hold on to claimed keys whose tasks are enqueued. A scheduler claims with
-- a short window (claim_due.lua, a fixed claim, marked), enqueues, then confirms: the keys are
-- held for their poller's lease TTL plus a grace (or a fixed claim), until the cycle's lease
-- keeper holds them (hold_claim.lua). A scheduler that dies between its claim and its enqueue
-- leaves its keys claimed for the window only, not for a whole claim.
-- KEYS[1] the pollers hash, KEYS[2], KEYS[3], ... the due sets of the keys' pollers, all under
--   {global}
-- ARGV[1] now override ms or '', ARGV[2] claim ms: a fixed claim for every key when not '0';
--   ARGV[3] grace ms added to a lease TTL; ARGV[4] the claim of a poller whose entry records no
--   lease TTL, ms; ARGV[5] the time of the claim being confirmed (claim_due.lua's reply), ms;
--   ARGV[6] its window ms; ARGV[7] its mark n; ARGV[8] the number p of due sets, ARGV[9] ...
--   ARGV[8+p] their pollers' names, then pairs: member "poller|partition", index into KEYS of
--   its poller's due set
-- Returns the number of keys held on.
-- First check: per member, its current score must be the very score this claim wrote (its
-- time + window + its mark) and in the future; anything else is kept: a due time the key's
-- cycle wrote already (its task ran before this confirmation), a trigger, the lease keeper's
-- hold, or another scheduler's newer claim (this confirmation late or re-sent: held on, that
-- claim would keep the keys out for a whole claim if its scheduler died).
local now = now_ms(ARGV[1])
local claimed = tonumber(ARGV[5]) + tonumber(ARGV[6]) + claim_mark(ARGV[7])
local p = tonumber(ARGV[8])
local claim = {}
local held = 0
if claimed <= now then return 0 end
-- The members by due set, read with one ZMSCORE and held with one ZADD per due set (a thousand
-- keys a call at most), not two commands per key.
local members = {}
for i = 9 + p, #ARGV, 2 do
  local k = tonumber(ARGV[i + 1])
  members[k] = members[k] or {}
  members[k][#members[k] + 1] = ARGV[i]
end
for k, all in pairs(members) do
  for from = 1, #all, 1000 do
    local part = {unpack(all, from, math.min(from + 999, #all))}
    local scores = redis.call('ZMSCORE', KEYS[k], unpack(part))
    local hold = {'XX', 'GT', 'CH'}
    for j, member in ipairs(part) do
      if scores[j] and tonumber(scores[j]) == claimed then
        local ms = poller_claim_ms(KEYS[1], ARGV[7 + k], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), claim, k)
        hold[#hold + 1] = now + ms
        hold[#hold + 1] = member
      end
    end
    if #hold > 3 then held = held + redis.call('ZADD', KEYS[k], unpack(hold)) end
  end
end
return held
