-- hold_claim.lua: keep a running cycle's key claimed while its lease lives. The lease keeper
-- runs it after each renewal, with the renewed lease's end plus the claim grace, so a claim
-- lapses (and the key is claimed again) about when the lease of a dead cycle does, never
-- while a healthy one runs. The time is absolute: a hold that lands late (its sender frozen
-- after the renewal, or the command held in the network) reaches no further than that
-- grant's lease could; by then another owner's claim or due time is later and is kept.
-- KEYS[1] the poller's due set (under {global})
-- ARGV[1] now override ms or '', ARGV[2] member "poller|partition", ARGV[3] hold until, ms
-- Returns 1 when the claim was pushed forward, 0 when nothing was written.
-- First check: the member's current score. A score <= now is a trigger, resume or
-- partitions add (or a claim that lapsed already) and is kept; a later one is only ever
-- raised (GT), never lowered.
local now = now_ms(ARGV[1])
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not score or tonumber(score) <= now then return 0 end
return redis.call('ZADD', KEYS[1], 'XX', 'GT', 'CH', tonumber(ARGV[3]), ARGV[2])
