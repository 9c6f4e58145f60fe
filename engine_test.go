package watukuy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

func TestEndToEndChangeFeed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		for i := 0; i < 25; i++ {
			e.api.Put(fmt.Sprintf("o%02d", i), map[string]any{"total": i})
		}
		eng := e.engine(e.poller(), nil)
		rep := e.tick(eng)
		if rep.Ran != 1 || rep.Events != 25 || rep.Delivered != 25 {
			t.Fatalf("first tick: %+v", rep)
		}
		e.api.Put("o03", map[string]any{"total": 99})
		e.settle(eng)
		evs := e.rec.events()
		if len(evs) != 26 || evs[25].Type != watukuytype.Updated || evs[25].Identity != "o03" || evs[25].Version != "2" {
			t.Fatalf("got %d events, last %+v", len(evs), evs[len(evs)-1])
		}
		ki, err := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if err != nil {
			t.Fatal(err)
		}
		if ki.Items != 25 || ki.OutboxPending != 0 || ki.Cursor == "" || ki.Status != "idle" {
			t.Fatalf("inspect: %+v", ki)
		}
	})
}

// An idle cycle (no change, empty outbox) costs at most 3 Redis round trips besides the
// fetch: begin, the row lookup of the page, and end with the due time in one pipeline; a
// shared budget adds one per request (its token), and nothing to pollers without one.
func TestIdleCycleRoundTrips(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name     string
			strategy watukuytype.Strategy
			pages    int
			max      int64
		}{
			{"change feed, empty page", watukuytype.Custom, 1, 2},
			{"snapshot listing, unchanged", watukuytype.SnapshotDiff, 1, 3},
			// Begin, three row reads, end, and a lease confirmation before each page after the
			// first: nothing fenced happened since the previous request, so an instance frozen
			// in between must not go on paging. Fewer means a page went out unconfirmed.
			{"snapshot listing, three unchanged pages", watukuytype.SnapshotDiff, 3, 7},
			{"change feed with a shared budget, empty page", watukuytype.Custom, 1, 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				putN(e, 8)
				p := e.poller(func(p *watukuytype.Poller) {
					p.Name = "rt" + fmt.Sprint(tc.strategy)
					p.Strategy = tc.strategy
					if tc.strategy == watukuytype.SnapshotDiff {
						p.Fetch = e.api.Listing(8/tc.pages + 1)
					}
				})
				eng := e.engine(p, nil)
				if strings.Contains(tc.name, "budget") {
					p.Budget = "api"
					if err := eng.Replace([]watukuytype.Budget{{Name: "api", Rate: 100}}, p); err != nil {
						t.Fatal(err)
					}
				}
				e.settle(eng)
				var counter redistest.Counter
				counter.Attach(b.Client)
				e.clock.Advance(3 * time.Minute)
				counter.Reset()
				rep := eng.core.RunCycle(t.Context(), watukuytype.Key{Poller: p.Name})
				n := counter.Count()
				if rep.Outcome != watukuytype.Ran || rep.Events != 0 || rep.Pages != tc.pages || rep.Err != nil {
					t.Fatalf("not an idle cycle of %d pages: %+v", tc.pages, rep)
				}
				if n > tc.max || (tc.pages > 1 || p.Budget != "") && n != tc.max {
					t.Fatalf("idle cycle took %d round trips, want %d", n, tc.max)
				}
				t.Logf("idle cycle: %d round trips", n)
			})
		}
	})
}

// An idle cycle of a change feed runs 10 commands on one server: its two scripts and, inside
// them, begin's four (the state, one EXISTS for the outbox, released and invalid keys, the
// grant, the item count) and end's four (the fence with the trigger generation, the lease's
// release, the schedule with the write id, the due entry's read; a claimed key's due entry is
// written too, one more). Each command a script runs costs Redis up to a few microseconds:
// more is a regression of the idle cycle's cost.
func TestIdleCycleCommands(t *testing.T) {
	b := redistest.Real(t)
	e := newEnv(t, b)
	putN(e, 8)
	eng := e.engine(e.poller(), nil)
	e.settle(eng)
	e.clock.Advance(3 * time.Minute)
	before := commandCalls(t, b)
	rep := eng.core.RunCycle(t.Context(), watukuytype.Key{Poller: e.poller().Name})
	n := commandCalls(t, b) - before - 1 // the first INFO is counted by the second
	if rep.Outcome != watukuytype.Ran || rep.Events != 0 || rep.Err != nil {
		t.Fatalf("not an idle cycle: %+v", rep)
	}
	if n > 10 {
		t.Fatalf("an idle cycle ran %d commands, want at most 10", n)
	}
	t.Logf("idle cycle: %d commands", n)
}

