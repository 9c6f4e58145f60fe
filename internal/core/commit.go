package core

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/internal/changeset"
	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// commitResult is what committing a page's writes did.
type commitResult struct {
	seqs      []string // each event's outbox sequence
	envelopes [][]byte
	keys      []string // ordering keys
	// diverted are the events whose ordering key is held (or has released held events to
	// deliver): the store queued them behind its held events (G4), they are not delivered now.
	diverted map[int]bool
	paused   bool
	// unreplicated: the store waits for replicas and they did not confirm a chunk in time.
	unreplicated bool
}

// commit writes w (G3: the cursor goes with its page's events) in chunks of at most the
// poller's CommitMaxItems changes and CommitMaxBytes, so that no single script holds Redis for
// long whatever the page's size. Only the last chunk carries the state patch (the cursor); each
// chunk writes the rows as they stand after its own changes.
func (c *cycle) commit(ctx context.Context, w *pageWrites) (commitResult, error) {
	res := commitResult{seqs: make([]string, len(w.events)), envelopes: make([][]byte, len(w.events)), keys: make([]string, len(w.events)),
		diverted: map[int]bool{}}
	shadow := c.routeEvents(w)
	if err := c.attachChanges(ctx, w, shadow); err != nil {
		return res, err
	}
	maxItems, maxBytes := c.chunkItems(), defaultCommitMaxBytes
	if c.p != nil {
		maxBytes = c.p.CommitMaxBytes
	}
	var chunk []step
	var invalid []ParkedRow
	size := 0
	touch := !w.history && backfillActive(c.state.backfill())
	// What a listing showed goes with the first chunk and counts in its items; what does not
	// fit there goes ahead, on its own, in chunks: it must be written no later than the rows
	// it covers.
	for !w.ClearListed && len(w.Listed) >= maxItems {
		if _, err := c.commitPoll(ctx, Commit{Listed: w.Listed[:maxItems], ListedLane: w.ListedLane}); err != nil {
			return res, err
		}
		w.Listed = w.Listed[maxItems:]
	}
	first := true
	flush := func(last bool) error {
		cm := Commit{LogRetention: w.LogRetention, Invalid: invalid,
			TombstoneRetention: c.tombstoneRetention()}
		// What a listing showed goes with the first chunk, before any row of it is stored (a
		// death between chunks leaves an identity listed and not stored, never stored and
		// not listed); the listing's clearing goes with the last, with its state.
		if first {
			cm.Listed, cm.ListedLane = w.Listed, w.ListedLane
		}
		if last {
			cm.State, cm.Count, cm.Unpark, cm.ClearTouched = w.State, w.Count, w.Unpark, w.ClearTouched
			cm.ListedLane, cm.ClearListed = w.ListedLane, w.ClearListed
		}
		var evIdx []int
		lastStep, lastPayload := map[string]int{}, map[string]int{}
		revived := map[string]bool{}
		for i, st := range chunk {
			lastStep[st.identity] = i
			if st.payload != keepNothing {
				lastPayload[st.identity] = i
			}
			revived[st.identity] = revived[st.identity] || st.revived
			if st.event < 0 || shadow {
				continue
			}
			ev := w.events[st.event]
			env, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("encode event %s: %w", ev.ID, err)
			}
			ok := c.orderingKey(ev)
			res.envelopes[st.event], res.keys[st.event] = env, ok
			cm.Events = append(cm.Events, OutboxEvent{ID: ev.ID, OrderingKey: ok, Envelope: env})
			evIdx = append(evIdx, st.event)
		}
		for i, st := range chunk {
			if j, ok := lastPayload[st.identity]; ok && j == i {
				switch st.payload {
				case keepItem:
					cm.Payloads = append(cm.Payloads, Payload{Identity: st.identity, Item: w.events[st.event].Item})
				case keepTooLarge:
					cm.Payloads = append(cm.Payloads, Payload{Identity: st.identity, Item: []byte{}})
				case dropPayload:
					cm.DropPayloads = append(cm.DropPayloads, st.identity)
				}
			}
			if lastStep[st.identity] != i {
				continue
			}
			if st.row == nil {
				cm.Deletes = append(cm.Deletes, st.identity)
				cm.Tombstones = append(cm.Tombstones, Tombstone{Identity: st.identity, Gen: st.tomb})
				continue
			}
			cm.Upserts = append(cm.Upserts, Upsert{Identity: st.identity, Row: st.row})
			if revived[st.identity] {
				cm.Revived = append(cm.Revived, st.identity)
			}
		}
		if touch {
			for _, u := range cm.Upserts {
				cm.Touched = append(cm.Touched, u.Identity)
			}
			cm.Touched = append(cm.Touched, cm.Deletes...)
		}
		c.tagWrites(&cm, last)
		if !last && len(cm.Upserts)+len(cm.Deletes)+len(cm.Invalid)+len(cm.Payloads)+len(cm.DropPayloads) == 0 {
			return nil
		}
		if last && cm.empty() {
			return nil
		}
		r, err := c.commitPoll(ctx, cm)
		if err != nil {
			return err
		}
		first = false
		res.paused = res.paused || r.Paused
		res.unreplicated = res.unreplicated || r.Unreplicated
		for i, ev := range evIdx {
			res.seqs[ev] = r.StreamIDs[i]
		}
		for _, i := range r.Diverted {
			res.diverted[evIdx[i]] = true
		}
		chunk, invalid, size = chunk[:0], nil, 0
		return nil
	}
	add := func(n int) error {
		listed := 0
		if first {
			listed = len(w.Listed)
		}
		if len(chunk)+len(invalid) > 0 && (len(chunk)+len(invalid)+listed+1 > maxItems || size+n > maxBytes) {
			if err := flush(false); err != nil {
				return err
			}
		}
		size += n
		return nil
	}
	for _, st := range w.steps {
		n := len(st.identity) + len(st.row) + 64
		if st.event >= 0 {
			ev := w.events[st.event]
			n += len(ev.Item) + len(ev.Changes) + len(ev.Previous) + 256
			if st.payload == keepItem {
				n += len(ev.Item)
			}
		}
		if err := add(n); err != nil {
			return res, err
		}
		chunk = append(chunk, st)
	}
	for _, iv := range w.Invalid {
		if err := add(len(iv.Row)); err != nil {
			return res, err
		}
		invalid = append(invalid, iv)
	}
	if err := flush(true); err != nil {
		return res, err
	}
	return res, nil
}

