package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/schedule"
)

// Outcome says whether a cycle ran or why it was skipped.
type Outcome int

// Cycle outcomes.
const (
	Ran Outcome = iota
	SkippedNotDue
	SkippedLeased
	SkippedPaused
	Failed
)

// CycleReport is what one cycle did.
type CycleReport struct {
	Key       Key
	Outcome   Outcome
	Pages     int
	Items     int
	Events    int
	Delivered int
	Parked    int
	Invalid   int
	Truncated bool
	Err       error
}

// cycle is one run for a key under its lease; it is dropped whole on LEASE_LOST.
type cycle struct {
	e      *Engine
	p      *Poller
	key    Key
	lease  Lease
	state  state
	holds  map[string]bool
	keeper *leaseKeeper
	canon  diff.Canonicalizer
	log    zerolog.Logger
	rep    CycleReport

	items int64 // tracked identities: the count at Begin plus rows created since

	serverAt time.Time // server clock at Begin
	localAt  time.Time // local clock at Begin (monotonic)
}

func newCycle(e *Engine, p *Poller, b BeginResult) *cycle {
	c := &cycle{e: e, p: p, key: b.Lease.Key, lease: b.Lease, state: newState(b.State),
		holds: map[string]bool{}, items: b.Items, serverAt: b.Now, localAt: time.Now(),
		log: e.log.With().Str("poller", b.Lease.Key.Poller).Str("partition", b.Lease.Key.Partition).Int64("epoch", b.Lease.Epoch).Logger()}
	c.rep.Key = c.key
	for _, h := range b.Holds {
		c.holds[h] = true
	}
	return c
}

// now is the server clock read at Begin plus the local time elapsed since.
func (c *cycle) now() time.Time { return c.serverAt.Add(time.Since(c.localAt)) }

// RunCycle runs one cycle for key: begin, drain the outbox, the live lane page by page, end.
func (e *Engine) RunCycle(ctx context.Context, key Key) CycleReport {
	rep := CycleReport{Key: key, Outcome: Failed}
	if !e.enter() {
		rep.Err = errors.New("watukuy: engine is stopping")
		return rep
	}
	defer e.inflight.Done()
	ctx, stopWithRoot := mergeCancel(ctx, e.root)
	defer stopWithRoot()

	p, err := e.poller(key)
	if err != nil {
		rep.Err = err
		return rep
	}
	b, err := e.store.Begin(ctx, key, e.owner, p.LeaseTTL, false)
	if err != nil {
		rep.Err = fmt.Errorf("watukuy: begin %s: %w", key, err)
		return rep
	}
	switch b.Status {
	case BeginPaused:
		// No due write: the claim timeout brings the key back, and a resume racing with this
		// skip is never overwritten.
		rep.Outcome = SkippedPaused
		return rep
	case BeginNotDue:
		rep.Outcome = SkippedNotDue
		rep.Err = e.wrapStore(key, "set due", e.store.SetDue(ctx, key, b.NextDue))
		return rep
	case BeginLeased:
		rep.Outcome = SkippedLeased
		rep.Err = e.wrapStore(key, "set due", e.store.SetDue(ctx, key, b.Now.Add(max(time.Second, p.LeaseTTL/2))))
		return rep
	}

	c := newCycle(e, p, b)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.keeper = startLeaseKeeper(cctx, e.store, c.lease, c.localAt, cancel)
	defer c.keeper.close()
	c.run(cctx, b.OutboxLen)
	if c.rep.Err != nil && !IsLeaseLost(c.rep.Err) {
		c.log.Warn().Err(c.rep.Err).Msg("cycle failed")
	}
	return c.rep
}

func (e *Engine) wrapStore(key Key, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("watukuy: %s %s: %w", what, key, err)
}

// run executes the cycle; on a lost lease it returns without writing anything more.
func (c *cycle) run(ctx context.Context, outboxLen int64) {
	c.rep.Outcome = Ran
	var failure *cycleError
	// G9: deliver what is pending before any request.
	if outboxLen > 0 {
		failure = c.drain(ctx)
	}
	complete := false
	if failure == nil {
		complete, failure = c.liveLane(ctx)
	}
	if cause := context.Cause(ctx); cause != nil && IsLeaseLost(cause) {
		c.abandon(cause)
		return
	}
	if failure != nil && IsLeaseLost(failure.err) {
		c.abandon(failure.err)
		return
	}
	if failure != nil && failure.phase == "store" {
		// Redis trouble: the lease lapses by itself and the claim timeout brings the key back.
		c.rep.Err = failure.err
		c.rep.Outcome = Failed
		return
	}
	c.rep.Truncated = !complete && failure == nil
	if c.rep.Truncated && c.p.Strategy == SnapshotDiff {
		// Deletes need a listing completed in one cycle (G6); this one never completes.
		c.rep.Truncated = false
		failure = &cycleError{phase: "config", code: "CONFIG", err: fmt.Errorf(
			"snapshotDiff listing of %s is longer than maxPagesPerCycle (%d): deletes cannot be detected; raise maxPagesPerCycle",
			c.key, c.p.MaxPagesPerCycle)}
	}
	if err := c.finish(ctx, failure); err != nil {
		if IsLeaseLost(err) {
			c.abandon(err)
			return
		}
		c.rep.Err = err
	}
	if failure != nil && c.rep.Err == nil {
		c.rep.Err = failure.err
	}
}

