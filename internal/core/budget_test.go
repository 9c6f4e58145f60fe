package core_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// budgetWorld is a world whose engines share budgets and sit out in-cycle waits on the fake
// clock; it records every request's time by that clock, and every budget decision.
type budgetWorld struct {
	*world
	mu        sync.Mutex
	sent      map[watukuytype.Key][]time.Time
	decisions []decision
}

type decision struct {
	lane  watukuytype.Lane
	wait  time.Duration
	taken bool
}

func newBudgetWorld(t *testing.T) *budgetWorld {
	return &budgetWorld{world: newWorld(t), sent: map[watukuytype.Key][]time.Time{}}
}

func (w *budgetWorld) engine(bs []watukuytype.Budget, ps ...watukuytype.Poller) *core.Engine {
	w.t.Helper()
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Clock: w.clock.Now, Rand: func() float64 { return 0.5 }, Budgets: bs,
		Wait: func(ctx context.Context, d time.Duration) error { w.clock.Advance(d); return ctx.Err() },
		Hooks: watukuytype.Hooks{OnBudget: func(_ watukuytype.Key, _ string, lane watukuytype.Lane, wait time.Duration, taken bool) {
			w.mu.Lock()
			w.decisions = append(w.decisions, decision{lane, wait, taken})
			w.mu.Unlock()
		}}})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, p := range ps {
		if err := eng.Register(p); err != nil {
			w.t.Fatal(err)
		}
	}
	if err := eng.Setup(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	return eng
}

// pages is a fetch of n empty pages per pass that records when each request was sent.
func (w *budgetWorld) pages(n int, fail func(req watukuytype.FetchRequest) error) watukuytype.FetchFunc {
	return func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		w.mu.Lock()
		w.sent[req.Key] = append(w.sent[req.Key], w.clock.Now())
		w.mu.Unlock()
		if fail != nil {
			if err := fail(req); err != nil {
				return watukuytype.Page{}, err
			}
		}
		return watukuytype.Page{HasMore: req.Page < n-1, Next: req.Cursor}, nil
	}
}

func (w *budgetWorld) requests(k watukuytype.Key) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.sent[k]...)
}

var shop = watukuytype.Budget{Name: "shop", Rate: 10, Per: time.Second, Burst: 2}

func budgetPoller(name string, fetch watukuytype.FetchFunc, parts ...string) watukuytype.Poller {
	return watukuytype.Poller{Name: name, Partitions: parts, Fetch: fetch, Budget: "shop", MaxPagesPerCycle: 100,
		Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Minute, NoJitter: true},
		Handler:  func(context.Context, watukuytype.Event) error { return nil }}
}

// The requests of every key of a budget keep to its rate and burst together: a burst at
// once, then one per interval, the live lane sitting out short waits in the cycle.
func TestBudgetPacesTheKeysOfABucket(t *testing.T) {
	w := newBudgetWorld(t)
	eng := w.engine([]watukuytype.Budget{shop}, budgetPoller("orders", w.pages(5, nil), "a", "b"))
	ctx := context.Background()
	a, b := watukuytype.Key{Poller: "orders", Partition: "a"}, watukuytype.Key{Poller: "orders", Partition: "b"}
	for _, k := range []watukuytype.Key{a, b} {
		if rep := eng.RunCycle(ctx, k); rep.Err != nil || rep.Pages != 5 || rep.Deferred != 0 {
			t.Fatalf("%s: %+v", k, rep)
		}
	}
	all := append(w.requests(a), w.requests(b)...)
	if e, from, to := budget.Excess(shop, all, 0); e > 0 {
		t.Fatalf("the budget's keys sent %v more requests than 10/s with a burst of 2 allow in [%v, %v]: %v", e, from, to, all)
	}
	// 10 requests: 2 at once, then 8 at 100ms apiece.
	if got := all[len(all)-1].Sub(all[0]); got != 800*time.Millisecond {
		t.Errorf("10 requests took %v of the fake clock, want 800ms", got)
	}
}

