package core

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/internal/changeset"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/jcs"
	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// cycle is one run for a key under its lease; it is dropped whole on LEASE_LOST.
type cycle struct {
	e     *Engine
	p     *watukuytype.Poller
	key   watukuytype.Key
	lease Lease
	state state
	// holds are the ordering keys this cycle parked an event of: the store diverts their later
	// events (commit_poll.lua, read_outbox.lua); a batch in hand holds them back here.
	holds  map[string]bool
	keeper *leaseKeeper
	// yield is done when the engine asks its cycles to stop at their next step (Stop with
	// drain, Tick's deadline): the cycle commits what it has, releases its lease and leaves
	// the key due at once.
	yield context.Context
	canon jcs.Canonicalizer
	// ignore is the poller's Changes.Ignore, read at the cycle's first item (ignoreRead).
	ignore     changeset.Ignore
	ignoreRead bool
	log        atomic.Pointer[zerolog.Logger] // logger's, built at its first use
	rep        watukuytype.CycleReport
	// span is the cycle's span (a no-op one when tracing is off); lane is the lane running
	// now and lanes those that ran, for the spans (enterLane).
	span  trace.Span
	lane  watukuytype.Lane
	lanes []string

	items int64 // tracked identities: the count at Begin plus rows created since
	// invalidIndexed: the key has parked invalid observations (at Begin, or parked since), so
	// loads read them too.
	invalidIndexed bool

	// read and valid count the items the live and reconcile lanes read in this cycle (a
	// backfill's past is not counted) and those of them that passed identity, version,
	// validation and fingerprint; issue is the first invalid one's reason. A cycle that read
	// items and found none valid ends with INVALID_ITEMS (finish).
	read, valid int
	issue       string
	// progressed: a page of the live or reconcile lane with a valid item was committed, so
	// the key moved forward with data even if the cycle fails later (freshAt).
	progressed bool

	rateLimit   *watukuytype.RateLimit // the last rate-limit headers seen in this cycle
	rateLimitAt time.Time
	confirmed   bool // a fenced write succeeded since the last request
	throttled   bool // the API answered 429 (or 503 with Retry-After) in this cycle
	answered    bool // a lane's request got a page in this cycle

	budget   *budgetInfo   // the shared budget the key's requests draw from (nil: none)
	bucket   string        // its bucket for this key
	deferred time.Duration // the budget refused a request: the longest wait it asked for
	// lowerDeferred: the budget made a lower lane (reconcile, backfill) wait this long.
	lowerDeferred time.Duration
	tagPending    bool // state[statehash.LiveTag] is not written yet (see setTag)
	dlv           deliveries

	backfilling *watukuytype.BackfillProgress // the backfill lane's progress while it runs
	force       int64                         // while a forced backfill runs: its generation
	released    bool                          // an operation gave the lease up itself (partition deleted)
	endDelete   []string                      // state fields an operation deletes when it ends (withOpLease)

	next     *NextBegin // the task's next cycle, whose Begin goes out with this End (nil: none)
	serverAt time.Time  // server clock at Begin
	localAt  time.Time  // local clock when Begin was sent
	replyAt  time.Time  // local clock when Begin's reply arrived
}

// newCycle starts a cycle under the lease b granted; sentAt and replyAt are the local times
// Begin was sent and answered.
func newCycle(e *Engine, p *watukuytype.Poller, b BeginResult, sentAt, replyAt time.Time) *cycle {
	c := &cycle{e: e, p: p, key: b.Lease.Key, lease: b.Lease, state: newState(b.State), yield: context.Background(), span: noSpan(),
		holds: map[string]bool{}, items: b.Items, invalidIndexed: b.InvalidIndexed > 0, serverAt: b.Now, localAt: sentAt, replyAt: replyAt}
	c.rep.Key = c.key
	e.mu.Lock()
	if c.budget = e.budgetOf(p); c.budget != nil {
		c.bucket = budget.Bucket(c.budget.Name, c.key.Partition)
	}
	e.mu.Unlock()
	c.rep.DeleteCandidates = c.state.int(statehash.DeleteCandidates) // until a listing counts them anew
	c.dlv.block = blockageOf(c.state)
	return c
}