func (c *cycle) abandon(err error) {
	c.rep.Outcome = Failed
	c.rep.Err = err
	c.log.Warn().Err(err).Msg("lease lost: cycle abandoned")
}

// cycleError is a failure with the phase and code it is reported under.
type cycleError struct {
	phase string // fetch, handler, store, validate
	code  string // FETCH, POISON_HALT, STORE, CONFIG
	err   error
}

func storeErr(err error) *cycleError {
	if err == nil {
		return nil
	}
	return &cycleError{phase: "store", code: "STORE", err: err}
}

// drain delivers the outbox until it holds nothing deliverable.
func (c *cycle) drain(ctx context.Context) *cycleError {
	for {
		entries, err := c.e.store.ReadOutbox(ctx, c.lease, 512)
		if err != nil {
			return storeErr(err)
		}
		if len(entries) == 0 {
			return nil
		}
		ds := make([]delivery, len(entries))
		for i, en := range entries {
			ds[i] = delivery{entry: en}
		}
		if f := c.deliver(ctx, ds); f != nil {
			return f
		}
	}
}

// liveLane polls page by page from the live cursor; complete is false when maxPagesPerCycle
// cut it short.
func (c *cycle) liveLane(ctx context.Context) (complete bool, failure *cycleError) {
	cursor := c.state.get(fieldCursorLive)
	if c.p.Strategy == SnapshotDiff {
		cursor = ""
	}
	var seen map[string]bool
	if c.p.Strategy == SnapshotDiff {
		seen = map[string]bool{}
	}
	notModified := false
	for c.rep.Pages < c.p.MaxPagesPerCycle {
		if err := context.Cause(ctx); err != nil {
			return false, &cycleError{phase: "store", code: "STORE", err: err}
		}
		page, err := c.p.Fetch(ctx, FetchRequest{Key: c.key, Cursor: cursor, Lane: "live"})
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return false, &cycleError{phase: "store", code: "STORE", err: cause}
			}
			return false, &cycleError{phase: "fetch", code: "FETCH", err: fmt.Errorf("fetch %s at cursor %q: %w", c.key, cursor, err)}
		}
		c.rep.Pages++
		if page.NotModified {
			notModified = true
			complete = true
			break
		}
		var cm Commit
		events, err := c.process(ctx, "live", page.Items, seen, &cm)
		if err != nil {
			return false, storeErr(err)
		}
		if c.p.Strategy != SnapshotDiff && page.Next != cursor {
			cm.State = map[string]string{fieldCursorLive: page.Next}
		}
		if f := c.commitAndDeliver(ctx, cm, events); f != nil {
			return false, f
		}
		cursor = page.Next
		if !page.HasMore {
			complete = true
			break
		}
	}
	if complete && seen != nil && !notModified {
		if f := c.snapshotDeletes(ctx, seen); f != nil {
			return complete, f
		}
	}
	return complete, nil
}

