package watukuy

// Reproductions of a third adversarial review (branch adversary2), of the fixes in 7a448c3.
// Each test is named for the guarantee it breaks and FAILS on the code it was written against;
// see the report for the mechanism of each.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// stateOf reads the "state" field of an item (the only content of the unversioned pollers
// below).
func stateOf(item json.RawMessage) string {
	var it struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(item, &it)
	return it.State
}

// stateFingerprint makes "state" the whole content of an item.
func stateFingerprint(item json.RawMessage) ([]byte, error) { return []byte(stateOf(item)), nil }

// dedupingConsumer applies events as a consumer that dedupes by id does (what G2's ids are
// for) and reports the ids it dropped as repeats.
func dedupingConsumer(evs []Event) (state map[string]string, repeats []string) {
	state = map[string]string{}
	seen := map[string]int{}
	for i, ev := range evs {
		if j, dup := seen[ev.ID]; dup {
			repeats = append(repeats, fmt.Sprintf("event %d (%s %s %q) has the id of event %d (%s %s %q)",
				i, ev.Type, ev.Identity, stateOf(ev.Item), j, evs[j].Type, evs[j].Identity, stateOf(evs[j].Item)))
			continue
		}
		seen[ev.ID] = i
		if ev.Type == Deleted {
			delete(state, ev.Identity)
			continue
		}
		state[ev.Identity] = stateOf(ev.Item)
	}
	return state, repeats
}

// ---------------------------------------------------------------------------------------
// G8: a cycle whose Begin REQUEST was late ends with cycle.now(), which runs ahead of the
// server: finish() takes the Retry-After window for over and End erases it.
// ---------------------------------------------------------------------------------------

// TestAdversary2G8WindowErasedByTheEndOfALateCycle: the gate before a request compares the
// window with serverNotLater(), but finish() decides whether the window is still in force with
// cycle.now() (server time at Begin + local time since Begin was SENT), which runs ahead of
// the server by however late Begin's request reached Redis. A cycle that ends without a
// request (its drain failed: POISON_HALT) inside the last d of a window deletes
// throttledUntil; the next cycle (the handler fixed, a trigger) sends inside the window.
// The control is the same cycle with Begin on time.
func TestAdversary2G8WindowErasedByTheEndOfALateCycle(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, late := range []bool{false, true} {
			e := newEnv(t, b)
			putN(e, 2)
			var mu sync.Mutex
			watch := &windowWatch{clock: e.clock}
			throttle := false
			name := fmt.Sprintf("late-%v", late)
			p := e.poller(func(p *Poller) {
				p.Name = name
				p.LogRetention = time.Hour // so that an operator's replay can refill the outbox
				p.Delivery.Poison = PoisonHalt
				p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
				feed := e.api.ChangeFeed(10)
				p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
					mu.Lock()
					defer mu.Unlock()
					watch.note("request")
					if throttle {
						throttle = false
						return Page{}, watch.throttle(req.Key, 10*time.Second)
					}
					return feed(ctx, req)
				}
			})
			d := &lateBeginStore{clock: e.clock, delay: 2400 * time.Millisecond}
			eng := e.engine(p, func(s core.Store) core.Store { d.Store = s; return d })
			ctx := t.Context()
			key := Key{Poller: name}
			if rep := eng.RunCycle(ctx, key); rep.Delivered != 2 {
				t.Fatalf("first cycle: %+v", rep)
			}
			// The API answers 429, Retry-After 10 s.
			mu.Lock()
			throttle = true
			mu.Unlock()
			e.clock.Advance(time.Second)
			makeDue(t, eng, name, "")
			eng.RunCycle(ctx, key)
			// An operator replays the logged events; the handler is down for now.
			if n, err := eng.Replay(ctx, name, "", time.Now().Add(-time.Hour), time.Time{}); err != nil || n != 2 {
				t.Fatalf("replay: %d, %v", n, err)
			}
			e.rec.setFail(func(Event) error { return fmt.Errorf("handler down") })
			e.clock.Advance(7 * time.Second) // 3 s left in the window
			if late {
				d.armed.Store(true) // Begin's request 2.4 s in transit
			} else {
				e.clock.Advance(2400 * time.Millisecond) // control: the same server time, Begin on time
			}
			rep := eng.RunCycle(ctx, key) // drain: POISON_HALT, no request
			ki, _ := eng.Inspect(ctx, name, "")
			t.Logf("late=%v: cycle with the failed drain: %v; throttled until %v", late, rep.Err, ki.ThrottledUntil)
			// The handler is back; the key is due again (a resume), 0.6 s before the window ends.
			e.rec.setFail(nil)
			makeDue(t, eng, name, "")
			eng.RunCycle(ctx, key)
			watch.check(t, fmt.Sprintf("Begin late: %v", late))
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: ETags that no longer describe what was committed.
// ---------------------------------------------------------------------------------------

// TestAdversary2G3FreshAnswerLeavesAnOlderETag: a request sent unconditionally (FetchRequest.
// Fresh: a listing with delete candidates, a rewind, an unsettled pass) does not record its
// answer's ETag, so the tag remembered stays that of an OLDER answer. Whatever the fresh
// answer committed on top of it, a collection that comes back to the older state (an item
// created, then deleted) answers the older tag with 304: the delete is never emitted while
// the collection stays as it is.
func TestAdversary2G3FreshAnswerLeavesAnOlderETag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(3, "i", nil)
		e.api.Put("x", nil)
		eng := e.engine(e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.Fetch = listCursor(srv, 10).Fetch
		}), nil)
		e.settle(eng) // tag of {i0..i2, x} remembered
		tick := func(what string) {
			e.clock.Advance(3 * time.Minute)
			rep := e.tick(eng)
			t.Logf("%s: %+v", what, rep)
		}
		e.api.Delete("x")
		tick("x gone: a delete candidate (tag of {i0..i2} remembered)")
		e.api.Put("y", nil)
		tick("y created, x's second miss: a fresh listing (its tag is not remembered)")
		e.api.Delete("y") // the collection is {i0..i2} again: the remembered tag matches
		e.settle(eng)
		checkFinal(t, e)
	})
}

