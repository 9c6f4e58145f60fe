package watukuytype

import "time"

// Hooks observe the engine (metrics, alerts, logs). Every field is optional. They are called
// synchronously from the cycle, so they must be quick and must not block.
type Hooks struct {
	// OnCycle runs after every cycle, ran or skipped.
	OnCycle func(r CycleReport, d time.Duration)
	// OnFetch runs after every request a lane sends; err is nil on success.
	OnFetch func(key Key, lane Lane, d time.Duration, err error)
	// OnDelivered runs after an event was acked; latency counts from its observation.
	OnDelivered func(key Key, ev Event, latency time.Duration)
	// OnHandlerAttempt runs after every call of the poller's handler (or sink): each attempt
	// of each event, retries included, whether or not the event is later acked or parked. d
	// is how long the call took; result is HandlerOK, HandlerError, HandlerPanic,
	// HandlerTimeout or HandlerFenced, and err is nil only for HandlerOK. Delivery runs up to
	// Delivery.Concurrency ordering keys at once, so it may be called from several
	// goroutines of one cycle at the same time.
	OnHandlerAttempt func(key Key, ev Event, attempt int, d time.Duration, result HandlerResult, err error)
	// OnParked runs when an event is parked as poison or an item as invalid.
	OnParked func(key Key, kind, id, reason string)
	// OnCircuitOpen runs when a cycle leaves the key's circuit open.
	OnCircuitOpen func(key Key, until time.Time, err error)
	// OnThrottled runs when a 429 or 503 with Retry-After throttles the key.
	OnThrottled func(key Key, until time.Time)
	// OnBudget runs for each token a request asks of its budget: wait is how long the request
	// waits for it (0: at once); taken is false when the budget refused and the key yields
	// until wait has passed. budget is the budget's declared name (its buckets share it).
	OnBudget func(key Key, budget string, lane Lane, wait time.Duration, taken bool)
	// OnLeaseLost runs when a cycle is abandoned because its lease was lost.
	OnLeaseLost func(key Key, err error)
	// OnDueRepaired runs for each key the repair sweep gave back its missing due entry.
	OnDueRepaired func(key Key)
	// OnError runs for every failure, with its phase: fetch, handler, store, config or backfill
	// (a backfill request that failed; the live lane goes on).
	OnError func(key Key, phase string, err error)
}

// HandlerResult is how one handler attempt ended (Hooks.OnHandlerAttempt).
type HandlerResult string

// Results of a handler attempt.
const (
	// HandlerOK: the handler returned nil.
	HandlerOK HandlerResult = "ok"
	// HandlerError: the handler returned an error (a webhook's non-2xx answer among them).
	HandlerError HandlerResult = "error"
	// HandlerPanic: the handler panicked (the engine recovered it as an error).
	HandlerPanic HandlerResult = "panic"
	// HandlerTimeout: the handler's error wraps context.DeadlineExceeded (a sink's own
	// timeout, such as the webhook's).
	HandlerTimeout HandlerResult = "timeout"
	// HandlerFenced: the attempt failed because the cycle cut it short: it lost its lease (a
	// CheckLease that failed), the engine is stopping, or another ordering key of the batch
	// halted it (poison: halt). The event stays in the outbox for a later delivery; this is
	// no failure of the handler.
	HandlerFenced HandlerResult = "fenced"
)

// HandlerResults lists every result of a handler attempt.
func HandlerResults() []HandlerResult {
	return []HandlerResult{HandlerOK, HandlerError, HandlerPanic, HandlerTimeout, HandlerFenced}
}
