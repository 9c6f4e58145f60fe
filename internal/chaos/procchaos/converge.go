//go:build unix

package procchaos

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/watukuytype"
)

// waitConverged waits until the last delivered version per identity equals the API's final
// state; it gives up after processQuiesceMax (less when ctx ends sooner), or when no new event
// was delivered for processQuiesceIdle.
func (r *processRun) waitConverged(ctx context.Context, truth map[watukuytype.Key]chaos.Truth) (bool, error) {
	want := chaos.ExpectedStates(truth)
	live := 0
	for _, ids := range want {
		live += len(ids)
	}
	start := time.Now()
	limit := processQuiesceMax
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl)-20*time.Second) // leave time to stop and check
	}
	lastCount, lastChange := -1, time.Now()
	t := time.NewTicker(100 * time.Millisecond) // polling real processes: there is no signal to wait on
	defer t.Stop()
	for {
		ds := r.rec.Deliveries()
		unique := map[string]bool{}
		for _, d := range ds {
			unique[d.Event.ID] = true
		}
		if deliveredState(ds, truth, want) {
			r.logf("converged after %s: %d deliveries, the delivered state equals the APIs' (%d live items)",
				time.Since(start).Round(10*time.Millisecond), len(ds), live)
			return true, nil
		}
		if len(unique) != lastCount { // redeliveries of known events are no progress
			lastCount, lastChange = len(unique), time.Now()
		}
		switch {
		case time.Since(start) > limit:
			r.logf("not converged after %s (%d deliveries, %d distinct events)", limit.Round(time.Second), len(ds), len(unique))
			return false, nil
		case time.Since(lastChange) > processQuiesceIdle:
			r.logf("not converged: no new event delivered for %s (%d deliveries, %d distinct events)", processQuiesceIdle, len(ds), len(unique))
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// deliveredState reports whether the last delivered version per identity of every key of
// truth equals want's.
func deliveredState(ds []chaos.Delivery, truth map[watukuytype.Key]chaos.Truth, want map[watukuytype.Key]map[string]string) bool {
	got := chaos.DeliveredState(ds, truth)
	for k := range truth {
		if !sameState(got[k], want[k]) {
			return false
		}
	}
	return true
}

// truth is the ground truth of the run's three keys, once the changes have stopped: the fp
// key's by content (its field n, what its fingerprint sees), the hot key's with its ordering
// keys.
func (r *processRun) truth(ctx context.Context) (map[watukuytype.Key]chaos.Truth, error) {
	fp, err := chaos.TruthByContent(ctx, r.apis.fp, chaos.FieldN)
	if err != nil {
		return nil, err
	}
	hot := chaos.TruthOf(r.apis.hot)
	hot.OrderingKey = hotOrderingKey
	return map[watukuytype.Key]chaos.Truth{processKey: chaos.TruthOf(r.apis.orders), hotKey: hot, fpKey: fp}, nil
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// diagnose logs why the key did not converge: its lease, outbox and last error, and the
// asynq task of its cycle (an archived task keeps its ID, and the scheduler's enqueue then
// conflicts with it).
func (r *processRun) diagnose(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	owner := ""
	if snap, err := r.db.store.Inspect(ctx, processKey); err == nil {
		owner = snap.LeaseOwner
		r.logf("diagnosis: lease owner %q epoch %d expires %s (server now %s); outbox %d; parked %d; lastError %s",
			snap.LeaseOwner, snap.LeaseEpoch, snap.LeaseExpires.Format(time.TimeOnly), snap.Now.Format(time.TimeOnly),
			snap.OutboxLen, snap.Parked, snap.State["lastError"])
	}
	r.mu.Lock()
	at, wasKilled := r.procs.killed[owner]
	r.mu.Unlock()
	if wasKilled {
		r.logf("diagnosis: the last lease holder %s was SIGKILLed at %.2fs, mid-cycle", owner, at.Sub(r.start).Seconds())
	}
	if score, err := r.db.direct.ZScore(ctx, r.db.store.DueKey(processKey.Poller), processKey.String()).Result(); err == nil {
		r.logf("diagnosis: due at %s", time.UnixMilli(int64(score)).Format(time.TimeOnly))
	}
	id := queue.TaskID(processPrefix, processKey)
	if ti, err := r.db.ins.GetTaskInfo(queue.DefaultQueue, id); err == nil {
		r.logf("diagnosis: asynq task %s is %s (last error %q); while it exists the scheduler's enqueue of the key conflicts",
			id, ti.State, ti.LastErr)
	} else {
		r.logf("diagnosis: asynq task %s: %v", id, err)
	}
}

// logDuplicates logs the most redelivered events: how often, over what span, in which lane.
func (r *processRun) logDuplicates() {
	type dup struct {
		n           int
		first, last time.Time
		ev          watukuytype.Event
	}
	byID := map[string]*dup{}
	var ids []string
	for _, d := range r.rec.Deliveries() {
		x := byID[d.Event.ID]
		if x == nil {
			x = &dup{first: d.At, ev: d.Event}
			byID[d.Event.ID] = x
			ids = append(ids, d.Event.ID)
		}
		x.n++
		x.last = d.At
	}
	sort.SliceStable(ids, func(i, j int) bool { return byID[ids[i]].n > byID[ids[j]].n })
	for _, id := range ids[:min(3, len(ids))] {
		x := byID[id]
		if x.n < 3 {
			break
		}
		r.logf("delivered %d times: %s (%s %s v%s, lane %s, seq %s) from %.2fs to %.2fs", x.n, id, x.ev.Type, x.ev.Identity,
			x.ev.Version, x.ev.Lane, x.ev.Seq, x.first.Sub(r.start).Seconds(), x.last.Sub(r.start).Seconds())
	}
}

// logMismatches logs, for a few identities whose last delivered version differs from the
// API's, every delivery of that identity and the API's changes to it.
func (r *processRun) logMismatches() {
	final := r.apis.orders.Final()
	byIdentity := map[string][]chaos.Delivery{}
	for _, d := range r.rec.Deliveries() {
		byIdentity[d.Event.Identity] = append(byIdentity[d.Event.Identity], d)
	}
	var ids []string
	for id := range final {
		ids = append(ids, id)
	}
	for id := range byIdentity {
		if _, ok := final[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	shown := 0
	for _, id := range ids {
		ds := byIdentity[id]
		last := ""
		if n := len(ds); n > 0 && ds[n-1].Event.Type != watukuytype.Deleted {
			last = ds[n-1].Event.Version
		}
		want := ""
		if v, ok := final[id]; ok {
			want = strconv.Itoa(v)
		}
		if last == want || shown >= 3 {
			continue
		}
		shown++
		r.logf("mismatch %s: API has %q, last delivered %q; its deliveries:", id, want, last)
		for _, d := range ds[max(0, len(ds)-8):] {
			r.logf("  %.3fs %s v%s %s seq %s lane %s", d.At.Sub(r.start).Seconds(), d.Event.Type, d.Event.Version, d.Event.ID, d.Event.Seq, d.Event.Lane)
		}
		var changes []string
		for _, c := range r.apis.orders.Changes() {
			if c.ID == id {
				what := "v" + strconv.Itoa(c.Version)
				if c.Deleted {
					what = "deleted@" + what
				}
				changes = append(changes, what+" "+c.At.Format(time.TimeOnly))
			}
		}
		r.logf("  API changes: %s", strings.Join(changes[max(0, len(changes)-6):], ", "))
	}
}