// TestAdversary2G3ETagOfAnotherWorker: the remembered ETag is per process, the committed state
// is shared. Worker A lists the collection and remembers its tag; worker B runs the key's next
// cycle and commits a newer state (y created); the API deletes y, so the collection is back to
// what A saw; A's next cycle asks with its tag, gets 304 and takes it for idle: y's delete is
// never emitted while only A runs the key (B scaled down, or simply not picked).
func TestAdversary2G3ETagOfAnotherWorker(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(3, "i", nil)
		worker := func() *Engine {
			return e.engine(e.poller(func(p *Poller) {
				p.Strategy = SnapshotDiff
				p.Fetch = listCursor(srv, 10).Fetch // each process has its own
			}), nil)
		}
		a, bw := worker(), worker()
		e.settle(a)
		e.api.Put("y", nil)
		e.clock.Advance(3 * time.Minute)
		if rep := e.tick(bw); rep.Events != 1 {
			t.Fatalf("worker B: %+v", rep)
		}
		e.api.Delete("y")
		e.settle(a)
		checkFinal(t, e)
	})
}

// ---------------------------------------------------------------------------------------
// G2: reset-cursor --clear-snapshot and the change count.
// ---------------------------------------------------------------------------------------

// clearSnapshotPoller is an unversioned listing poller whose content is the state field.
func clearSnapshotPoller(e *env, mod ...func(*Poller)) Poller {
	return e.poller(append([]func(*Poller){func(p *Poller) {
		p.Version = nil
		p.Fingerprint = stateFingerprint
		p.Strategy = SnapshotDiff
		p.Fetch = e.api.Listing(10)
		p.ConfirmDeletes = 1
	}}, mod...)...)
}

// TestAdversary2G2ClearSnapshotRestartsTheChangeCount: clear-snapshot keeps an identity's
// life but drops its row, and with it the change count: the next observation is change 1
// again. o1 went A → B → C (changes 1, 2, 3); after the clear C is change 1, and C → B is
// "updated, B, change 2": the id of the earlier A → B. A consumer that dedupes by id drops it
// and keeps C; the API has B.
func TestAdversary2G2ClearSnapshotRestartsTheChangeCount(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(clearSnapshotPoller(e), nil)
		for _, s := range []string{"A", "B", "C"} {
			e.api.Put("o1", map[string]any{"state": s})
			e.settle(eng)
		}
		if err := eng.ResetCursor(t.Context(), "orders", "", "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng) // o1 emitted again as created (C)
		e.api.Put("o1", map[string]any{"state": "B"})
		e.settle(eng)
		got, repeats := dedupingConsumer(e.rec.events())
		for _, r := range repeats {
			t.Logf("repeat: %s", r)
		}
		if got["o1"] != "B" {
			t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q (%d ids repeated)", got["o1"], "B", len(repeats))
		}
	})
}