// logger is the cycle's logger, naming its key and epoch; built at its first use, since most
// cycles log nothing.
func (c *cycle) logger() *zerolog.Logger {
	if l := c.log.Load(); l != nil {
		return l
	}
	l := c.e.log.With().Str("poller", c.key.Poller).Str("partition", c.key.Partition).Int64("epoch", c.lease.Epoch).Logger()
	c.log.CompareAndSwap(nil, &l)
	return c.log.Load()
}

// now is the server clock read at Begin plus the local time elapsed since Begin was sent: never
// earlier than the server's own clock, so a window saved from it never ends too early.
func (c *cycle) now() time.Time { return c.serverAt.Add(c.e.now().Sub(c.localAt)) }

// serverNotLater is the server clock read at Begin plus the local time elapsed since its reply
// arrived: never later than the server's own clock (Begin ran before its reply came), so a
// throttle window is never taken for over too early, however late Begin's request reached
// Redis.
func (c *cycle) serverNotLater() time.Time { return c.serverAt.Add(c.e.now().Sub(c.replyAt)) }

// paused reports whether a fenced reply of this cycle found the key paused by an operator.
func (c *cycle) paused() bool { return c.keeper != nil && c.keeper.paused.Load() }

// halted reports whether the cycle is to stop at its next step: paused, or asked to yield.
func (c *cycle) halted() bool { return c.paused() || c.yield.Err() != nil }

// yielding reports whether the cycle was asked to yield while ctx (the cycle's own) lives: a
// request or wait that ended then was given up for it, not failed.
func (c *cycle) yielding(ctx context.Context) bool {
	return c.yield.Err() != nil && ctx.Err() == nil
}

// RunCycle runs one cycle for key: begin, drain the outbox, the live lane page by page, end.
func (e *Engine) RunCycle(ctx context.Context, key watukuytype.Key) watukuytype.CycleReport {
	return e.runOne(ctx, key, nil, nil)
}

// RunCycles runs the cycles of keys one after another (a worker's task). A cycle that ends
// with End sends the next key's Begin with it, so a task of n idle keys costs n+1 round trips
// of the engine instead of 2n. It stops when ctx ends; the keys it did not run come back when
// their claims lapse.
func (e *Engine) RunCycles(ctx context.Context, keys []watukuytype.Key) []watukuytype.CycleReport {
	reps := make([]watukuytype.CycleReport, 0, len(keys))
	var pre *NextBegin
	for i, key := range keys {
		if ctx.Err() != nil {
			e.handBack(ctx, pre)
			break
		}
		var next *NextBegin
		if i+1 < len(keys) {
			if p, err := e.poller(keys[i+1]); err == nil {
				next = &NextBegin{Key: keys[i+1], Owner: e.owner, TTL: p.LeaseTTL}
			}
		}
		reps = append(reps, e.runOne(ctx, key, pre, next))
		pre = next
	}
	return reps
}

// runOne runs key's cycle: under the lease pre granted when pre sent key's Begin, and with
// next's Begin sent along with its End (nil: none).
func (e *Engine) runOne(ctx context.Context, key watukuytype.Key, pre, next *NextBegin) watukuytype.CycleReport {
	start := e.now()
	ctx, span := e.startCycleSpan(ctx, key)
	if pre != nil && (!pre.Sent || pre.Key != key) {
		pre = nil
	}
	rep := e.runCycle(ctx, key, span, pre, next)
	endCycleSpan(span, rep)
	if h := e.hooks.OnCycle; h != nil {
		h(rep, e.now().Sub(start))
	}
	return rep
}

// handBack releases a lease pre granted to a cycle that will not run, with its key due now.
func (e *Engine) handBack(ctx context.Context, pre *NextBegin) {
	if !pre.Granted() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	b := pre.Result
	if err := e.store.End(ctx, b.Lease, EndRequest{NextDue: e.now(), Trigger: b.State[statehash.Trigger]}); err != nil {
		e.log.Warn().Err(err).Str("poller", pre.Key.Poller).Str("partition", pre.Key.Partition).
			Msg("could not hand back a lease taken for a cycle that did not run: the key comes back when it lapses")
	}
}