func TestRegisterConfigErrors(t *testing.T) {
	b := redistest.Miniredis(t)
	e := newEnv(t, b)
	ok := e.poller()
	tests := []struct {
		name  string
		mod   func(p *watukuytype.Poller)
		field string
	}{
		{"malformed name", func(p *watukuytype.Poller) { p.Name = "bad name|x" }, "name"},
		{"empty name", func(p *watukuytype.Poller) { p.Name = "" }, "name"},
		{"bad partition", func(p *watukuytype.Poller) { p.Partitions = []string{"t 1"} }, "partitions"},
		{"duplicate partition", func(p *watukuytype.Poller) { p.Partitions = []string{"a", "a"} }, "partitions"},
		{"min > max", func(p *watukuytype.Poller) { p.Schedule = watukuytype.Schedule{Min: time.Hour, Max: time.Minute} }, "schedule"},
		{"missing handler", func(p *watukuytype.Poller) { p.Handler = nil }, "handler"},
		{"missing fetch", func(p *watukuytype.Poller) { p.Fetch = nil }, "fetch"},
		{"bad jitter", func(p *watukuytype.Poller) { p.Schedule.Jitter = 1.5 }, "schedule.jitter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng, err := New(Options{Redis: b.Client})
			if err != nil {
				t.Fatal(err)
			}
			p := ok
			tc.mod(&p)
			err = eng.Register(p)
			var ce *watukuytype.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || ce.Poller != p.Name {
				t.Fatalf("Register: %v, want a ConfigError on field %q", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name the field", err)
			}
		})
	}
	eng, _ := New(Options{Redis: b.Client})
	if err := eng.Register(ok); err != nil {
		t.Fatal(err)
	}
	var ce *watukuytype.ConfigError
	if err := eng.Register(ok); !errors.As(err, &ce) || ce.Field != "name" {
		t.Fatalf("duplicate poller: %v", err)
	}
	var nf *watukuytype.NotFoundError
	if err := eng.Trigger(t.Context(), watukuytype.Key{Poller: "nope", Partition: ""}); !errors.As(err, &nf) || nf.PartitionMissing || !strings.Contains(err.Error(), `known: "orders"`) {
		t.Fatalf("unknown poller: %v", err)
	}
	if err := eng.Trigger(t.Context(), watukuytype.Key{Poller: "orders", Partition: "t9"}); !errors.As(err, &nf) || !nf.PartitionMissing {
		t.Fatalf("unknown partition: %v", err)
	}
}

// Items without identity, failing Validate, or not JSON at all are parked as invalid with the
// raw item and the issue, once; the cycle goes on and the cursor moves.
func TestInvalidItemsAreParked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		page := []json.RawMessage{
			json.RawMessage(`{"id":"ok1","total":1}`),
			json.RawMessage(`{"total":2}`),
			json.RawMessage(`{"id":"neg","total":-5}`),
			json.RawMessage(`{"id":"broken","total":`),
		}
		fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			mu.Lock()
			defer mu.Unlock()
			return watukuytype.Page{Items: page, Next: "c1"}, nil
		}
		validate := func(item json.RawMessage) error {
			if strings.Contains(string(item), "-5") {
				return errors.New("total must not be negative")
			}
			return nil
		}
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = fetch; p.Version = nil; p.Validate = validate }), nil)
		e.tick(eng)
		e.clock.Advance(3 * time.Minute)
		e.tick(eng) // the same invalid items again: not parked twice
		if n := len(e.rec.events()); n != 1 {
			t.Fatalf("delivered %d events, want 1", n)
		}
		rows, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "invalid")
		if err != nil || len(rows) != 3 {
			t.Fatalf("invalid rows: %d %v", len(rows), err)
		}
		issues := ""
		for _, r := range rows {
			issues += r.Error + "\n"
			if len(r.Item) == 0 {
				t.Errorf("row %s lacks the raw item", r.ID)
			}
		}
		for _, want := range []string{"no identity", "total must not be negative", "fingerprint: jcs"} {
			if !strings.Contains(issues, want) {
				t.Errorf("no parked row says %q:\n%s", want, issues)
			}
		}
		// Fix the data and retry the validation failure: it is committed as a normal item.
		eng2 := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = fetch; p.Version = nil }), nil)
		var negID string
		for _, r := range rows {
			if r.Identity == "neg" {
				negID = r.ID
			}
		}
		if n, err := eng2.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, negID); err != nil || n != 1 {
			t.Fatalf("retry invalid: %d %v", n, err)
		}
		e.settle(eng2)
		if evs := e.rec.events(); len(evs) != 2 || evs[1].Identity != "neg" {
			t.Fatalf("after retry: %+v", evs)
		}
	})
}

