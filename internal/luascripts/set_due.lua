-- set_due.lua: write (or remove) a key's due entry after a Begin, unless something made the
-- key due since it was claimed. A claim always pushes a claimed key to now + claim timeout
-- before its Begin runs, so a score <= now means a trigger, resume or partitions add landed
-- in between: that due-now entry is kept, never overwritten by an older due time nor removed.
-- KEYS[1] the poller's due set (under {global})
-- ARGV[1] now override ms or '', ARGV[2] member "poller|partition",
-- ARGV[3] the due time ms to write, '+<ms>' for that long from now (the server's now: a claim
-- handed back), or 'remove' to drop the entry (a deleted key)
-- Returns 1 when written (or removed), 0 when the due-now entry was kept.
-- First check: the member's current score; a score <= now writes nothing.
local now = now_ms(ARGV[1])
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
if score and tonumber(score) <= now then return 0 end
if ARGV[3] == 'remove' then
  redis.call('ZREM', KEYS[1], ARGV[2])
elseif string.sub(ARGV[3], 1, 1) == '+' then
  redis.call('ZADD', KEYS[1], now + tonumber(string.sub(ARGV[3], 2)), ARGV[2])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
end
return 1
