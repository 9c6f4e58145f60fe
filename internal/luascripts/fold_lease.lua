-- fold_lease.lua: migrate 4→5 for one key: move its layout-4 lease hash into its state hash
-- (prelude's fold_legacy_lease; begin.lua does the same for a key this misses).
-- KEYS[1] the layout-4 lease hash, KEYS[2] state hash
-- ARGV[1] now override ms or ''
-- Returns 1 when a lease hash was folded, 0 when there was none.
-- First check: the lease hash exists; nothing is written otherwise.
local now = now_ms(ARGV[1])
return fold_legacy_lease(KEYS[1], KEYS[2], now)
