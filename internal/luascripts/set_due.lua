-- set_due.lua: write (or remove) a key's due entry after a Begin, unless something made the
-- key due since it was claimed (prelude's due_write: a due-now entry is never overwritten by an
-- older due time nor removed).
-- KEYS[1] the poller's due set (under {global})
-- ARGV[1] now override ms or '', ARGV[2] member "poller|partition",
-- ARGV[3] the due time ms to write, '+<ms>' for that long from now (the server's now: a claim
-- handed back), or 'remove' to drop the entry (a deleted key)
-- Returns 1 when written (or removed), 0 when the due-now entry was kept.
-- First check: the member's current score; a score <= now writes nothing.
local now = now_ms(ARGV[1])
return due_write(KEYS[1], ARGV[2], ARGV[3], now)
