package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// These tests drive core.Engine directly, on redisstore over miniredis: the subject is the
// engine's logic, the scripts have tests of their own next to redisstore.

// world is one test's database, clock and handler.
type world struct {
	t     *testing.T
	clock *fakeclock.Clock
	store core.Store
	redis *redisstore.Store // store, for reads the engine has no call for
	rec   *recorder
}

func newWorld(t *testing.T) *world {
	t.Helper()
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	st, err := redisstore.New(redistest.Miniredis(t).Client, redisstore.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, clock: clk, store: st, redis: st, rec: &recorder{}}
}

// key is the single key of the test pollers (no partitions).
var key = watukuytype.Key{Poller: "orders"}

// poller is the default test poller on fetch: handler the world's recorder, one ordering key
// at a time (events reach the handler in commit order), retries without real waiting,
// schedule 1s..1m.
func (w *world) poller(fetch watukuytype.FetchFunc, mod ...func(*watukuytype.Poller)) watukuytype.Poller {
	p := watukuytype.Poller{Name: key.Poller, Fetch: fetch, Version: watukuytype.Field("v"), Handler: w.rec.handle,
		Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Minute},
		Delivery: watukuytype.Delivery{Concurrency: 1, Attempts: 2, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	for _, m := range mod {
		m(&p)
	}
	return p
}

// engine registers p on a new engine of the world; Rand is fixed at 0.5 so jitter and backoff
// are exact.
func (w *world) engine(p watukuytype.Poller) *core.Engine {
	w.t.Helper()
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Clock: w.clock.Now, Rand: func() float64 { return 0.5 }})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := eng.Register(p); err != nil {
		w.t.Fatal(err)
	}
	if err := eng.Setup(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	return eng
}

// run claims the key when it is due, as a scheduler does, and runs one cycle of it whether
// it was claimed or not (a not-due key: a stale task). Without the claim the key's due entry
// would stay "due now", which the store keeps as a trigger.
func (w *world) run(eng *core.Engine) watukuytype.CycleReport {
	w.t.Helper()
	if _, err := w.store.ClaimDue(context.Background(), 1, 0, nil); err != nil {
		w.t.Fatal(err)
	}
	return eng.RunCycle(context.Background(), key)
}

// due reads when the due set hands the key out (what a skip writes; the state's nextDue is
// only written by a cycle's end).
func (w *world) due() time.Time {
	w.t.Helper()
	k, at, err := w.redis.NextDue(context.Background(), []string{key.Poller})
	if err != nil || k != key {
		w.t.Fatalf("due entry of %s: %v %v", key, k, err)
	}
	return at
}

// inspect reads the key's state.
func (w *world) inspect(eng *core.Engine) watukuytype.KeyInfo {
	w.t.Helper()
	ki, err := eng.Inspect(context.Background(), key)
	if err != nil {
		w.t.Fatal(err)
	}
	return ki
}

// lastError decodes KeyInfo.LastError (zero when none).
func lastError(t *testing.T, ki watukuytype.KeyInfo) watukuytype.LastError {
	t.Helper()
	var le watukuytype.LastError
	if ki.LastError != nil {
		if err := json.Unmarshal(ki.LastError, &le); err != nil {
			t.Fatalf("lastError %s: %v", ki.LastError, err)
		}
	}
	return le
}

// recorder is a handler that records every event it accepted, in order; fail, when set,
// refuses the events it returns an error for.
type recorder struct {
	mu   sync.Mutex
	evs  []watukuytype.Event
	fail func(ev watukuytype.Event) error
}

func (r *recorder) handle(_ context.Context, ev watukuytype.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(ev); err != nil {
			return err
		}
	}
	r.evs = append(r.evs, ev)
	return nil
}

func (r *recorder) setFail(f func(ev watukuytype.Event) error) {
	r.mu.Lock()
	r.fail = f
	r.mu.Unlock()
}

// take returns the events accepted since the last take.
func (r *recorder) take() []watukuytype.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

// summary renders events as "type:identity" for comparisons.
func summary(evs []watukuytype.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Type) + ":" + ev.Identity
	}
	return out
}

// feed is a fake API: an ordered list of items {"id","v",...} paged by offset (the cursor is
// the offset of the next page). As a change feed (Custom) new entries are appended; as a
// listing (SnapshotDiff, reconcile) removed items leave it.
type feed struct {
	mu       sync.Mutex
	items    []json.RawMessage
	size     int
	err      error // every request fails with it while set
	requests int
}

func newFeed(size int) *feed { return &feed{size: size} }

// put appends {"id": id, "v": v} plus extra fields.
func (f *feed) put(id, v string, extra ...string) {
	m := map[string]string{"id": id, "v": v}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	raw, _ := json.Marshal(m)
	f.mu.Lock()
	f.items = append(f.items, raw)
	f.mu.Unlock()
}

// prepend puts {"id": id, "v": v} first.
func (f *feed) prepend(id, v string) {
	raw, _ := json.Marshal(map[string]string{"id": id, "v": v})
	f.mu.Lock()
	f.items = append([]json.RawMessage{raw}, f.items...)
	f.mu.Unlock()
}

// putN appends items i01..iNN at version 1.
func (f *feed) putN(n int) {
	for i := 1; i <= n; i++ {
		f.put(fmt.Sprintf("i%02d", i), "1")
	}
}

// remove drops every entry of identity id.
func (f *feed) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = slices.DeleteFunc(f.items, func(raw json.RawMessage) bool {
		var m map[string]string
		return json.Unmarshal(raw, &m) == nil && m["id"] == id
	})
}

func (f *feed) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *feed) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// fetch is the feed's watukuytype.FetchFunc.
func (f *feed) fetch(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.err != nil {
		return watukuytype.Page{}, f.err
	}
	off := 0
	if req.Cursor != "" {
		var err error
		if off, err = strconv.Atoi(req.Cursor); err != nil {
			return watukuytype.Page{}, err
		}
	}
	off = min(off, len(f.items))
	end := min(off+f.size, len(f.items))
	return watukuytype.Page{Items: slices.Clone(f.items[off:end]), Next: strconv.Itoa(end), HasMore: end < len(f.items)}, nil
}
