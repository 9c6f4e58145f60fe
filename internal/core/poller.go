package core

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/watukuy/watukuy/internal/changeset"

	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/watukuytype"
)

// WithDefaults validates p and fills its defaults, as Register does; errors are *ConfigError.
func WithDefaults(p watukuytype.Poller) (watukuytype.Poller, error) {
	bad := func(field, format string, a ...any) (watukuytype.Poller, error) {
		return p, &watukuytype.ConfigError{Poller: p.Name, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if err := CheckName(p.Name); err != nil {
		return bad("name", "%v", err)
	}
	seen := map[string]bool{}
	for _, part := range p.Partitions {
		if err := CheckPartition(part); err != nil {
			return bad("partitions", "%v", err)
		}
		if seen[part] {
			return bad("partitions", "%q is listed twice", part)
		}
		seen[part] = true
	}
	if p.Fetch == nil {
		return bad("fetch", "is required")
	}
	if p.Handler == nil {
		return bad("handler", "is required")
	}
	if p.Strategy != watukuytype.Custom && p.Strategy != watukuytype.SnapshotDiff {
		return bad("strategy", "unknown strategy %d", p.Strategy)
	}
	if p.Identity == nil {
		p.Identity = watukuytype.Field("id")
	}
	if p.SchemaVersion < 0 {
		return bad("schemaVersion", "must not be negative")
	}
	s := &p.Schedule
	if s.Min == 0 {
		s.Min = DefaultScheduleMin
	}
	if s.Max == 0 {
		s.Max = max(DefaultScheduleMax, s.Min)
	}
	if err := CheckInterval(s.Min, s.Max); err != nil {
		return bad("schedule", "%v", err)
	}
	switch {
	case s.NoJitter && s.Jitter != 0:
		return bad("schedule.jitter", "jitter %v with NoJitter: set one of them", s.Jitter)
	case s.Jitter == 0 && !s.NoJitter:
		s.Jitter = DefaultJitter
	}
	if err := CheckJitter(s.Jitter); err != nil {
		return bad("schedule.jitter", "%v", err)
	}
	if p.LeaseTTL == 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	if p.LeaseTTL < 10*time.Millisecond {
		return bad("leaseTTL", "%v is too short", p.LeaseTTL)
	}
	if p.MaxPagesPerCycle == 0 {
		p.MaxPagesPerCycle = DefaultMaxPagesPerCycle
	}
	if p.MaxPagesPerCycle < 0 {
		return bad("maxPagesPerCycle", "must be positive")
	}
	if p.CommitMaxItems == 0 {
		p.CommitMaxItems = defaultCommitMaxItems
	}
	if p.CommitMaxBytes == 0 {
		p.CommitMaxBytes = defaultCommitMaxBytes
	}
	if p.CommitMaxItems < 0 || p.CommitMaxBytes < 0 {
		return bad("commit", "maxItems and maxBytes must be positive")
	}
	if p.TombstoneRetention == 0 {
		p.TombstoneRetention = defaultTombstoneRetention
	}
	if p.TombstoneRetention < 0 {
		return bad("tombstoneRetention", "must not be negative")
	}
	if p.LogRetention < 0 {
		return bad("log.retention", "must not be negative")
	}
	if p.ConfirmDeletes == 0 {
		p.ConfirmDeletes = DefaultConfirmDeletes
	}
	if p.ConfirmDeletes < 0 {
		return bad("confirmDeletes", "must be positive")
	}
	if p.Failures == 0 {
		p.Failures = DefaultFailures
	}
	if p.ProbeEvery == 0 {
		p.ProbeEvery = s.Max
	}
	if p.Failures < 0 {
		return bad("failures", "must be positive")
	}
	if p.ProbeEvery < 0 {
		return bad("probeEvery", "must be positive")
	}
	if p.Changes.MaxBytes == 0 {
		p.Changes.MaxBytes = watukuytype.DefaultChangesMaxBytes
	}
	if p.Changes.MaxBytes < 0 {
		return bad("changes.maxBytes", "must be positive")
	}
	if _, err := changeset.ParseIgnore(p.Changes.Ignore); err != nil {
		return bad("changes.ignore", "%v", err)
	}
	b, err := CycleBackoff(p.Backoff)
	if err != nil {
		return bad("backoff", "%v", err)
	}
	p.Backoff = b
	if p.Reconcile != nil {
		rc := *p.Reconcile // the caller's value stays as given
		r := &rc
		p.Reconcile = r
		if r.Every <= 0 {
			return bad("reconcile.every", "must be positive")
		}
		if r.Fetch == nil {
			return bad("reconcile.fetch", "is required")
		}
		if r.MaxPages == 0 {
			r.MaxPages = DefaultReconcileMaxPages
		}
	}
	d := &p.Delivery
	if d.Concurrency == 0 {
		d.Concurrency = DefaultConcurrency
	}
	if d.Attempts == 0 {
		d.Attempts = DefaultAttempts
	}
	if d.Batch == 0 {
		d.Batch = DefaultBatch
	}
	if d.Concurrency < 0 || d.Attempts < 0 || d.Batch < 0 {
		return bad("delivery", "concurrency, attempts and batch must be positive")
	}
	if d.Backoff == (watukuytype.Backoff{}) {
		d.Backoff = watukuytype.Backoff{Base: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second}
	}
	if d.Retry == (watukuytype.Backoff{}) {
		d.Retry = watukuytype.Backoff{Base: DefaultRetryBase, Factor: 2, Max: DefaultRetryMax}
	}
	if d.Retry.Base <= 0 || d.Retry.Factor < 1 || d.Retry.Max < d.Retry.Base {
		return bad("delivery.retry", "base must be positive, factor at least 1 and max at least base")
	}
	if d.RetryHorizon == 0 {
		d.RetryHorizon = DefaultRetryHorizon
	}
	if d.Poison != watukuytype.PoisonPark && d.Poison != watukuytype.PoisonHalt {
		return bad("delivery.poison", "unknown mode %d", d.Poison)
	}
	return p, nil
}

// policy is the schedule state machine's view of the poller.
func policy(p *watukuytype.Poller) schedule.Policy {
	return schedule.Policy{Schedule: p.Schedule, Backoff: p.Backoff, Failures: p.Failures, ProbeEvery: p.ProbeEvery}
}

// keys lists the poller's keys.
func pollerKeys(p *watukuytype.Poller) []watukuytype.Key { return keysOf(p.Name, p.Partitions) }

// keysOf is the keys of poller with partitions: one per partition, or its one unpartitioned
// key when it has none.
func keysOf(poller string, partitions []string) []watukuytype.Key {
	listed := listedOf(partitions)
	ks := make([]watukuytype.Key, len(listed))
	for i, part := range listed {
		ks[i] = watukuytype.Key{Poller: poller, Partition: part}
	}
	return ks
}

// listedOf is the partitions of the keys a poller with partitions has: those, or the
// unpartitioned key's "" when there are none.
func listedOf(partitions []string) []string {
	if len(partitions) == 0 {
		return []string{""}
	}
	return partitions
}

// Defaults of the commit chunks and tombstones.
const (
	defaultCommitMaxItems     = DefaultCommitMaxItems
	defaultCommitMaxBytes     = DefaultCommitMaxBytes
	defaultTombstoneRetention = DefaultTombstoneRetention
)

// orderingKey applies the poller's ordering key function.
func orderingKey(p *watukuytype.Poller, ev watukuytype.Event) string {
	if p.Delivery.OrderingKey != nil {
		return p.Delivery.OrderingKey(ev)
	}
	return ev.Identity
}

// callHandler runs the handler, turning a panic into a *handlerPanic error (with the panic's
// stack) so it never crashes a worker.
func callHandler(p *watukuytype.Poller, ctx context.Context, ev watukuytype.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &handlerPanic{value: r, stack: debug.Stack()}
		}
	}()
	return p.Handler(ctx, ev)
}

// handlerPanic is a handler's panic, recovered.
type handlerPanic struct {
	value any
	stack []byte
}

func (h *handlerPanic) Error() string { return fmt.Sprintf("handler panic: %v", h.value) }

// maxStack bounds the stack a parked row keeps.
const maxStack = 8 << 10

// stackOf is the stack a handler's error carries, at most maxStack bytes: a recovered
// panic's, or what an error that formats itself with %+v (as github.com/pkg/errors and its
// likes do) adds to its message; "" when none.
func stackOf(err error) string {
	var hp *handlerPanic
	var f fmt.Formatter
	s := ""
	switch {
	case err == nil:
	case errors.As(err, &hp):
		s = string(hp.stack)
	case errors.As(err, &f):
		if e, ok := f.(error); ok {
			if v := fmt.Sprintf("%+v", f); v != e.Error() {
				s = v
			}
		}
	}
	if len(s) > maxStack {
		s = s[:maxStack] + "\n… (cut at 8 KiB)"
	}
	return s
}