// A wait longer than a second yields the worker: the lane stops and the key is due when the
// budget can serve it. A cycle whose first request is refused sends nothing and changes
// nothing of the key's schedule state but its due time.
func TestBudgetYieldsALongWait(t *testing.T) {
	w := newBudgetWorld(t)
	slow := watukuytype.Budget{Name: "shop", Rate: 1, Per: time.Minute, Burst: 1}
	eng := w.engine([]watukuytype.Budget{slow}, budgetPoller("orders", w.pages(3, nil), "a", "b"))
	ctx := context.Background()
	a, b := watukuytype.Key{Poller: "orders", Partition: "a"}, watukuytype.Key{Poller: "orders", Partition: "b"}
	rep := eng.RunCycle(ctx, a)
	if rep.Err != nil || rep.Pages != 1 || !rep.Truncated || rep.Deferred < 59*time.Second || rep.Deferred > time.Minute {
		t.Fatalf("cycle of a: %+v; want one page, then truncated and deferred about a minute", rep)
	}
	before, err := eng.Inspect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	rep = eng.RunCycle(ctx, b)
	if rep.Err != nil || rep.Pages != 0 || rep.Truncated || rep.Deferred < 118*time.Second {
		t.Fatalf("cycle of b: %+v; want no request, deferred about two minutes (behind the token a holds)", rep)
	}
	if n := len(w.requests(b)); n != 0 {
		t.Fatalf("b sent %d requests", n)
	}
	after, err := eng.Inspect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if after.Interval != before.Interval || after.Failures != before.Failures || after.Circuit != before.Circuit {
		t.Errorf("a deferred cycle changed the schedule state: %+v → %+v", before, after)
	}
	if d := after.NextDueAt.Sub(w.clock.Now()); d < 118*time.Second || d > 2*time.Minute {
		t.Errorf("b is due in %v, want a second before its held token's slot, in two minutes", d)
	}
	// Each key kept its place: a's next cycle, a second before its slot, sends with the token it
	// held (and its next page waits behind b's); b's then with its own.
	w.clock.Advance(59 * time.Second)
	if rep := eng.RunCycle(ctx, a); rep.Pages != 1 || rep.Deferred < 59*time.Second {
		t.Fatalf("a's cycle at its held slot: %+v; want one page with the held token, then deferred behind b's", rep)
	}
	w.clock.Advance(60 * time.Second)
	if rep := eng.RunCycle(ctx, b); rep.Pages != 1 {
		t.Fatalf("b's cycle at its held slot: %+v; want one page with the held token", rep)
	}
	if got := w.requests(a)[1].Sub(w.requests(a)[0]); got != time.Minute {
		t.Errorf("a's second request came %v after its first, want a minute (the budget's interval)", got)
	}
}

// A 429 on one key pauses every key of its budget until the reset: the API limits the
// account.
func TestBudgetPausedByA429(t *testing.T) {
	w := newBudgetWorld(t)
	throttle := func(req watukuytype.FetchRequest) error {
		if req.Key.Partition == "a" {
			return &watukuytype.HTTPError{StatusCode: 429, RetryAfter: 30 * time.Second}
		}
		return nil
	}
	eng := w.engine([]watukuytype.Budget{shop}, budgetPoller("orders", w.pages(1, throttle), "a", "b"))
	ctx := context.Background()
	a, b := watukuytype.Key{Poller: "orders", Partition: "a"}, watukuytype.Key{Poller: "orders", Partition: "b"}
	if rep := eng.RunCycle(ctx, a); rep.Err == nil && rep.Deferred != 0 {
		t.Fatalf("cycle of a: %+v", rep)
	}
	rep := eng.RunCycle(ctx, b)
	if rep.Pages != 0 || rep.Deferred < 29*time.Second || rep.Deferred > 30*time.Second {
		t.Fatalf("cycle of b after a's 429: %+v; want no request and deferred until the reset (30s)", rep)
	}
	infos, err := eng.Budgets(ctx)
	if err != nil || len(infos) != 1 || infos[0].PausedUntil.IsZero() || infos[0].Tokens != 0 || len(infos[0].Keys) != 2 {
		t.Fatalf("Budgets: %+v, %v", infos, err)
	}
	w.clock.Advance(31 * time.Second)
	if rep := eng.RunCycle(ctx, b); rep.Err != nil || rep.Pages != 1 || rep.Deferred != 0 {
		t.Fatalf("cycle of b after the reset: %+v", rep)
	}
}