// runCycle is runOne under span, the cycle's span.
func (e *Engine) runCycle(ctx context.Context, key watukuytype.Key, span trace.Span, pre, next *NextBegin) watukuytype.CycleReport {
	rep := watukuytype.CycleReport{Key: key, Outcome: watukuytype.Failed}
	// A lease pre took for this cycle goes back, the key due now, unless the cycle runs under it.
	unused, outer := pre, ctx
	defer func() { e.handBack(outer, unused) }()
	if !e.enter() {
		rep.Err = watukuytype.ErrEngineStopped
		if pre.Granted() {
			return rep // handed back, due now
		}
		// The key was claimed for this cycle: hand it back due now, not when the claim lapses.
		if err := e.store.SetDue(ctx, key, e.now()); err != nil {
			rep.Err = fmt.Errorf("%w (and its claim was not handed back: %w)", rep.Err, err)
		}
		return rep
	}
	defer e.inflight.Done()
	if pre != nil && ctx.Err() != nil { // cut short between the loop's look and here
		rep.Err = keyErr("watukuy: begin", key, ctx.Err())
		return rep
	}
	// One context for the whole cycle: ended by the engine's stop, and by the lease keeper when
	// the lease is lost (its cause says so).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopWithRoot := context.AfterFunc(e.root, func() { cancel(context.Cause(e.root)) })
	defer stopWithRoot()
	yield, stopYield := mergeCancel(e.yield, yieldOf(ctx))
	defer stopYield()

	p, err := e.poller(key)
	if err != nil {
		rep.Err = err
		return rep
	}
	// A cycle begins only a registered key (a key the registry does not hold is a deleted
	// one): the engine's own keys are registered before its first cycle.
	if err := e.ensureRegistered(ctx); err != nil {
		rep.Err = err
		return rep
	}
	sent := e.now()
	bctx, bspan := e.startSpan(ctx, SpanBegin)
	var b BeginResult
	if pre != nil { // sent with the previous cycle's End
		sent, b, err, unused = pre.At, pre.Result, pre.Err, nil
	} else {
		b, err = e.store.Begin(bctx, key, e.owner, p.LeaseTTL, BeginForCycle)
	}
	if err == nil && b.Status == BeginOK && (b.Lease.TTL <= 0 || b.Lease.Token == "") {
		// A store's bug, answered as a failed Begin: no cycle runs without a lease (and the
		// lease keeper cannot tick at a zero TTL).
		err = fmt.Errorf("the store answered a grant without a lease (epoch %d, TTL %v, token %q)", b.Lease.Epoch, b.Lease.TTL, b.Lease.Token)
	}
	if err != nil {
		rep.Err = keyErr("watukuy: begin", key, err)
		endSpan(bspan, rep.Err)
		return rep
	}
	if bspan.IsRecording() {
		bspan.SetAttributes(AttrResult.String(beginLabel(b.Status)))
		if b.Status == BeginOK {
			bspan.SetAttributes(AttrEpoch.Int64(b.Lease.Epoch))
			span.SetAttributes(AttrEpoch.Int64(b.Lease.Epoch))
		}
	}
	bspan.End()
	switch b.Status {
	case BeginPaused:
		// Looked at again pausedRecheck later rather than at every lapse of its claim;
		// Resume makes it due at once, and SetDue never overwrites that due-now entry.
		rep.Outcome = watukuytype.SkippedPaused
		rep.Err = e.wrapStore(key, "set due", e.store.SetDue(ctx, key, e.now().Add(pausedRecheck)))
		return rep
	case BeginDeleted:
		// A task of a deleted partition: forget the key, unless a partitions add since the
		// claim made it due again (Unschedule keeps a due-now entry).
		rep.Outcome = watukuytype.SkippedPaused
		rep.Err = e.wrapStore(key, "unschedule deleted key", e.store.Unschedule(ctx, key))
		return rep
	case BeginNotDue:
		// SetDue keeps a due-now entry: a trigger racing this Begin is not overwritten.
		rep.Outcome = watukuytype.SkippedNotDue
		rep.Err = e.wrapStore(key, "set due", e.store.SetDue(ctx, key, b.NextDue))
		return rep
	case BeginLeased:
		// A stale task (asynq giving back a dead worker's task) met a live lease: the key is
		// claimable again when that lease lapses plus the grace, as its claim would be; a due
		// time later than that would delay the takeover of a dead holder's key.
		rep.Outcome = watukuytype.SkippedLeased
		rep.Err = e.wrapStore(key, "set due", e.store.SetDue(ctx, key, b.LeaseExpires.Add(ClaimGrace)))
		return rep
	}

	c := newCycle(e, p, b, sent, e.now())
	c.yield, c.span, c.next = yield, span, next
	c.keeper = startLeaseKeeper(ctx, e.store, c.lease, e.now, sent, cancel)
	defer c.keeper.close()
	c.run(ctx, b.OutboxLen+b.Released)
	switch r := c.rep; {
	case r.Err != nil && !watukuytype.IsLeaseLost(r.Err):
		c.logger().Warn().Err(r.Err).Int("parked", r.Parked).Int("invalid", r.Invalid).Msg("cycle failed")
	case r.Parked > 0 || r.Invalid > 0:
		// Parked rows wait for an operator even when the cycle ran through: one line per cycle
		// with the counts, so a poller that parks everything does not look healthy.
		c.logger().Warn().Int("items", r.Items).Int("events", r.Events).Int("delivered", r.Delivered).
			Int("parked", r.Parked).Int("invalid", r.Invalid).Msg("cycle parked rows: see `watukuy parked ls`")
	}
	return c.rep
}

