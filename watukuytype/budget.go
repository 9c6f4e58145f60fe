package watukuytype

import "time"

// Budget is a request budget every worker shares: a token bucket in Redis (GCRA on the server
// clock) for one API host or account. Each request of a key whose poller names the budget
// takes a token before it is sent; lanes draw by priority (live, reconcile, backfill), and a
// 429 or an exhausted RateLimit on any of its keys pauses the whole budget until the API's
// reset.
type Budget struct {
	// Name identifies the budget; pollers name it in Poller.Budget. It may hold ${partition}:
	// then each partition has a bucket of its own (e.g. "shop-${partition}" for the pollers
	// of several resources of one account, whose partitions are the accounts).
	Name string
	// Rate is how many requests the budget allows per Per.
	Rate float64
	// Per is the period of Rate; default one second.
	Per time.Duration
	// Burst is how many requests may go at once after a quiet spell; default the requests of
	// one second (at least 1).
	Burst int
}

// BudgetInfo is one bucket of a budget as Inspect shows it.
type BudgetInfo struct {
	// Budget is the definition (its Name as declared, possibly with ${partition}).
	Budget Budget
	// Bucket is the bucket's name: Budget.Name with the partition put in.
	Bucket string
	// Keys are the registered keys that draw from the bucket.
	Keys []Key
	// Tokens is how many requests could go now (0 to Burst).
	Tokens float64
	// PausedUntil is the end of a pause a 429 or an exhausted RateLimit set (zero: none).
	PausedUntil time.Time
}