// A panicking handler is a failed attempt, never a crash; after the attempts the event is
// parked and the worker goes on.
func TestHandlerPanicIsAFailure(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		var calls atomic.Int32
		e.rec.setFail(func(ev watukuytype.Event) error {
			if ev.Identity == "o01" {
				calls.Add(1)
				panic("nil map write")
			}
			return nil
		})
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Delivery.Attempts, p.Delivery.RetryHorizon = 3, -1 }), nil)
		e.tick(eng)
		if calls.Load() != 3 || len(e.rec.events()) != 2 {
			t.Fatalf("calls %d, delivered %d", calls.Load(), len(e.rec.events()))
		}
		rows, _ := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
		if len(rows) != 1 || !strings.Contains(rows[0].Error, "handler panic: nil map write") || len(rows[0].Errors) != 3 {
			t.Fatalf("parked: %+v", rows)
		}
	})
}

// With poison: halt the event stays in the outbox, the circuit opens, and nothing is fetched
// until the probe delivers it.
func TestPoisonHaltOpensCircuit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 2)
		e.rec.setFail(func(ev watukuytype.Event) error { return errors.New("sink down") })
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Delivery.Poison = watukuytype.PoisonHalt
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 2, -1
			p.Delivery.Concurrency = 1
		}), nil)
		e.tick(eng)
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Circuit != "open" || ki.OutboxPending != 2 || ki.Parked != 0 || !strings.Contains(string(ki.LastError), "POISON_HALT") {
			t.Fatalf("after halt: %+v", ki)
		}
		fetches := e.api.Fetches()
		e.clock.Advance(10 * time.Second) // within probeEvery (max = 1m): not due
		if rep := e.tick(eng); rep.Ran != 0 || e.api.Fetches() != fetches {
			t.Fatalf("ran while the circuit is open: %+v", rep)
		}
		e.rec.setFail(nil)
		if err := eng.Trigger(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil { // forces the probe
			t.Fatal(err)
		}
		e.tick(eng)
		ki, _ = eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Circuit != "closed" || ki.OutboxPending != 0 || len(e.rec.events()) != 2 {
			t.Fatalf("after the probe: %+v, delivered %d", ki, len(e.rec.events()))
		}
	})
}

// maxPagesPerCycle cuts a cycle short; the key is due again at once and the next cycle
// continues from the committed cursor.
func TestTruncatedCycleIsDueAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 35)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.MaxPagesPerCycle = 2 }), nil)
		rep := e.tick(eng) // Tick loops while keys are due: truncated cycles run back to back
		if rep.Ran != 2 || rep.Events != 35 {
			t.Fatalf("tick: %+v", rep)
		}
		if got := len(e.rec.events()); got != 35 {
			t.Fatalf("delivered %d", got)
		}
	})
}

// Pause stops requests and deliveries; resume brings the key back at once.
func TestPauseResume(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		eng := e.engine(e.poller(), nil)
		if err := eng.Pause(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(5 * time.Minute)
		if rep := e.tick(eng); rep.SkippedPaused != 1 || e.api.Fetches() != 0 {
			t.Fatalf("paused key ran: %+v, fetches %d", rep, e.api.Fetches())
		}
		if ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); ki.Status != "paused" {
			t.Fatalf("status %q", ki.Status)
		}
		if err := eng.Resume(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		if rep := e.tick(eng); rep.Ran != 1 || len(e.rec.events()) != 3 {
			t.Fatalf("after resume: %+v", rep)
		}
	})
}