// payloadReadBytes bounds one read of kept payloads (LoadPayloads) at its largest.
const payloadReadBytes = 16 << 20

// attachChanges gives a poller with Changes.Patch its change sets: each updated event the
// patch from the identity's payload as last emitted to its item, each deleted event that
// payload as Previous; and each step what it keeps of the payload (written with its row, so a
// patch is never computed against a payload that was not committed). The payloads an
// identity's first step of the page needs are read in one round trip. A shadow poller's
// events reach no consumer: its payloads stay those of the last events that did.
func (c *cycle) attachChanges(ctx context.Context, w *pageWrites, shadow bool) error {
	if c.p == nil || len(w.events) == 0 || shadow {
		return nil
	}
	if !c.p.Changes.Patch {
		if c.state.get(statehash.Payloads) != "" {
			// Kept while patch was on: what changes now is no longer what was kept.
			for i := range w.steps {
				if w.steps[i].event >= 0 {
					w.steps[i].payload = dropPayload
				}
			}
		}
		return nil
	}

	limit := c.p.Changes.MaxBytes
	type kept struct {
		item          []byte
		known, tooBig bool
	}
	now := map[string]kept{}
	var need []string
	for _, st := range w.steps {
		if _, ok := now[st.identity]; ok || st.event < 0 {
			continue
		}
		now[st.identity] = kept{}
		if w.events[st.event].Type != watukuytype.Created {
			need = append(need, st.identity)
		}
	}
	// A read of payloads is bounded by bytes as well: 256 of the largest kept per read.
	batch := max(1, min(loadBatch, payloadReadBytes/limit))
	for from := 0; from < len(need); from += batch {
		to := min(from+batch, len(need))
		got, err := c.e.store.LoadPayloads(ctx, c.key, need[from:to])
		if err != nil {
			return err
		}
		for i, b := range got {
			now[need[from+i]] = kept{item: b, known: b != nil, tooBig: b != nil && len(b) == 0}
		}
	}
	// The patches are made after this pass, in parallel: each one's two items are known here
	// (an identity's second change of the page starts from its first one's item).
	type pending struct {
		ev       *watukuytype.Event
		identity string
		prev     []byte
	}
	var diffs []pending
	for i := range w.steps {
		st := &w.steps[i]
		if st.event < 0 {
			continue
		}
		ev := &w.events[st.event]
		prev := now[st.identity]
		if st.repeat {
			continue // the consumer keeps the earlier emission, and so does the payload
		}
		switch ev.Type {
		case watukuytype.Updated:
			switch {
			case len(ev.Item) > limit || prev.tooBig:
				ev.Changes, ev.ChangesOmitted = json.RawMessage("null"), watukuytype.ChangesTooLarge
			case !prev.known:
				ev.Changes, ev.ChangesOmitted = json.RawMessage("null"), watukuytype.ChangesUnknown
			default:
				diffs = append(diffs, pending{ev: ev, identity: st.identity, prev: prev.item})
			}
		case watukuytype.Deleted:
			if prev.known && !prev.tooBig {
				ev.Previous = prev.item
			}
			st.payload, now[st.identity] = dropPayload, kept{}
			continue
		}
		if len(ev.Item) > limit {
			st.payload, now[st.identity] = keepTooLarge, kept{known: true, tooBig: true}
		} else {
			st.payload, now[st.identity] = keepItem, kept{item: ev.Item, known: true}
		}
	}
	parallel(len(diffs), func(i int) {
		d := diffs[i]
		patch, err := changeset.Patch(d.prev, d.ev.Item)
		switch {
		case err != nil:
			// The event goes out without its patch: the item is the whole change.
			c.logger().Warn().Err(err).Str("identity", d.identity).Str("event", d.ev.ID).Msg("no patch for an updated event: the diff failed")
			d.ev.Changes, d.ev.ChangesOmitted = json.RawMessage("null"), watukuytype.ChangesFailed
		case len(patch) > limit:
			// A patch longer than any kept item would be a large envelope for little.
			d.ev.Changes, d.ev.ChangesOmitted = json.RawMessage("null"), watukuytype.ChangesTooLarge
		default:
			d.ev.Changes = patch
		}
	})
	return nil
}