// pausedRecheck is how long a paused (or removed) key waits before it is claimed again.
const pausedRecheck = 5 * time.Minute

func (e *Engine) wrapStore(key watukuytype.Key, what string, err error) error {
	if err == nil {
		return nil
	}
	return keyErr("watukuy: "+what, key, err)
}

// run executes the cycle; on a lost lease it returns without writing anything more.
func (c *cycle) run(ctx context.Context, pending int64) {
	c.rep.Outcome = watukuytype.Ran
	var failure *cycleError
	// G9: deliver what is pending (the outbox, released held events) before any request;
	// while the key's delivery is blocked and its next try has not come, the cycle polls and
	// its events wait in the outbox behind the others.
	c.dlv.off = c.blockWaits()
	if pending > 0 && !c.p.Shadow && !c.dlv.off {
		failure = c.drain(ctx)
	}
	if failure == nil {
		failure = c.dropStaleListings(ctx)
	}
	var live laneResult
	if failure == nil {
		// A snapshotDiff listing longer than the cycle's pages goes on in the next cycle.
		live, failure = c.runLane(ctx, c.liveLane())
	}
	reconciled, reconcileCut := false, false
	if failure == nil && live.complete && c.reconcileDue() {
		var rec laneResult
		rec, failure = c.runLane(ctx, lane{name: watukuytype.LaneReconcile, fetch: c.p.Reconcile.Fetch, listing: true, maxPages: c.p.Reconcile.MaxPages})
		reconciled = failure == nil && rec.complete
		// A reconcile listing longer than reconcile.maxPages goes on in the next cycle, due at once.
		reconcileCut = failure == nil && !rec.complete && rec.paced == 0 && !rec.halted
	}
	backfillPending := false
	if bp := c.state.backfill(); failure == nil && backfillActive(bp) && c.p.Strategy != watukuytype.SnapshotDiff {
		backfillPending = true
		// Only once the live lane has caught up does the backfill get the pages it left.
		if ln, ok := c.backfillLane(bp, live, c.p.MaxPagesPerCycle-live.pages); ok {
			bf, f := c.runLane(ctx, ln)
			c.force = 0
			switch {
			case f == nil && bf.complete && !c.backfilling.Done:
				failure = c.endBackfill(ctx, nil) // a 304: nothing more at the cursor
			case f == nil:
			case f.kind == schedule.ResultThrottled || f.phase == "store":
				failure = f // the key's own trouble: throttled (G8) or Redis
			default:
				// The backfill's trouble is not the live lane's: no failure count, no circuit.
				failure = c.endBackfill(ctx, f)
			}
			backfillPending = f == nil && failure == nil && !c.backfilling.Done
		}
	}
	if cause := context.Cause(ctx); cause != nil && watukuytype.IsLeaseLost(cause) {
		c.abandon(cause)
		return
	}
	if failure != nil && watukuytype.IsLeaseLost(failure.err) {
		c.abandon(failure.err)
		return
	}
	if failure != nil && ctx.Err() != nil && !c.keeper.valid() {
		// Cancelled from outside (asynq took the task back: its own lease of the task lapsed
		// while the process was stopped) after the lease's validity passed: the lease is
		// surely gone, which is what the operator needs to read.
		c.abandon(&watukuytype.LeaseLostError{Key: c.key, Epoch: c.lease.Epoch, Reason: "cancelled after the lease's validity passed (the process was paused past it): " + failure.err.Error()})
		return
	}
	if failure != nil && failure.kind != schedule.ResultThrottled {
		if h := c.e.hooks.OnError; h != nil {
			h(c.key, failure.phase, failure.err)
		}
	}
	if failure != nil && failure.phase == "store" {
		// Redis trouble: the lease lapses by itself and the claim timeout brings the key back.
		c.rep.Err = failure.err
		c.rep.Outcome = watukuytype.Failed
		return
	}
	// A cycle whose first request the budget refused read nothing: deferred, not truncated.
	c.rep.Truncated = failure == nil && (!live.complete || reconcileCut) && !c.paused() && !c.budgetDeferredAll()
	c.rep.Deferred = max(c.deferred, c.lowerDeferred)
	if c.paused() {
		c.logger().Info().Msg("key paused by an operator: cycle stopped at its next step")
	}
	if err := c.finish(ctx, failure, live.paced, reconciled, backfillPending); err != nil {
		if watukuytype.IsLeaseLost(err) {
			c.abandon(err)
			return
		}
		c.rep.Err = err
	}
	if failure != nil && failure.kind != schedule.ResultThrottled && c.rep.Err == nil {
		c.rep.Err = failure.err
	}
}