// A stopped engine says so (Stopped) and runs nothing more: a cycle and every operation
// that acts return ErrEngineStopped, and nothing is written; a read still answers.
func TestStoppedEngineRefusesCyclesAndOperations(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		eng := e.engine(e.poller(), nil)
		key := watukuytype.Key{Poller: "orders", Partition: ""}
		if eng.Stopped() {
			t.Fatal("a new engine says it is stopped")
		}
		if err := eng.Stop(true, time.Second); err != nil {
			t.Fatal(err)
		}
		if !eng.Stopped() {
			t.Fatal("Stopped is false after Stop")
		}
		if rep := eng.RunCycle(t.Context(), key); !errors.Is(rep.Err, watukuytype.ErrEngineStopped) || e.api.Fetches() != 0 {
			t.Fatalf("a cycle of a stopped engine: %+v, fetches %d", rep, e.api.Fetches())
		}
		ops := map[string]func() error{
			"pause":    func() error { return eng.Pause(t.Context(), key) },
			"resume":   func() error { return eng.Resume(t.Context(), key) },
			"trigger":  func() error { return eng.Trigger(t.Context(), key) },
			"backfill": func() error { _, err := eng.Backfill(t.Context(), key, watukuytype.BackfillRequest{}); return err },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, watukuytype.ErrEngineStopped) {
				t.Errorf("%s on a stopped engine: %v, want ErrEngineStopped", name, err)
			}
		}
		if paused := b.Client.HGet(t.Context(), eng.store.Key(key, "state"), "paused").Val(); paused != "" {
			t.Errorf("a refused pause wrote paused=%q", paused)
		}
		if ki, err := eng.Inspect(t.Context(), key); err != nil || ki.Poller != "orders" {
			t.Errorf("a read of a stopped engine: %+v, %v", ki, err)
		}
	})
}

// RunCycles, a worker's task of n idle keys, costs n+1 round trips of the engine: each key's
// Begin goes out with the previous key's End. Every key still runs its own cycle under its
// own lease, and each ends with its lease released and its next due time written.
func TestRunCyclesSendsEachBeginWithThePreviousEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		parts := []string{"a", "b", "c", "d", "e"}
		p := e.poller(func(p *watukuytype.Poller) {
			p.Partitions = parts
			p.Fetch = func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				return watukuytype.Page{Next: req.Cursor}, nil
			}
		})
		eng := e.engine(p, nil)
		keys := make([]watukuytype.Key, len(parts))
		for i, part := range parts {
			keys[i] = watukuytype.Key{Poller: p.Name, Partition: part}
		}
		for _, r := range eng.RunCycles(t.Context(), keys) { // first cycles: the keys get their epochs
			if r.Outcome != watukuytype.Ran || r.Err != nil {
				t.Fatalf("first cycles: %+v", r)
			}
		}
		var counter redistest.Counter
		counter.Attach(b.Client)
		e.clock.Advance(3 * time.Minute)
		counter.Reset()
		reps := eng.RunCycles(t.Context(), keys)
		if n := counter.Count(); n != int64(len(keys)+1) {
			t.Fatalf("%d idle cycles took %d round trips, want %d", len(keys), n, len(keys)+1)
		}
		for i, r := range reps {
			if r.Key != keys[i] || r.Outcome != watukuytype.Ran || r.Err != nil {
				t.Fatalf("cycle %d: %+v", i, r)
			}
			ki, err := eng.Inspect(t.Context(), keys[i])
			if err != nil {
				t.Fatal(err)
			}
			if ki.LeaseOwner != "" || ki.NextDueAt == nil || !ki.NextDueAt.After(e.clock.Now()) {
				t.Fatalf("%s after its cycle: lease owner %q, next due %v (now %v)", keys[i].Describe(), ki.LeaseOwner, ki.NextDueAt, e.clock.Now())
			}
		}
	})
}

