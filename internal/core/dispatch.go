package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/watukuytype"
)

// delivery is one outbox entry on its way to the handler; ev is nil until decoded.
type delivery struct {
	entry Entry
	ev    *watukuytype.Event
}

// deliver hands a batch (in sequence order) to the handler: one ordering key at a time in
// sequence order, up to Delivery.Concurrency keys at once. Successes are acked in sequence
// order in one fenced call. A failed try blocks the key's delivery when it is the sink's
// (nothing moves, delivery stops for the cycle); otherwise the event waits for its next try
// first among its ordering key's held events (G4), and once its RetryHorizon has passed it
// is parked and holds its ordering key, or halts the cycle with PoisonHalt. Undelivered
// entries stay in the outbox (G1).
func (c *cycle) deliver(ctx context.Context, batch []delivery) (f *cycleError) {
	ctx, span := c.startSpan(ctx, SpanDrain)
	delivered, parked := c.rep.Delivered, c.rep.Parked
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(AttrEvents.Int(len(batch)), AttrDelivered.Int(c.rep.Delivered-delivered), AttrParked.Int(c.rep.Parked-parked))
		}
		var err error
		if f != nil {
			err = f.err
		}
		endSpan(span, err)
	}()
	d := &dispatch{c: c, acked: make([]bool, len(batch)), evs: make([]*watukuytype.Event, len(batch))}
	groups := map[string][]int{}
	var order []string
	for i, b := range batch {
		ok := b.entry.OrderingKey
		if c.holds[ok] {
			d.hold(b)
			continue
		}
		if _, seen := groups[ok]; !seen {
			order = append(order, ok)
		}
		groups[ok] = append(groups[ok], i)
	}
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < min(c.p.Delivery.Concurrency, len(order)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ok := range work {
				d.runGroup(dctx, stop, batch, groups[ok])
			}
		}()
	}