// parallel runs f(0) … f(n-1) on up to GOMAXPROCS goroutines, each taking the next index; a
// few run on the caller's goroutine alone.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/16)
	if workers < 2 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// tagWrites adds the live lane's tag to a chunk. A chunk that changes rows clears it in the
// same write, whatever lane or operation commits it, so that a 304 to a committed tag always
// means "nothing beyond what the rows hold" (G3); a pending tag (setTag) goes with the last
// chunk of a commit that changes none. A tag is never written after a failed commit: it may
// have carried the answer the tag names.
func (c *cycle) tagWrites(cm *Commit, last bool) {
	v := ""
	switch {
	case len(cm.Upserts)+len(cm.Deletes) > 0:
		if c.state.get(statehash.LiveTag) == "" && !c.tagPending {
			return
		}
	case last && c.tagPending:
		v = c.state.get(statehash.LiveTag)
	default:
		return
	}
	st := make(map[string]string, len(cm.State)+1)
	maps.Copy(st, cm.State)
	st[statehash.LiveTag] = v
	cm.State, c.tagPending = st, false
	if c.state != nil {
		c.state[statehash.LiveTag] = v
	}
}

// orderingKey is an event's ordering key; operations without the poller's definition keep
// the default, the identity.
func (c *cycle) orderingKey(ev watukuytype.Event) string {
	if c.p == nil {
		return ev.Identity
	}
	return orderingKey(c.p, ev)
}