// A task cut short after a cycle that sent the next key's Begin (its worker's context ends, or
// its engine stops) runs no more cycles and hands that key back: its lease is released and it
// is due at once, not when the lease lapses.
func TestRunCyclesHandsBackTheNextKeyWhenCutShort(t *testing.T) {
	for _, how := range []string{"context ends", "engine stops"} {
		t.Run(how, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				p := e.poller(func(p *watukuytype.Poller) {
					p.Partitions = []string{"a", "b"}
					p.Fetch = func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
						return watukuytype.Page{Next: req.Cursor}, nil
					}
				})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var eng *Engine
				var ran []watukuytype.Key
				armed := false
				eng, err := newEngine(Options{Redis: b.Client, InstanceID: "worker", Hooks: watukuytype.Hooks{OnCycle: func(r watukuytype.CycleReport, _ time.Duration) {
					if r.Outcome == watukuytype.Ran {
						ran = append(ran, r.Key)
					}
					if !armed {
						return
					}
					armed = false // the worker shuts down after the first cycle of its task
					if how == "context ends" {
						cancel()
					} else if err := eng.Stop(false, time.Second); err != nil {
						t.Error(err)
					}
				}}}, seams{clock: e.clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				if err := eng.Register(p); err != nil {
					t.Fatal(err)
				}
				a, bk := watukuytype.Key{Poller: p.Name, Partition: "a"}, watukuytype.Key{Poller: p.Name, Partition: "b"}
				eng.RunCycles(ctx, []watukuytype.Key{a, bk}) // both keys begun once
				e.clock.Advance(3 * time.Minute)
				ran, armed = nil, true
				eng.RunCycles(ctx, []watukuytype.Key{a, bk})
				if len(ran) != 1 || ran[0] != a {
					t.Fatalf("cycles run: %v, want only %s", ran, a.Describe())
				}
				ki, err := e.engine(p, nil).Inspect(t.Context(), bk)
				if err != nil {
					t.Fatal(err)
				}
				if ki.LeaseOwner != "" || ki.NextDueAt == nil || ki.NextDueAt.After(e.clock.Now()) {
					t.Fatalf("%s not handed back: lease owner %q, next due %v (now %v)", bk.Describe(), ki.LeaseOwner, ki.NextDueAt, e.clock.Now())
				}
			})
		})
	}
}

// endObserver runs after each End that carried a Next (the prefetched Begin answered).
type endObserver struct {
	core.Store
	after func(req core.EndRequest)
}

func (h *endObserver) End(ctx context.Context, l core.Lease, req core.EndRequest) error {
	err := h.Store.End(ctx, l, req)
	if req.Next != nil && h.after != nil {
		h.after(req)
	}
	return err
}

// cycleFetchLog records which instance fetched which partition.
type cycleFetchLog struct {
	mu  sync.Mutex
	log []string
}

func (f *cycleFetchLog) add(s string) { f.mu.Lock(); f.log = append(f.log, s); f.mu.Unlock() }
func (f *cycleFetchLog) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

// G8 (and G5) with a Begin sent along with an End: instance A's End of key a brings back the
// lease of key b; A then freezes past b's lease TTL; B takes b and gets a 429 with a
// Retry-After. When A resumes it sends no request for b: its lease is stale.
func TestG8FrozenAfterAPrefetchedBeginSendsNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var fl cycleFetchLog
		mk := func(inst string, status429 bool) watukuytype.Poller {
			return e.poller(func(p *watukuytype.Poller) {
				p.Partitions = []string{"a", "b"}
				p.Fetch = func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
					fl.add(fmt.Sprintf("%s %s at %s", inst, req.Key.Partition, e.clock.Now().Format("15:04:05")))
					if status429 {
						return watukuytype.Page{}, &watukuytype.HTTPError{Key: req.Key, StatusCode: 429, RetryAfter: 10 * time.Minute}
					}
					return watukuytype.Page{Next: req.Cursor}, nil
				}
			})
		}
		armed := false
		var bb *Engine
		ka, kb := watukuytype.Key{Poller: "orders", Partition: "a"}, watukuytype.Key{Poller: "orders", Partition: "b"}
		a := e.engine(mk("A", false), func(s core.Store) core.Store {
			return &endObserver{Store: s, after: func(req core.EndRequest) {
				if !armed || req.Next.Key != kb {
					return
				}
				armed = false
				if req.Next.Result.Status != core.BeginOK {
					t.Errorf("prefetched begin of b: %+v %v", req.Next.Result.Status, req.Next.Err)
				}
				e.clock.Advance(31 * time.Second) // A frozen past b's lease
				rep := bb.RunCycle(context.Background(), kb)
				t.Logf("B's cycle of b: outcome %v err %v", rep.Outcome, rep.Err)
			}}
		})
		bb = e.engine(mk("B", true), nil)
		for _, r := range a.RunCycles(t.Context(), []watukuytype.Key{ka, kb}) {
			if r.Err != nil {
				t.Fatalf("first cycles: %+v", r)
			}
		}
		e.clock.Advance(3 * time.Minute)
		armed = true
		reps := a.RunCycles(t.Context(), []watukuytype.Key{ka, kb})
		if len(reps) != 2 || !watukuytype.IsLeaseLost(reps[1].Err) {
			t.Fatalf("A's reports: %+v, want b's lease lost", reps)
		}
		log := fl.all()
		t.Logf("fetches: %v", log)
		if last := log[len(log)-1]; last[0] != 'B' {
			t.Fatalf("after B's 429 on b, A sent %q (fetches %v)", last, log)
		}
	})
}