// TestAdversary2G2ClearSnapshotForgetsALifeOlderThanTheRetention: keepLives saves an
// identity's life as a tombstone whose score is the life itself (the time of the deletion
// that began it). commit_poll trims tombstones older than the retention in the same script,
// so a life that began longer ago than TombstoneRetention is dropped on the spot: o1 falls
// back to life 0, and its next delete repeats the id of its FIRST life's delete.
func TestAdversary2G2ClearSnapshotForgetsALifeOlderThanTheRetention(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(clearSnapshotPoller(e, func(p *Poller) { p.TombstoneRetention = time.Hour }), nil)
		e.api.Put("o1", map[string]any{"state": "closed"})
		e.settle(eng)
		e.api.Delete("o1")
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "closed"}) // a second life
		e.settle(eng)
		e.clock.Advance(2 * time.Hour) // the second life is older than the retention
		if err := eng.ResetCursor(t.Context(), "orders", "", "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		e.api.Delete("o1")
		e.settle(eng)
		got, repeats := dedupingConsumer(e.rec.events())
		for _, r := range repeats {
			t.Logf("repeat: %s", r)
		}
		if _, present := got["o1"]; present {
			t.Errorf("G2: a consumer that dedupes by id still holds o1, which the API deleted (%d ids repeated)", len(repeats))
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: what clear-snapshot and a parked retry commit.
// ---------------------------------------------------------------------------------------

// TestAdversary2G3DeleteRightAfterClearSnapshot: clear-snapshot drops every row; an item the
// API deletes before the lane has listed it again has no row, so no listing, tombstone or
// reconcile can ever emit its delete. The consumer keeps it for good.
func TestAdversary2G3DeleteRightAfterClearSnapshot(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.Fetch = e.api.Listing(10)
			p.ConfirmDeletes = 1
		}), nil)
		e.api.Put("a", nil)
		e.api.Put("x", nil)
		e.settle(eng)
		if err := eng.ResetCursor(t.Context(), "orders", "", "", true); err != nil {
			t.Fatal(err)
		}
		e.api.Delete("x") // before the next listing
		e.settle(eng)
		checkFinal(t, e)
	})
}

// TestAdversary2G3ParkedRetryOfAStaleInvalidItem: a parked invalid item is retried against
// the rows as they stand NOW. o1 v2 was parked invalid, then o1 v3 (valid) was committed and
// delivered; retrying the v2 row commits v2 as an update on top of v3: the row and the
// consumer go back to v2, and the cursor, already past v3, never brings v3 back. Fixed: the
// committed v3 supersedes the parked v2 (removed in v3's commit), so there is nothing stale
// left to retry.
func TestAdversary2G3ParkedRetryOfAStaleInvalidItem(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var strict atomic.Bool
		strict.Store(true)
		eng := e.engine(e.poller(func(p *Poller) {
			p.Validate = rejectBad(&strict)
		}), nil)
		ctx := t.Context()
		e.api.Put("o1", map[string]any{"n": 1})
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 2, "bad": true}) // v2: parked invalid
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 3}) // v3: valid, committed, delivered
		e.settle(eng)
		rows, err := eng.Parked().List(ctx, "orders", "", "invalid")
		if err != nil || len(rows) != 0 {
			t.Fatalf("parked: want v2 superseded by v3, got %v, %v", rows, err)
		}
		strict.Store(false) // the validation was fixed
		e.settle(eng)
		checkFinal(t, e)
	})
}

// ---------------------------------------------------------------------------------------
// G2: the change count in a versioned poller's ids, and a lane that passes history again.
// ---------------------------------------------------------------------------------------

