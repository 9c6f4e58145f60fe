package watukuy

import (
	"context"
	"time"

	"github.com/watukuy/watukuy/internal/core"
)

// WatchOptions configures WatchData.
type WatchOptions struct {
	// Every is the period of the check (one round trip); default 1s.
	Every time.Duration
	// ReportOnly logs and counts a loss without registering the pollers again (a process
	// that does not run cycles).
	ReportOnly bool
	// OnLoss runs once per loss noticed (a metric).
	OnLoss func()
	// OnCheck, when set, receives the outcome of every check (nil: Redis answered) and reports
	// whether it took care of a failure (e.g. an outage tracker that logs an unreachable Redis
	// once per outage); the failures it leaves are logged at most once a minute.
	OnCheck func(err error) (handled bool)
}

// WatchData checks every o.Every that Redis still holds watukuy's data, until ctx ends. When
// Redis lost it while the process runs (restarted empty, flushed, failed over to an empty
// replica), it logs one error naming the loss, calls o.OnLoss and registers the engine's
// pollers again (as Setup does at start: registry, layout marker, due entries due now), so
// their keys are polled again within seconds. Partitions added at run time (Partitions.Add)
// are lost with the data: add them again. A database that is empty when the watch starts is
// no loss. Run it in every long-running process (the worker and run commands do).
func (e *Engine) WatchData(ctx context.Context, o WatchOptions) {
	w := &core.DataWatch{Engine: e.core, Store: e.store, Every: o.Every, Reregister: !o.ReportOnly,
		OnLoss: o.OnLoss, OnCheck: o.OnCheck}
	w.Run(ctx)
}