feed:
	for _, ok := range order {
		select {
		case work <- ok:
		case <-dctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()

	// Acks and parks go in slices, so that a page of 100,000 events never makes one long
	// script: each slice is a fenced call of its own, and each is safe to repeat. Acks come
	// first: a death between them leaves the poison event and what follows it in the outbox, to
	// be delivered again in order, never a delivered event of a held ordering key behind it (a
	// release would deliver the held events before it, G4).
	step := c.chunkItems()
	var ids []Entry
	for i, ok := range d.acked {
		if ok {
			ids = append(ids, batch[i].entry)
		}
	}
	if len(ids) > 0 {
		for rest := ids; len(rest) > 0; {
			n := min(len(rest), step)
			paused, err := c.e.store.Ack(ctx, c.lease, rest[:n])
			if err != nil {
				return storeErr(c.keeper.check(err))
			}
			if paused {
				c.keeper.paused.Store(true)
			}
			rest = rest[n:]
		}
		c.confirmed = true
		c.rep.Delivered += len(ids)
		if h := c.e.hooks.OnDelivered; h != nil {
			now := c.now()
			for i, ok := range d.acked {
				if ok && d.evs[i] != nil {
					h(c.key, *d.evs[i], now.Sub(d.evs[i].ObservedAt))
				}
			}
		}
	}
	if len(ids) > 0 {
		// The sink took events of this very batch: its failures in it are the events' own.
		d.blockErr = nil
		c.unblock()
	}
	if d.blockErr != nil {
		c.block(d.blockErr)
	}
	if d.blockErr == nil || c.blockOutlived() {
		for _, f := range d.failed {
			d.failedTry(f, batch)
		}
	}
	for held := d.held; len(d.poison) > 0 || len(d.wait) > 0 || len(held) > 0; {
		n := min(len(held), step)
		if err := c.e.store.Park(ctx, c.lease, Parking{Poison: d.poison, Wait: d.wait, Held: held[:n]}); err != nil {
			return storeErr(c.keeper.check(err))
		}
		c.rep.Parked += len(d.poison)
		d.poison, d.wait, held = nil, nil, held[n:]
	}
	if d.halt != nil {
		return d.halt
	}
	if err := context.Cause(ctx); err != nil {
		return storeErr(err)
	}
	if !c.keeper.valid() {
		// Entries were left undelivered: stop here rather than read them again.
		return storeErr(&watukuytype.LeaseLostError{Key: c.key, Epoch: c.lease.Epoch, Reason: "lease could not be confirmed during delivery"})
	}
	return nil
}

// dispatch is the shared result of one batch's workers.
type dispatch struct {
	c      *cycle
	mu     sync.Mutex
	acked  []bool
	evs    []*watukuytype.Event // decoded events, for the OnDelivered hook
	failed []failedTry
	// blockErr is the failure that took the sink for blocked (nil: none did).
	blockErr error
	poison   []Poison
	wait     []Wait
	held     []Held
	halt     *cycleError
}

// failedTry is an event whose try failed: batch[i], the errors of its attempts, and the
// batch indexes of its ordering key's later events.
type failedTry struct {
	i    int
	errs []string
	err  error
	rest []int
}

// runGroup delivers one ordering key's entries in order; a failure stops the group.
func (d *dispatch) runGroup(ctx context.Context, stop context.CancelFunc, batch []delivery, idx []int) {
	c := d.c
	for n, i := range idx {
		if ctx.Err() != nil || !c.keeper.valid() || c.halted() {
			return // left in the outbox: redelivered by the next lease holder (G1)
		}
		b := batch[i]
		ev, errs, err := d.attempt(ctx, b)
		if err == nil {
			c.dlv.succeeded()
			d.mu.Lock()
			d.acked[i], d.evs[i] = true, ev
			d.mu.Unlock()
			continue
		}
		if ctx.Err() != nil || watukuytype.IsLeaseLost(err) {
			return // not exhausted: the next lease holder delivers it (G1)
		}
		d.mu.Lock()
		d.failed = append(d.failed, failedTry{i: i, errs: errs, err: err, rest: idx[n+1:]})
		if c.dlv.blocks(kindOf(err)) && d.blockErr == nil {
			d.blockErr = err
			stop() // the other ordering keys would fail alike: they wait in the outbox
		}
		d.mu.Unlock()
		return
	}
}

// failedTry settles an event whose try failed and its ordering key's later events, which
// are held behind it: it waits for its next try, or, its retry horizon passed, it is poison.
func (d *dispatch) failedTry(f failedTry, batch []delivery) {
	c := d.c
	b := batch[f.i]
	now := c.now()
	rec := retried(b.entry, f.errs, now)
	if s := stackOf(f.err); s != "" {
		rec.Stack = s
	}
	h := c.p.Delivery.RetryHorizon
	switch {
	case d.blockErr == nil && h >= 0 && now.Sub(time.UnixMilli(rec.First)) < h:
		e := d.entryOf(b)
		e.R = &rec
		js, _ := json.Marshal(e)
		until := now.Add(jittered(c.p.Delivery.Retry, rec.Tries, c.e.rand()))
		// Not a hold of the cycle's (c.holds): the store keeps the ordering key's later events
		// behind it, and gives it back first when its wait is over, in this cycle or a later one.
		d.wait = append(d.wait, Wait{Entry: b.entry, JSON: js, Until: until})
		c.logger().Warn().Str("eventId", b.entry.ID).Str("orderingKey", b.entry.OrderingKey).Int("tries", rec.Tries).
			Time("next", until).Str("error", f.errs[len(f.errs)-1]).Msg("handler failed: the event waits for its next try; its ordering key waits behind it")
	case c.p.Delivery.Poison == watukuytype.PoisonHalt:
		if d.halt == nil {
			d.halt = &cycleError{phase: "handler", code: watukuytype.CodePoisonHalt, kind: schedule.ResultPoisonHalt,
				err: fmt.Errorf("event %s of %s failed %d times over %s, poison: halt: %w", b.entry.ID, c.key.Describe(), rec.Attempts,
					now.Sub(time.UnixMilli(rec.First)).Round(time.Second), f.err)}
		}
		return // left in the outbox, and its ordering key's later events after it
	default:
		d.park(b, rec)
	}
	for _, j := range f.rest {
		d.hold(batch[j])
	}
}

// attempt calls the handler up to Attempts times with backoff; it returns the event and
// every error seen.
func (d *dispatch) attempt(ctx context.Context, b delivery) (*watukuytype.Event, []string, error) {
	c := d.c
	ev := b.ev
	if ev == nil {
		ev = new(watukuytype.Event)
		if err := json.Unmarshal(b.entry.Envelope, ev); err != nil {
			err = fmt.Errorf("corrupt envelope of %s: %w", b.entry.ID, err)
			return nil, []string{err.Error()}, err
		}
		ev.Seq = b.entry.Seq
	}
	var errs []string
	var last error
	for a := 1; a <= c.p.Delivery.Attempts; a++ {
		if a > 1 {
			t := time.NewTimer(c.p.Delivery.Backoff.Delay(a-1, c.e.rand()))
			select {
			case <-ctx.Done():
				t.Stop()
				return ev, errs, ctx.Err()
			case <-t.C:
			}
			if err := ctx.Err(); err != nil {
				return ev, errs, err
			}
			if !c.keeper.valid() {
				return ev, errs, &watukuytype.LeaseLostError{Key: c.key, Epoch: c.lease.Epoch, Reason: "lease may have expired during handler retries"}
			}
		}
		sent := time.Now()
		hctx, span := c.startSpan(ctx, SpanHandler)
		last = callHandler(c.p, c.keeper.withLeaseCheck(hctx), *ev)
		if h := c.e.hooks.OnHandlerAttempt; h != nil {
			h(c.key, *ev, a, time.Since(sent), handlerResult(ctx, last), last)
		}
		if span.IsRecording() {
			span.SetAttributes(AttrAttempt.Int(a), AttrHandlerResult.String(string(handlerResult(ctx, last))),
				AttrEventID.String(ev.ID), AttrEventType.String(string(ev.Type)), AttrLane.String(string(ev.Lane)))
		}
		endSpan(span, last)
		if last == nil {
			return ev, nil, nil
		}
		errs = append(errs, last.Error())
		c.logger().Warn().Str("eventId", ev.ID).Int("attempt", a).Err(last).Msg("handler failed")
	}
	return ev, errs, last
}

// handlerResult classifies one handler attempt for Hooks.OnHandlerAttempt; ctx is the
// delivery's context.
func handlerResult(ctx context.Context, err error) watukuytype.HandlerResult {
	var hp *handlerPanic
	switch {
	case err == nil:
		return watukuytype.HandlerOK
	case errors.As(err, &hp):
		return watukuytype.HandlerPanic
	case ctx.Err() != nil || watukuytype.IsLeaseLost(err):
		return watukuytype.HandlerFenced
	case errors.Is(err, context.DeadlineExceeded):
		return watukuytype.HandlerTimeout
	}
	return watukuytype.HandlerError
}

func (d *dispatch) park(b delivery, rec RetryRecord) {
	c := d.c
	errs := rec.Errors
	row, _ := json.Marshal(parkedRow{Kind: parkedPoison, ID: b.entry.ID, Error: errs[len(errs)-1], Errors: errs,
		Stack: rec.Stack, Attempts: rec.Attempts, Event: d.entryOf(b), ParkedAt: c.now().UnixMilli()})
	d.mu.Lock()
	d.poison = append(d.poison, Poison{Entry: b.entry, ParkedID: b.entry.ID, Row: row})
	c.holds[b.entry.OrderingKey] = true
	d.mu.Unlock()
	c.logger().Error().Str("eventId", b.entry.ID).Str("orderingKey", b.entry.OrderingKey).Str("error", errs[len(errs)-1]).Msg("event parked as poison; its ordering key is held")
	if h := c.e.hooks.OnParked; h != nil {
		h(c.key, parkedPoison, b.entry.ID, errs[len(errs)-1])
	}
}

// hold keeps an event of an ordering key held in this batch from delivery: an outbox entry
// joins the key's held events; a released held event is one already.
func (d *dispatch) hold(b delivery) {
	if b.entry.Member != "" {
		return
	}
	js, _ := json.Marshal(d.entryOf(b))
	d.mu.Lock()
	d.held = append(d.held, Held{Entry: b.entry, JSON: js})
	d.mu.Unlock()
}

func (d *dispatch) entryOf(b delivery) *heldEntry {
	return &heldEntry{ID: b.entry.ID, OK: b.entry.OrderingKey, EV: string(b.entry.Envelope), Seq: b.entry.Seq}
}