// changeLog is an API that serves every change as an entry (a change-log / events API: the
// same identity once per change, oldest first); the cursor is the index of the next entry.
type changeLog struct {
	mu      sync.Mutex
	entries []json.RawMessage
}

func (l *changeLog) add(id string, version int, state string) {
	l.addRaw(fmt.Sprintf(`{"id":%q,"version":"%d","state":%q}`, id, version, state))
}

// addRaw appends an entry as it is.
func (l *changeLog) addRaw(raw string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, json.RawMessage(raw))
}

func (l *changeLog) fetch(ctx context.Context, req FetchRequest) (Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := 0
	if req.Cursor != "" {
		if _, err := fmt.Sscan(req.Cursor, &from); err != nil {
			return Page{}, err
		}
	}
	to := min(from+2, len(l.entries))
	return Page{Items: append([]json.RawMessage(nil), l.entries[from:to]...), Next: fmt.Sprint(to), HasMore: to < len(l.entries)}, nil
}

// ---------------------------------------------------------------------------------------
// G2: writes an AOF crash loses (appendfsync everysec: "at most a second of commits").
// ---------------------------------------------------------------------------------------

// snapshotRedis DUMPs every key; the returned func puts Redis back to exactly that (FLUSHALL,
// RESTORE), as a restart from an AOF whose last second was not on disk would.
func snapshotRedis(t *testing.T, b redistest.Backend) (restore func()) {
	t.Helper()
	ctx := context.Background()
	keys, err := b.Client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	dumps := map[string]string{}
	for _, k := range keys {
		d, err := b.Client.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		dumps[k] = d
	}
	return func() {
		t.Helper()
		if err := b.Client.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for k, d := range dumps {
			if err := b.Client.Restore(ctx, k, 0, d).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAdversary2G2WritesLostByAnAOFCrashComeBackWithNewIDs: the README's Redis advice said
// that with appendfsync everysec "what is lost is lost together with its cursor, so it is
// fetched and emitted again with the same ids". With the change count in the ids that does not
// hold: one cycle commits and delivers o1 v2 (change 1) and then o1 v3 (change 2); the crash
// loses both; the API serves its current state, o1 v3, which is now change 1: "updated o1 v3"
// comes out under a second id. Naming a change by its version instead (change 0 whenever the
// version moved forward) repeated ids and dropped changes when versions start over or change
// kind (adversary4), so this stays: the README says so (ids after lost writes), and the test
// holds what is promised instead: no id names two changes, and a consumer that dedupes by id
// ends where the API is.
func TestAdversary2G2WritesLostByAnAOFCrashComeBackWithNewIDs(t *testing.T) {
	b := redistest.Real(t)
	e := newEnv(t, b)
	eng := e.engine(e.poller(func(p *Poller) { p.Fetch = e.api.ChangeFeed(1) }), nil)
	e.api.Put("o1", map[string]any{"n": 1})
	e.settle(eng)
	restore := snapshotRedis(t, b) // what reached the disk
	e.api.Put("o1", map[string]any{"n": 2})
	e.api.Put("y", nil)
	var once sync.Once
	e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
		if req.Page == 1 {
			once.Do(func() { e.api.Put("o1", map[string]any{"n": 3}) }) // o1 changes while paged
		}
		return nil
	})
	e.clock.Advance(3 * time.Minute)
	rep := e.tick(eng) // o1 v2, y, o1 v3: committed and delivered within milliseconds
	e.api.OnFetch(nil)
	t.Logf("cycle before the crash: %+v", rep)
	restore() // the crash: the last second of writes is gone
	e.settle(eng)
	named := map[string]string{} // id → the change it names
	last := map[string]string{}  // what a consumer that dedupes by id holds
	for _, ev := range e.rec.events() {
		change := string(ev.Type) + " " + ev.Identity + "@v" + ev.Version
		if prev, seen := named[ev.ID]; seen {
			if prev != change {
				t.Errorf("G2: %s names %s and %s", ev.ID, prev, change)
			}
			continue
		}
		named[ev.ID] = change
		last[ev.Identity] = ev.Version
	}
	for id, v := range e.api.Final() {
		if last[id] != strconv.Itoa(v) {
			t.Errorf("G2: a consumer that dedupes by id holds %s v%s, the API v%d", id, last[id], v)
		}
	}
}