// chunkItems bounds the entries one script handles: a commit's changes, an ack's or a park's
// entries.
func (c *cycle) chunkItems() int {
	if c.p == nil {
		return defaultCommitMaxItems
	}
	return c.p.CommitMaxItems
}

// tombstoneRetention is how long this key's tombstones are kept.
func (c *cycle) tombstoneRetention() time.Duration {
	if c.p == nil {
		return defaultTombstoneRetention
	}
	return c.p.TombstoneRetention
}

// commitPoll writes one chunk under the cycle's lease.
func (c *cycle) commitPoll(ctx context.Context, cm Commit) (CommitResult, error) {
	sent := c.e.now()
	sctx, span := c.startSpan(ctx, SpanCommit)
	r, err := c.e.store.CommitPoll(sctx, c.lease, cm)
	if span.IsRecording() {
		span.SetAttributes(AttrLane.String(string(c.lane)), AttrEvents.Int(len(cm.Events)), AttrItems.Int(len(cm.Upserts)+len(cm.Deletes)))
	}
	endSpan(span, err)
	if err != nil {
		if c.keeper != nil {
			return r, c.keeper.check(err)
		}
		return r, err
	}
	if c.keeper != nil {
		c.keeper.touched(sent, r.Paused)
	}
	c.confirmed = true
	return r, nil
}

// empty reports whether cm writes nothing.
func (cm *Commit) empty() bool {
	return len(cm.State) == 0 && len(cm.Count) == 0 && len(cm.Upserts) == 0 && len(cm.Deletes) == 0 &&
		len(cm.Events) == 0 && len(cm.Invalid) == 0 && len(cm.Unpark) == 0 && len(cm.Touched) == 0 && !cm.ClearTouched &&
		len(cm.Listed) == 0 && !cm.ClearListed
}

// commitAndDeliver commits a page and delivers what it committed straight from memory. A pause
// seen by the commit leaves the events in the outbox.
func (c *cycle) commitAndDeliver(ctx context.Context, w *pageWrites) *cycleError {
	res, err := c.commit(ctx, w)
	if err != nil {
		return storeErr(err)
	}
	c.progressed = c.progressed || w.progress
	c.rep.Events += len(w.events)
	if res.unreplicated && len(w.events) > 0 {
		return unreplicated(c.key)
	}
	if res.paused || c.p.Shadow || len(w.events) == 0 || c.dlv.off {
		return nil // a blocked delivery: the events wait in the outbox
	}
	ds := make([]delivery, 0, len(w.events))
	for i := range w.events {
		w.events[i].Seq = res.seqs[i]
		if res.diverted[i] {
			continue
		}
		ds = append(ds, delivery{entry: Entry{StreamID: res.seqs[i], ID: w.events[i].ID, OrderingKey: res.keys[i],
			Envelope: res.envelopes[i], Seq: res.seqs[i]}, ev: &w.events[i]})
	}
	if len(ds) == 0 {
		return nil
	}
	return c.deliver(ctx, ds)
}

// unreplicated stops a cycle whose commit (or outbox read) the replicas did not confirm in
// time: its events wait in the outbox until they are replicated, so that a failover never
// loses a commit whose events reached the handler. The cycle ends with the schedule's backoff.
func unreplicated(key watukuytype.Key) *cycleError {
	return &cycleError{phase: "replication", code: watukuytype.CodeReplication, kind: schedule.ResultFailed,
		err: fmt.Errorf("the replicas did not confirm the outbox of %s in time: its events wait until they do (check the replicas' health)", key.Describe())}
}

// routeEvents prepares a page's events: in shadow mode they are only counted (and true is
// returned: nothing goes to the outbox), otherwise they are logged when the poller keeps a log.
func (c *cycle) routeEvents(w *pageWrites) (shadow bool) {
	if len(w.events) == 0 || c.p == nil {
		return false
	}
	if c.p.Shadow {
		w.Count = map[string]int{}
		for _, ev := range w.events {
			w.Count[statehash.ShadowPrefix+string(ev.Type)]++
		}
		return true
	}
	w.LogRetention = c.p.LogRetention
	return false
}