// budgetDeferredAll reports whether the budget refused the cycle's first request: no request
// was sent, so the cycle says nothing of the API.
func (c *cycle) budgetDeferredAll() bool { return c.deferred > 0 && !c.answered && !c.throttled }

func (c *cycle) abandon(err error) {
	c.rep.Outcome = watukuytype.Failed
	c.rep.Err = err
	c.logger().Warn().Err(err).Msg("lease lost: cycle abandoned")
	if h := c.e.hooks.OnLeaseLost; h != nil {
		h(c.key, err)
	}
}

// lastErrorCode reads the code of a stored LastError ("" when none or unreadable).
func lastErrorCode(v string) watukuytype.ErrorCode {
	if v == "" { // the usual case: nothing to decode, nothing allocated
		return ""
	}
	var le watukuytype.LastError
	if json.Unmarshal([]byte(v), &le) != nil {
		return ""
	}
	return le.Code
}

// cycleError is a failure with the phase and code it is reported under and what the
// schedule state machine makes of it.
type cycleError struct {
	phase      string // fetch, handler, store, replication, config
	code       watukuytype.ErrorCode
	kind       schedule.Kind
	retryAfter time.Duration
	err        error
}

func storeErr(err error) *cycleError {
	if err == nil {
		return nil
	}
	return &cycleError{phase: "store", code: watukuytype.CodeStore, kind: schedule.ResultFailed, err: err}
}

// drain delivers the outbox until it holds nothing deliverable: it goes on while a read took
// anything, since a batch whose entries were all held (moved aside) says nothing of the
// entries behind it (G9, G4). A pause stops it.
func (c *cycle) drain(ctx context.Context) *cycleError {
	for !c.halted() && !c.dlv.off {
		b, err := c.e.store.ReadOutbox(ctx, c.lease, c.p.Delivery.Batch)
		if err != nil {
			return storeErr(c.keeper.check(err))
		}
		if b.Paused {
			c.keeper.paused.Store(true)
			return nil
		}
		if b.Unreplicated {
			return unreplicated(c.key)
		}
		if b.Read == 0 {
			return nil
		}
		if len(b.Entries) == 0 {
			continue
		}
		ds := make([]delivery, len(b.Entries))
		for i, en := range b.Entries {
			ds[i] = delivery{entry: en}
		}
		if f := c.deliver(ctx, ds); f != nil {
			return f
		}
	}
	return nil
}