// snapshotDeletes emits deleted for stored identities a complete listing did not show (G6).
// seen maps every listed identity to whether it was valid (and so is stored).
func (c *cycle) snapshotDeletes(ctx context.Context, seen map[string]bool) *cycleError {
	stored := int64(0)
	for _, valid := range seen {
		if valid {
			stored++
		}
	}
	if stored == c.items {
		return nil // every stored identity was listed: skip reading them all
	}
	all, err := c.e.store.Identities(ctx, c.key)
	if err != nil {
		return storeErr(err)
	}
	var gone []string
	for _, id := range all {
		if _, listed := seen[id]; !listed {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	rows, err := c.e.store.LoadRows(ctx, c.key, gone)
	if err != nil {
		return storeErr(err)
	}
	var cm Commit
	var events []Event
	for i, id := range gone {
		r, _ := diff.ParseRow(rows[i])
		ev := Event{ID: diff.EventID(c.key.Poller, c.key.Partition, id, string(Deleted), r.VF, c.p.SchemaVersion),
			Poller: c.key.Poller, Partition: c.key.Partition, Type: Deleted, Lane: "live", Identity: id,
			ObservedAt: c.now(), SchemaVersion: c.p.SchemaVersion}
		events = append(events, ev)
		cm.Deletes = append(cm.Deletes, id)
		if err := c.addEvent(&cm, ev); err != nil {
			return storeErr(err)
		}
	}
	return c.commitAndDeliver(ctx, cm, events)
}

// observation is one valid item of a page.
type observation struct {
	raw      json.RawMessage
	identity string
	version  string
	vf       diff.VF
}

// process diffs a page's items against the stored rows and fills cm; it returns the events
// in the order they are committed.
func (c *cycle) process(ctx context.Context, lane string, items []json.RawMessage, seen map[string]bool, cm *Commit) ([]Event, error) {
	c.rep.Items += len(items)
	obs := make([]observation, 0, len(items))
	for _, raw := range items {
		o, issue := c.observe(raw)
		if seen != nil && o.identity != "" {
			// An item listed but invalid is still present: never a delete (G6).
			seen[o.identity] = seen[o.identity] || issue == ""
		}
		if issue != "" {
			c.parkInvalid(cm, raw, o.identity, lane, issue)
			continue
		}
		obs = append(obs, o)
	}
	if len(obs) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(obs))
	index := make(map[string]int, len(obs))
	for _, o := range obs {
		if _, dup := index[o.identity]; !dup {
			index[o.identity] = len(ids)
			ids = append(ids, o.identity)
		}
	}
	rows, err := c.e.store.LoadRows(ctx, c.key, ids)
	if err != nil {
		return nil, err
	}
	var events []Event
	schema := c.p.SchemaVersion
	for _, o := range obs {
		i := index[o.identity]
		kind := diff.Classify(rows[i], o.vf, schema, c.p.EmitOnSchemaChange)
		if kind == diff.Unchanged {
			continue
		}
		row := diff.AppendRow(make([]byte, 0, diff.VFSize+2), diff.Row{VF: o.vf, Schema: schema})
		rows[i] = row // a later duplicate in the page compares with this one
		cm.Upserts = append(cm.Upserts, Upsert{Identity: o.identity, Row: row})
		if kind == diff.Rebaseline {
			continue
		}
		typ := Created
		if kind == diff.Created {
			c.items++
		}
		if kind == diff.Updated {
			typ = Updated
		}
		ev := Event{ID: diff.EventID(c.key.Poller, c.key.Partition, o.identity, string(typ), o.vf, schema),
			Poller: c.key.Poller, Partition: c.key.Partition, Type: typ, Lane: lane, Identity: o.identity,
			Version: o.version, ObservedAt: c.now(), SchemaVersion: schema, Item: o.raw}
		if err := c.addEvent(cm, ev); err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// observe extracts identity, version and fingerprint; a non-empty issue means invalid.
func (c *cycle) observe(raw json.RawMessage) (o observation, issue string) {
	o.raw = raw
	id, err := c.p.Identity(raw)
	if err != nil {
		return o, "no identity: " + err.Error()
	}
	if id == "" {
		return o, "no identity: empty"
	}
	o.identity = id
	if c.p.Validate != nil {
		if err := c.p.Validate(raw); err != nil {
			return o, "validate: " + err.Error()
		}
	}
	if c.p.Version != nil {
		if o.version, err = c.p.Version(raw); err != nil {
			return o, "version: " + err.Error()
		}
	}
	var fp []byte
	if c.p.Fingerprint != nil {
		fp, err = c.p.Fingerprint(raw)
	} else {
		var h [32]byte
		h, err = c.canon.Hash(raw)
		fp = h[:]
	}
	if err != nil {
		return o, "fingerprint: " + err.Error()
	}
	o.vf = diff.VersionFingerprint(o.version, fp)
	return o, ""
}

func (c *cycle) parkInvalid(cm *Commit, raw json.RawMessage, identity, lane, issue string) {
	sum := sha256.Sum256(raw)
	id := "inv_" + hex.EncodeToString(sum[:12])
	row, _ := json.Marshal(parkedRow{Kind: parkedInvalid, ID: id, Error: issue, Errors: []string{issue},
		Identity: identity, Lane: lane, Item: string(raw), ParkedAt: c.now().UnixMilli()})
	cm.Invalid = append(cm.Invalid, ParkedRow{ID: id, Row: row})
	c.rep.Invalid++
	c.log.Warn().Str("parkedId", id).Str("identity", identity).Str("issue", issue).Msg("item parked as invalid")
}

func (c *cycle) addEvent(cm *Commit, ev Event) error {
	env, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	cm.Events = append(cm.Events, OutboxEvent{ID: ev.ID, OrderingKey: c.p.orderingKey(ev), Envelope: env})
	return nil
}

// commitAndDeliver commits a page (G3: cursor and events in one write) and delivers what it
// committed straight from memory.
func (c *cycle) commitAndDeliver(ctx context.Context, cm Commit, events []Event) *cycleError {
	if len(cm.State) == 0 && len(cm.Upserts) == 0 && len(cm.Deletes) == 0 && len(cm.Events) == 0 &&
		len(cm.Invalid) == 0 && len(cm.Unpark) == 0 {
		return nil
	}
	sent := time.Now()
	res, err := c.e.store.CommitPoll(ctx, c.lease, cm)
	if err != nil {
		return storeErr(err)
	}
	c.keeper.touched(sent)
	c.rep.Events += len(events)
	if len(events) == 0 {
		return nil
	}
	ds := make([]delivery, len(events))
	for i := range events {
		events[i].Seq = res.StreamIDs[i]
		ds[i] = delivery{entry: Entry{StreamID: res.StreamIDs[i], ID: events[i].ID, OrderingKey: cm.Events[i].OrderingKey,
			Envelope: cm.Events[i].Envelope, Seq: res.StreamIDs[i]}, ev: &events[i]}
	}
	return c.deliver(ctx, ds)
}

// retryInvalid runs a parked invalid item through the diff again; if it now passes it is
// committed like an observation and its parked row removed.
func (c *cycle) retryInvalid(ctx context.Context, r parkedRow) error {
	raw := json.RawMessage(r.Item)
	if _, issue := c.observe(raw); issue != "" {
		return fmt.Errorf("parked row %s is still invalid: %s", r.ID, issue)
	}
	lane := r.Lane
	if lane == "" {
		lane = "live"
	}
	var cm Commit
	events, err := c.process(ctx, lane, []json.RawMessage{raw}, nil, &cm)
	if err != nil {
		return err
	}
	cm.Unpark = []string{r.ID}
	if _, err := c.e.store.CommitPoll(ctx, c.lease, cm); err != nil {
		return err
	}
	c.rep.Events += len(events)
	return nil
}

// finish computes the schedule (pure functions), saves it and releases the lease.
func (c *cycle) finish(ctx context.Context, failure *cycleError) error {
	now := c.now()
	cfg := c.p.Schedule
	interval := c.state.duration(fieldInterval)
	failures := c.state.int(fieldFailures)
	st := map[string]string{}
	var del []string
	var next time.Time
	circuit := circuitClosed
	switch {
	case failure != nil:
		failures++
		if failures >= c.p.Failures || failure.code == "POISON_HALT" {
			circuit = circuitOpen
			next = now.Add(c.p.ProbeEvery)
		} else {
			next = now.Add(schedule.DefaultBackoff.Delay(failures, c.e.rand()))
		}
		le, _ := json.Marshal(map[string]any{"code": failure.code, "phase": failure.phase,
			"message": failure.err.Error(), "at": now.UTC().Format(time.RFC3339Nano)})
		st[fieldLastError] = string(le)
	case c.rep.Truncated:
		failures = 0
		next = c.serverAt // due again at once, whatever clock the claimer reads
		del = append(del, fieldLastError)
	default:
		failures = 0
		outcome := schedule.Idle
		if c.rep.Events > 0 {
			outcome = schedule.Changed
		}
		interval = schedule.NextInterval(cfg, interval, outcome)
		next = now.Add(schedule.Jittered(interval, cfg.Jitter, c.e.rand()))
		del = append(del, fieldLastError)
	}
	if interval <= 0 {
		interval = cfg.Min
	}
	summary, _ := json.Marshal(map[string]any{"at": now.UTC().Format(time.RFC3339Nano),
		"durationMs": time.Since(c.localAt).Milliseconds(), "pages": c.rep.Pages, "items": c.rep.Items,
		"events": c.rep.Events, "delivered": c.rep.Delivered, "parked": c.rep.Parked,
		"invalid": c.rep.Invalid, "truncated": c.rep.Truncated})
	st[fieldInterval] = strconv.FormatInt(interval.Milliseconds(), 10)
	st[fieldFailures] = strconv.Itoa(failures)
	st[fieldCircuit] = circuit
	st[FieldNextDue] = strconv.FormatInt(next.UnixMilli(), 10)
	st[fieldLastPoll] = string(summary)
	st[fieldSchema] = strconv.Itoa(c.p.SchemaVersion)
	return c.e.store.End(ctx, c.lease, EndRequest{State: st, Delete: del, NextDue: next})
}

// mergeCancel returns a context cancelled when either parent is.
func mergeCancel(ctx, other context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(other, func() { cancel(context.Cause(other)) })
	return ctx, func() { stop(); cancel(nil) }
}