// A page whose rate-limit headers say nothing remains pauses the budget until their reset.
func TestBudgetPausedByAnExhaustedRateLimit(t *testing.T) {
	w := newBudgetWorld(t)
	fetch := func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		return watukuytype.Page{RateLimit: &watukuytype.RateLimit{Limit: 100, Remaining: 0, Reset: 20 * time.Second}}, nil
	}
	eng := w.engine([]watukuytype.Budget{shop}, budgetPoller("orders", fetch, "a", "b"))
	ctx := context.Background()
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: "a"}); rep.Err != nil || rep.Pages != 1 {
		t.Fatalf("cycle of a: %+v", rep)
	}
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); rep.Pages != 0 || rep.Deferred < 19*time.Second {
		t.Fatalf("cycle of b: %+v; want deferred until the reset", rep)
	}
}

// Lower lanes leave the higher ones their reserve: a backfill takes tokens only while the
// bucket keeps half its burst, so live polling of the same budget waits at most one interval.
func TestBudgetBackfillLeavesLiveItsReserve(t *testing.T) {
	w := newBudgetWorld(t)
	big := watukuytype.Budget{Name: "shop", Rate: 10, Per: time.Second, Burst: 8}
	// The live lane reads one page; the backfill's past has a thousand.
	backfill := budgetPoller("history", func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		if req.Lane == watukuytype.LaneLive {
			return w.pages(1, nil)(ctx, req)
		}
		n, _ := strconv.Atoi(req.Cursor)
		return watukuytype.Page{HasMore: true, Next: strconv.Itoa(n + 1)}, nil
	}, "a")
	backfill.CursorPosition = func(c string) (float64, bool) { n, err := strconv.Atoi(c); return float64(n), err == nil }
	live := budgetPoller("orders", w.pages(4, nil), "b")
	eng := w.engine([]watukuytype.Budget{big}, backfill, live)
	ctx := context.Background()
	a := watukuytype.Key{Poller: "history", Partition: "a"}
	if _, err := eng.Backfill(ctx, a, watukuytype.BackfillRequest{From: "0", To: ptr("1000")}); err != nil {
		t.Fatal(err)
	}
	eng.RunCycle(ctx, a) // live lane (1 page), then the backfill until the budget refuses
	bf := 0
	w.mu.Lock()
	for _, d := range w.decisions {
		if d.lane == watukuytype.LaneBackfill && d.taken {
			bf++
		}
	}
	w.mu.Unlock()
	if bf == 0 {
		t.Fatal("the backfill took no token")
	}
	infos, err := eng.Budgets(ctx)
	if err != nil || len(infos) != 1 {
		t.Fatalf("Budgets: %+v, %v", infos, err)
	}
	if infos[0].Tokens < 3 {
		t.Errorf("after the backfill the bucket holds %.2f tokens, want about the backfill's reserve (half the burst of 8)", infos[0].Tokens)
	}
	w.mu.Lock()
	w.decisions = nil
	w.mu.Unlock()
	// Four live pages at once: the reserve serves them without a wait.
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); rep.Err != nil || rep.Pages != 4 {
		t.Fatalf("live cycle: %+v", rep)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.decisions {
		if d.lane == watukuytype.LaneLive && (!d.taken || d.wait > 0) {
			t.Errorf("a live request waited %v (taken %v) behind a backfill; the backfill's reserve should serve it at once", d.wait, d.taken)
		}
	}
}

// A poller naming a budget the engine does not have is refused at registration.
func TestBudgetMustBeDefined(t *testing.T) {
	w := newBudgetWorld(t)
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Budgets: []watukuytype.Budget{shop}})
	if err != nil {
		t.Fatal(err)
	}
	p := budgetPoller("orders", w.pages(1, nil))
	p.Budget = "shopp"
	var ce *watukuytype.ConfigError
	if err := eng.Register(p); !errors.As(err, &ce) || ce.Field != "budget" {
		t.Fatalf("Register with an undefined budget: %v", err)
	}
	if _, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Budgets: []watukuytype.Budget{shop, shop}}); !errors.As(err, &ce) {
		t.Fatalf("a budget defined twice: %v", err)
	}
	if err := eng.Register(budgetPoller("orders", w.pages(1, nil))); err != nil {
		t.Fatal(err)
	}
	if err := eng.SetBudgets(nil); !errors.As(err, &ce) {
		t.Fatalf("SetBudgets dropping a budget a poller uses: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