// finish runs the schedule state machine (pure functions), saves its state and releases
// the lease.
func (c *cycle) finish(ctx context.Context, failure *cycleError, paced time.Duration, reconciled, backfillPending bool) error {
	now := c.now()
	// Asked to yield before the API answered anything (a stopping process, tick's deadline):
	// nothing was learned of the API (a restart is not the API's fault).
	noEvidence := failure == nil && !c.answered && c.yield.Err() != nil && !c.paused()
	res := schedule.Result{Kind: schedule.ResultIdle, Began: c.serverAt}
	switch {
	case failure != nil:
		res.Kind, res.RetryAfter = failure.kind, failure.retryAfter
	case noEvidence:
		res.Kind = schedule.ResultNoAnswer
	case c.budgetDeferredAll():
		res.Kind = schedule.ResultDeferred
	case c.rep.Truncated:
		res.Kind = schedule.ResultTruncated
	case c.rep.Events > 0:
		res.Kind = schedule.ResultChanged
	}
	res.Pace = max(paced, c.pace(), c.deferred)
	prev := schedule.State{Interval: c.state.duration(statehash.Interval), Failures: c.state.int(statehash.Failures),
		Circuit: c.state.circuit(), ThrottledUntil: c.state.time(statehash.Throttled)}
	next := schedule.Next(policy(c.p), prev, res, now, c.e.rand())
	if backfillPending && failure == nil && !noEvidence {
		// More backfill to do: come back as soon as the API's pace allows (at once: the
		// Begin time, whatever clock the next claimer reads).
		soon := c.serverAt
		if w := max(res.Pace, c.lowerDeferred); w > 0 {
			soon = now.Add(w)
		}
		if soon.Before(next.NextDue) {
			next.NextDue = soon
		}
	}

	st := map[string]string{
		statehash.Interval: strconv.FormatInt(next.Interval.Milliseconds(), 10),
		statehash.NextDue:  strconv.FormatInt(next.NextDue.UnixMilli(), 10),
	}
	var del []string
	if c.dlv.changed {
		if b := c.dlv.block; b != nil {
			js, _ := json.Marshal(b)
			st[statehash.Blocked] = string(js)
		} else {
			del = append(del, statehash.Blocked)
		}
	}
	// A listing that completed after spanning cycles leaves its position "" (End drops it).
	for _, lane := range []watukuytype.Lane{watukuytype.LaneLive, watukuytype.LaneReconcile} {
		if v, ok := c.state[listingField(lane)]; ok && v == "" {
			del = append(del, listingField(lane))
		}
	}
	// A field at its default is deleted, not written: a missing one reads as the default, and
	// an idle key's state stays small. gone deletes only what the state holds: only End writes
	// these fields (and a throttled page's commit the window, which it sets in c.state too), so
	// they are what Begin read, and an idle cycle sends no deletions.
	gone := func(f string) {
		if _, ok := c.state[f]; ok {
			del = append(del, f)
		}
	}
	for _, f := range []struct{ name, value, def string }{
		{statehash.Failures, strconv.Itoa(next.Failures), "0"},
		{statehash.Circuit, string(next.Circuit), string(watukuytype.CircuitClosed)},
		{statehash.Schema, strconv.Itoa(c.p.SchemaVersion), "0"},
	} {
		if f.value == f.def {
			gone(f.name)
		} else {
			st[f.name] = f.value
		}
	}
	// Kept while the server clock may still be inside it: now() runs ahead of the server by
	// however late Begin's request reached Redis. Written only when the API gave it in this
	// cycle: rewriting the window Begin found would undo a trigger that cleared it meanwhile.
	switch {
	case !next.ThrottledUntil.After(c.serverNotLater()):
		gone(statehash.Throttled)
	case c.throttled:
		st[statehash.Throttled] = strconv.FormatInt(next.ThrottledUntil.UnixMilli(), 10)
	}
	if c.rateLimit != nil {
		rl, _ := json.Marshal(map[string]any{"limit": c.rateLimit.Limit, "remaining": c.rateLimit.Remaining,
			"resetAt": c.rateLimitAt.Add(c.rateLimit.Reset).UTC().Format(time.RFC3339Nano), "seenAt": c.rateLimitAt.UTC().Format(time.RFC3339Nano)})
		st[statehash.RateLimit] = string(rl)
	}
	if c.p.Reconcile != nil && (reconciled || c.state.time(statehash.ReconcileDue).IsZero()) {
		st[statehash.ReconcileDue] = strconv.FormatInt(now.Add(c.p.Reconcile.Every).UnixMilli(), 10)
	}
	// Items read and none valid: the key is degraded (LastError). A cycle that read nothing
	// says nothing new of the items and keeps it.
	invalidOnly := failure == nil && c.read > 0 && c.valid == 0
	stillInvalid := failure == nil && c.read == 0 && lastErrorCode(c.state.get(statehash.LastError)) == watukuytype.CodeInvalidItems
	outcome := "ok"
	switch {
	case failure != nil && failure.kind != schedule.ResultThrottled:
		le, _ := json.Marshal(watukuytype.LastError{Code: failure.code, Phase: failure.phase,
			Message: failure.err.Error(), At: now.UTC().Format(time.RFC3339Nano)})
		st[statehash.LastError] = string(le)
	case invalidOnly:
		le, _ := json.Marshal(watukuytype.LastError{Code: watukuytype.CodeInvalidItems, Phase: "validate", At: now.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("all %d items read in this cycle are invalid (first: %s) and were parked: the cursor moved past them without an event; see `parked ls --kind invalid`, fix the poller's identity/validation (or the data), then `parked retry`", c.read, c.issue)})
		st[statehash.LastError] = string(le)
		outcome = string(watukuytype.CodeInvalidItems)
	case stillInvalid, noEvidence:
	case failure == nil:
		gone(statehash.LastError)
	}
	if failure != nil {
		outcome = string(failure.code)
	}
	// freshAt: the key is current with its API (a cycle that ran through without failing or
	// degrading, whether or not anything was new) or moved forward with data (a committed page
	// with a valid item, even in a cycle that failed later). A cursor stall, failing requests,
	// a throttle, a halted delivery or pages of invalid items never refresh it.
	// A fresh cycle's time is its summary's (flag f), so the field goes; otherwise the last
	// fresh time is kept in the field, wherever the state had it.
	fresh := c.progressed || failure == nil && !invalidOnly && !stillInvalid && !noEvidence && !c.paused()
	if fresh {
		gone(statehash.FreshAt)
	} else if t := c.state.freshAt(); !t.IsZero() {
		st[statehash.FreshAt] = strconv.FormatInt(t.UnixMilli(), 10)
	}
	summary := watukuytype.PollSummary{At: now.UTC().Format(time.RFC3339Nano), Outcome: outcome,
		DurationMs: c.e.now().Sub(c.localAt).Milliseconds(), Pages: c.rep.Pages, Items: c.rep.Items,
		Events: c.rep.Events, Delivered: c.rep.Delivered, Parked: c.rep.Parked, Invalid: c.rep.Invalid, DeleteCandidates: c.rep.DeleteCandidates,
		Truncated: c.rep.Truncated, NotModified: c.rep.NotModified, Reconciled: reconciled, BackfillPending: backfillPending, Fresh: fresh}
	// Compact, not JSON: it keeps an idle key's state hash a small listpack.
	st[statehash.LastPoll] = compactPoll(summary)
	if c.tagPending {
		st[statehash.LiveTag] = c.state.get(statehash.LiveTag)
	}
	if c.span.IsRecording() {
		c.span.SetAttributes(AttrResult.String(outcome))
	}
	c.keeper.close()
	ectx, span := c.startSpan(ctx, SpanEnd)
	req := EndRequest{State: st, Delete: del, NextDue: next.NextDue, Trigger: c.state.get(statehash.Trigger)}
	if c.next != nil && c.yield.Err() == nil { // a stopping worker starts no next cycle
		c.next.At, req.Next = c.e.now(), c.next
	}
	err := c.e.store.End(ectx, c.lease, req)
	endSpan(span, err)
	if err != nil {
		return err
	}
	if h := c.e.hooks.OnCircuitOpen; h != nil && next.Circuit == watukuytype.CircuitOpen && failure != nil {
		h(c.key, next.NextDue, failure.err)
	}
	if h := c.e.hooks.OnThrottled; h != nil && failure != nil && failure.kind == schedule.ResultThrottled {
		h(c.key, next.ThrottledUntil)
	}
	return nil
}

// mergeCancel returns a context cancelled when either parent is: ctx itself when other never
// is (a cycle outside Tick has no yield of its own, and a merge costs allocations per cycle).
func mergeCancel(ctx, other context.Context) (context.Context, context.CancelFunc) {
	if other.Done() == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(other, func() { cancel(context.Cause(other)) })
	return ctx, func() { stop(); cancel(nil) }
}
