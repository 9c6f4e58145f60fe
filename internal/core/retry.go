package core

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// A failed try of an event (Delivery.Attempts attempts in one cycle) is the event's or its
// sink's. The sink's (sinkFailure) blocks the key's delivery: nothing is moved, the outbox
// waits, the cycles keep polling, and a later cycle tries again (blockage). The event's waits
// for its next try among its ordering key's held events (RetryRecord), until its
// RetryHorizon makes it poison.

// failureKind says whose failure a failed try was.
type failureKind int

const (
	eventFailure    failureKind = iota // the event's: others may deliver
	sinkFailing                        // the sink answered a failure any event can meet (5xx, timeout)
	sinkUnreachable                    // the sink could not be reached at all
)

// retryErrorsKept is how many of its last errors a retry record keeps.
const retryErrorsKept = 10

// netError is net.Error, named here so the engine does not import the network: an error of
// the network that a handler returned unwrapped.
type netError interface {
	error
	Timeout() bool
	Temporary() bool
}

// kindOf classifies a handler's error. A network error counts only as the handler's own error
// (not wrapped): wrapped, it may be a dependency of that one event (SinkError says otherwise).
func kindOf(err error) failureKind {
	var se *watukuytype.SinkError
	var hp *handlerPanic
	ne, isNet := err.(netError)
	switch {
	case errors.As(err, &hp):
		return eventFailure
	case errors.As(err, &se):
		if se.Unreachable {
			return sinkUnreachable
		}
		return sinkFailing
	case isNet:
		if ne.Timeout() {
			return sinkFailing
		}
		return sinkUnreachable
	case errors.Is(err, context.DeadlineExceeded):
		return sinkFailing
	}
	return eventFailure
}

// blockage is a key's blocked delivery (state field statehash.Blocked).
type blockage struct {
	Since int64  `json:"since"` // ms the sink's failure was first seen
	Error string `json:"error"` // the last one
	Tries int    `json:"tries"` // tries since
	Until int64  `json:"until"` // ms of the next try
	Trig  string `json:"trig"`  // the trigger generation when it was written: a trigger since tries at once
}

// blockageOf reads the state's blockage (nil: delivery is not blocked).
func blockageOf(s state) *blockage {
	v := s.get(statehash.Blocked)
	if v == "" { // the usual case: nothing to decode, nothing allocated
		return nil
	}
	var b blockage
	if json.Unmarshal([]byte(v), &b) != nil {
		return nil
	}
	return &b
}

// deliveries is what the cycle learns of its sink as it delivers, across its batches.
type deliveries struct {
	mu        sync.Mutex
	delivered int // events delivered in this cycle
	failing   int // tries that failed with sinkFailing in this cycle
	// block is the state's blockage, then this cycle's; changed says the state needs writing.
	block   *blockage
	changed bool
	// off: delivery stopped for the cycle (the sink is blocked); committed events wait in
	// the outbox.
	off bool
}

// succeeded counts a delivered event.
func (d *deliveries) succeeded() {
	d.mu.Lock()
	d.delivered++
	d.mu.Unlock()
}

// blocks counts a failed try and reports whether the sink is to be taken for blocked: it
// could not be reached, or two tries failed as any event would and none delivered.
func (d *deliveries) blocks(k failureKind) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch k {
	case sinkUnreachable:
		return true
	case sinkFailing:
		d.failing++
		return d.failing >= 2 && d.delivered == 0
	}
	return false
}

// blockWaits reports whether the key's delivery is blocked and its next try has not come (nor
// a trigger since).
func (c *cycle) blockWaits() bool {
	b := c.dlv.block
	return b != nil && c.now().UnixMilli() < b.Until && b.Trig == c.state.get(statehash.Trigger)
}

// block records that the sink failed with err: delivery stops for the cycle and is tried
// again after the next wait of the Retry schedule, capped at Schedule.Max (the cycles poll
// meanwhile, so it is never tried less often than they run).
func (c *cycle) block(err error) {
	now := c.now()
	d := &c.dlv
	b := blockage{Since: now.UnixMilli(), Tries: 1}
	if d.block != nil {
		b.Since, b.Tries = d.block.Since, d.block.Tries+1
	}
	wait := min(jittered(c.p.Delivery.Retry, b.Tries, c.e.rand()), c.p.Schedule.Max)
	b.Error, b.Until, b.Trig = err.Error(), now.Add(wait).UnixMilli(), c.state.get(statehash.Trigger)
	d.block, d.changed, d.off = &b, true, true
	c.logger().Warn().Err(err).Int("tries", b.Tries).Time("since", time.UnixMilli(b.Since)).Dur("next", wait).
		Msg("delivery blocked: the sink fails; events wait in the outbox, polling goes on")
}

// unblock ends a blockage after a delivery went through.
func (c *cycle) unblock() {
	d := &c.dlv
	if d.block != nil && !d.off {
		c.logger().Info().Time("since", time.UnixMilli(d.block.Since)).Msg("delivery unblocked: the sink took an event")
		d.block, d.changed = nil, true
	}
}

// blockOutlived reports whether the sink has been blocked for longer than the retry horizon:
// the events its tries fail are then poison, one try each. A negative horizon makes only the
// event's own failures poison at once: a blocked sink never does.
func (c *cycle) blockOutlived() bool {
	h := c.p.Delivery.RetryHorizon
	return c.dlv.block != nil && h >= 0 && c.now().Sub(time.UnixMilli(c.dlv.block.Since)) >= h
}

// jittered is the wait before try n+1: between half and all of the Retry schedule's cap.
func jittered(b watukuytype.Backoff, n int, r float64) time.Duration {
	cp := b.Cap(n)
	return cp/2 + time.Duration(r*float64(cp/2))
}

// retried is the retry record of an entry after a failed try with errs at now.
func retried(e Entry, errs []string, now time.Time) RetryRecord {
	rec := RetryRecord{First: now.UnixMilli()}
	if e.Retry != nil {
		rec = *e.Retry
		rec.Errors = append([]string(nil), e.Retry.Errors...)
	}
	rec.Tries++
	rec.Attempts += len(errs)
	rec.Errors = append(rec.Errors, errs...)
	if n := len(rec.Errors); n > retryErrorsKept {
		rec.Errors = rec.Errors[n-retryErrorsKept:]
	}
	return rec
}
