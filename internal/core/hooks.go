package core

import "time"

// Hooks observe the engine (metrics, alerts, logs). Every field is optional. They are called
// synchronously from the cycle, so they must be quick and must not block.
type Hooks struct {
	// OnCycle runs after every cycle, ran or skipped.
	OnCycle func(r CycleReport, d time.Duration)
	// OnFetch runs after every request a lane sends; err is nil on success.
	OnFetch func(key Key, lane string, d time.Duration, err error)
	// OnDelivered runs after an event was acked; latency counts from its observation.
	OnDelivered func(key Key, ev Event, latency time.Duration)
	// OnParked runs when an event is parked as poison or an item as invalid.
	OnParked func(key Key, kind, id, reason string)
	// OnCircuitOpen runs when a cycle leaves the key's circuit open.
	OnCircuitOpen func(key Key, until time.Time, err error)
	// OnThrottled runs when a 429 or 503 with Retry-After throttles the key.
	OnThrottled func(key Key, until time.Time)
	// OnLeaseLost runs when a cycle is abandoned because its lease was lost.
	OnLeaseLost func(key Key, err error)
	// OnDueRepaired runs for each key the repair sweep gave back its missing due entry.
	OnDueRepaired func(key Key)
	// OnError runs for every failure, with its phase: fetch, handler, store, config or backfill
	// (a backfill request that failed; the live lane goes on).
	OnError func(key Key, phase string, err error)
}
