package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
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
	if err := eng.Replace(nil, budgetPoller("orders", w.pages(1, nil))); !errors.As(err, &ce) {
		t.Fatalf("Replace dropping a budget a poller uses: %v", err)
	}
}

// instance is another engine on the budget world's store and clock, as a second worker.
func (w *budgetWorld) instance(id string, bs []watukuytype.Budget, ps ...watukuytype.Poller) *core.Engine {
	w.t.Helper()
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: id, Clock: w.clock.Now, Rand: func() float64 { return 0.5 }, Budgets: bs,
		Wait: func(ctx context.Context, d time.Duration) error { w.clock.Advance(d); return ctx.Err() }})
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

// allRequests is every request the world saw, of every key.
func (w *budgetWorld) allRequests() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var all []time.Time
	for _, ts := range w.sent {
		all = append(all, ts...)
	}
	return all
}

// A held slot (budgetSlot in a key's state) is one token: a worker that sent with it and froze
// past its lease, and another worker that took the key over with the same budgetSlot, do not
// both send on it (an hourly quota of burst 1 keeps its bound).
func TestBudgetHeldSlotUsedTwiceAfterLeaseLoss(t *testing.T) {
	w := newBudgetWorld(t)
	hourly := watukuytype.Budget{Name: "shop", Rate: 60, Per: time.Hour, Burst: 1}
	ctx := context.Background()
	a := watukuytype.Key{Poller: "orders", Partition: "a"}
	var e2 *core.Engine
	var once sync.Once
	record := w.pages(2, nil)
	fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		page, err := record(ctx, req)
		if len(w.requests(a)) == 2 {
			// The second request (the held token's) is sent; its worker freezes past the
			// lease before it ends its cycle, and another worker takes the key over.
			once.Do(func() {
				w.clock.Advance(31 * time.Second)
				rep := e2.RunCycle(ctx, a)
				t.Logf("the other worker's cycle: pages %d, deferred %v, err %v", rep.Pages, rep.Deferred, rep.Err)
			})
		}
		return page, err
	}
	p := budgetPoller("orders", fetch, "a")
	e1 := w.instance("w1", []watukuytype.Budget{hourly}, p)
	e2 = w.instance("w2", []watukuytype.Budget{hourly}, p)
	rep := e1.RunCycle(ctx, a)
	if rep.Pages != 1 || rep.Deferred < 58*time.Second {
		t.Fatalf("first cycle: %+v; want one page, then the next token held a minute ahead", rep)
	}
	w.clock.Advance(rep.Deferred) // due a second before the held slot
	e1.RunCycle(ctx, a)
	sent := w.requests(a)
	t.Logf("requests at %v", offsets(sent))
	if e, from, to := budget.Excess(hourly, sent, 0); e > 0 {
		t.Fatalf("%d requests of a 60/h budget of burst 1 (two tokens taken): %.2f more than its bound in [%v, %v]",
			len(sent), e, from.Sub(sent[0]), to.Sub(sent[0]))
	}
}

// offsets renders times as offsets from the first.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(ts[0])
	}
	return out
}

// A key holding a slot of budget A that a config reload moves to budget B takes a token of B:
// B's bucket does not honour A's slot, and B's two keys keep B's bound.
func TestBudgetHeldSlotHonouredByAnotherBudget(t *testing.T) {
	w := newBudgetWorld(t)
	per := func(name string) watukuytype.Budget {
		return watukuytype.Budget{Name: name, Rate: 60, Per: time.Hour, Burst: 1}
	}
	bs := []watukuytype.Budget{per("A"), per("B")}
	ctx := context.Background()
	moved, other := budgetPoller("moved", w.pages(2, nil)), budgetPoller("other", w.pages(1, nil))
	moved.Budget, other.Budget = "A", "B"
	eng := w.engine(bs, moved, other)
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "moved"}); rep.Pages != 1 || rep.Deferred < 58*time.Second {
		t.Fatalf("moved's first cycle: %+v; want one page, then A's next token held a minute ahead", rep)
	}
	w.clock.Advance(59 * time.Second)
	// The reload: moved now draws from B. B's key spends B's token a second before.
	moved.Budget = "B"
	if err := eng.Replace(bs, moved, other); err != nil {
		t.Fatal(err)
	}
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "other"}); rep.Pages != 1 {
		t.Fatalf("other's cycle: %+v", rep)
	}
	rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "moved"})
	t.Logf("moved's cycle on B: %+v", rep)
	onB := append(w.requests(watukuytype.Key{Poller: "other"}), w.requests(watukuytype.Key{Poller: "moved"})[1:]...)
	if e, from, to := budget.Excess(per("B"), onB, 0); e > 0 {
		t.Fatalf("budget B (60/h, burst 1) saw requests at %v: %.2f more than its bound in [%v, %v]", offsets(onB), e, from.Sub(onB[0]), to.Sub(onB[0]))
	}
}

// A key sitting out a short budget wait (≤ 1 s) with its token looks at the bucket again before
// it sends: a pause that another worker's 429 set meanwhile holds its request back.
func TestBudgetPauseIgnoredByAKeySittingOutItsWait(t *testing.T) {
	w := newBudgetWorld(t)
	ctx := context.Background()
	two := watukuytype.Budget{Name: "shop", Rate: 2, Per: time.Second, Burst: 1} // a token every 500 ms
	var pausedUntil time.Time
	var once sync.Once
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "w1", Clock: w.clock.Now, Budgets: []watukuytype.Budget{two},
		Wait: func(ctx context.Context, d time.Duration) error {
			// Half way through the wait, another worker's key is answered 429 Retry-After 30s.
			once.Do(func() {
				w.clock.Advance(d / 2)
				d -= d / 2
				until, err := w.store.PauseBudget(ctx, "shop", 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				pausedUntil = until
			})
			w.clock.Advance(d)
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(budgetPoller("orders", w.pages(2, nil))); err != nil {
		t.Fatal(err)
	}
	eng.RunCycle(ctx, watukuytype.Key{Poller: "orders"})
	sent := w.requests(watukuytype.Key{Poller: "orders"})
	if pausedUntil.IsZero() {
		t.Fatalf("the key never sat out a wait; requests at %v", offsets(sent))
	}
	for _, at := range sent {
		if at.Before(pausedUntil) && at.After(pausedUntil.Add(-30*time.Second)) {
			t.Fatalf("a request at %v, inside the budget's pause [%v, %v] that another key's 429 set",
				at.Sub(sent[0]), pausedUntil.Add(-30*time.Second).Sub(sent[0]), pausedUntil.Sub(sent[0]))
		}
	}
}

// newRawBudgetWorld is newBudgetWorld that also returns the Redis client, to lose writes.
func newRawBudgetWorld(t *testing.T) (*budgetWorld, redis.UniversalClient) {
	t.Helper()
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	b := redistest.Miniredis(t)
	st, err := redisstore.New(b.Client, redisstore.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &budgetWorld{world: &world{t: t, clock: clk, store: st, redis: st, rec: &recorder{}}, sent: map[watukuytype.Key][]time.Time{}}, b.Client
}

// Redis forgetting a bucket (a failover that lost writes, a restart without AOF, a flush) while
// keys hold slots up to minutes ahead does not double the rate: the held slots and the new
// bucket's tokens together exceed the budget by at most one token.
func TestBudgetHeldSlotsOutliveTheirBucket(t *testing.T) {
	w, rdb := newRawBudgetWorld(t)
	ctx := context.Background()
	perMin := watukuytype.Budget{Name: "shop", Rate: 30, Per: time.Minute, Burst: 1} // a token every 2 s
	parts := letters(20)
	eng := w.engine([]watukuytype.Budget{perMin}, budgetPoller("orders", w.pages(1, nil), parts...))
	// Every key asks at once: the first sends, the other 19 hold slots 2 to 38 s ahead.
	due := w.askAll(eng, "orders", parts)
	if len(due) < 10 {
		t.Fatalf("only %d keys hold slots", len(due))
	}
	// The bucket is lost.
	bk, err := rdb.Keys(ctx, "*budget*").Result()
	if err != nil || len(bk) == 0 {
		t.Fatalf("bucket keys %v, %v", bk, err)
	}
	if err := rdb.Del(ctx, bk...).Err(); err != nil {
		t.Fatal(err)
	}
	// For the next 40 s: each holding key comes back when due, and a key of another poller on
	// the same budget asks whenever it is due.
	other := budgetPoller("other", w.pages(1, nil))
	if err := eng.Replace([]watukuytype.Budget{perMin}, budgetPoller("orders", w.pages(1, nil), parts...), other); err != nil {
		t.Fatal(err)
	}
	ok := watukuytype.Key{Poller: "other"}
	start := w.clock.Now()
	for w.clock.Now().Sub(start) < 40*time.Second {
		for k, at := range due {
			if !w.clock.Now().Before(at) {
				delete(due, k)
				eng.RunCycle(ctx, k)
			}
		}
		eng.RunCycle(ctx, ok)
		w.clock.Advance(100 * time.Millisecond)
	}
	all := w.allRequests()
	if e, from, to := budget.Excess(perMin, all, 0); e > 1 {
		t.Fatalf("%d requests of a 30/min budget of burst 1: %.1f more than its bound in a window of %v", len(all), e, to.Sub(from))
	}
}

// askAll runs one cycle of every partition at the same instant (each key's first request
// needs a token; with waits over a second nobody sits out) and returns when each of those
// that yielded is due again.
func (w *budgetWorld) askAll(eng *core.Engine, poller string, parts []string) map[watukuytype.Key]time.Time {
	w.t.Helper()
	due := map[watukuytype.Key]time.Time{}
	for _, p := range parts {
		k := watukuytype.Key{Poller: poller, Partition: p}
		if rep := eng.RunCycle(context.Background(), k); rep.Deferred > 0 {
			due[k] = w.clock.Now().Add(rep.Deferred)
		}
	}
	return due
}

// runDue runs, for d of the fake clock in steps of 100 ms, every key of due when it is due,
// until one of its cycles sends a request (a deferred cycle makes it due again).
func (w *budgetWorld) runDue(eng *core.Engine, due map[watukuytype.Key]time.Time, d time.Duration) {
	start := w.clock.Now()
	for w.clock.Now().Sub(start) < d {
		for k, at := range due {
			if !w.clock.Now().Before(at) {
				delete(due, k)
				if rep := eng.RunCycle(context.Background(), k); rep.Pages == 0 && rep.Deferred > 0 {
					due[k] = w.clock.Now().Add(rep.Deferred)
				}
			}
		}
		w.clock.Advance(100 * time.Millisecond)
	}
}

func letters(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a' + i))
	}
	return out
}

// A config reload that lowers a budget's rate holds for the keys that took slots under the old
// rate too: after the reload the requests keep to the new budget.
func TestBudgetLoweredRateKeepsTheOldPace(t *testing.T) {
	w := newBudgetWorld(t)
	old := watukuytype.Budget{Name: "shop", Rate: 30, Per: time.Minute, Burst: 1}  // a token every 2 s
	lower := watukuytype.Budget{Name: "shop", Rate: 3, Per: time.Minute, Burst: 1} // every 20 s
	parts := letters(20)
	p := budgetPoller("orders", w.pages(1, nil), parts...)
	eng := w.engine([]watukuytype.Budget{old}, p)
	due := w.askAll(eng, "orders", parts)
	reloaded := w.clock.Now()
	if err := eng.Replace([]watukuytype.Budget{lower}, p); err != nil {
		t.Fatal(err)
	}
	w.runDue(eng, due, 40*time.Second)
	var after []time.Time
	for _, at := range w.allRequests() {
		if at.After(reloaded) {
			after = append(after, at)
		}
	}
	if e, from, to := budget.Excess(lower, after, 0); e > 0 {
		t.Fatalf("after the reload to 3/min, %d requests in %v: %.1f more than the new budget allows in %v", len(after), w.clock.Now().Sub(reloaded), e, to.Sub(from))
	}
}

// A budget raised a hundredfold serves a new key within seconds: the bucket's queue at the old
// pace (ten held slots, a minute apart) is not a wait under the new rate.
func TestBudgetRaisedRateStillWaitsForTheOldQueue(t *testing.T) {
	w := newBudgetWorld(t)
	old := watukuytype.Budget{Name: "shop", Rate: 1, Per: time.Minute, Burst: 1}
	raised := watukuytype.Budget{Name: "shop", Rate: 100, Per: time.Minute, Burst: 1}
	parts := letters(11)
	p, fresh := budgetPoller("orders", w.pages(1, nil), parts...), budgetPoller("fresh", w.pages(1, nil))
	eng := w.engine([]watukuytype.Budget{old}, p, fresh)
	w.askAll(eng, "orders", parts) // the old queue: 10 held slots, a minute apart
	if err := eng.Replace([]watukuytype.Budget{raised}, p, fresh); err != nil {
		t.Fatal(err)
	}
	rep := eng.RunCycle(context.Background(), watukuytype.Key{Poller: "fresh"})
	if rep.Pages == 0 && rep.Deferred > time.Minute {
		t.Fatalf("after raising the budget to 100/min a new key is deferred %v (the old queue), want at most a few seconds", rep.Deferred)
	}
}

// The Detail requests of a listing's missing identities each take a budget token; a cycle asked
// to yield (Tick's deadline, a stopping worker) sends none after the budget wait it was in.
func TestBudgetDetailWaitsIgnoreTheYield(t *testing.T) {
	w := newBudgetWorld(t)
	ctx := context.Background()
	f := newFeed(100)
	f.putN(10)
	var mu sync.Mutex
	armed, yielded, after := false, false, 0
	detail := func(context.Context, watukuytype.Key, string) (json.RawMessage, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if yielded {
			after++
		}
		return nil, false, nil
	}
	two := watukuytype.Budget{Name: "shop", Rate: 2, Per: time.Second, Burst: 2}
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "w1", Clock: w.clock.Now, Budgets: []watukuytype.Budget{two},
		Wait: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			first := armed && !yielded
			mu.Unlock()
			if first {
				// The budget wait outlasts Tick's deadline, which is real time.
				<-time.After(300 * time.Millisecond)
				mu.Lock()
				yielded = true
				mu.Unlock()
			}
			w.clock.Advance(d)
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	p := w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Strategy, p.Detail, p.Budget = watukuytype.SnapshotDiff, detail, "shop"
	})
	if err := eng.Register(p); err != nil {
		t.Fatal(err)
	}
	if rep := w.run(eng); rep.Events != 10 || rep.Err != nil {
		t.Fatalf("first listing: %+v", rep)
	}
	for i := 1; i <= 10; i++ {
		f.remove(fmt.Sprintf("i%02d", i))
	}
	w.clock.Advance(2 * time.Minute)
	mu.Lock()
	armed = true
	mu.Unlock()
	rep, err := eng.Tick(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !yielded {
		t.Fatalf("no budget wait in the deletes' detail requests: %+v", rep)
	}
	if after > 0 {
		t.Fatalf("after Tick's deadline the cycle sent %d more detail requests, each after a budget wait (tick %+v)", after, rep)
	}
}

// Fairness across a pause: a and then b hold the next two slots of a 1/min budget; a pause over
// a's slot does not send a to the back of the queue: a still sends before b.
func TestBudgetPauseDropsTheHeldSlot(t *testing.T) {
	w := newBudgetWorld(t)
	ctx := context.Background()
	perMin := watukuytype.Budget{Name: "shop", Rate: 1, Per: time.Minute, Burst: 1}
	eng := w.engine([]watukuytype.Budget{perMin}, budgetPoller("orders", w.pages(1, nil), "x", "a", "b"))
	due := w.askAll(eng, "orders", []string{"x", "a", "b"}) // x sends, a holds +60 s, b +120 s
	a, b := watukuytype.Key{Poller: "orders", Partition: "a"}, watukuytype.Key{Poller: "orders", Partition: "b"}
	if len(due) != 2 {
		t.Fatalf("due %v; want a and b holding slots", due)
	}
	w.clock.Advance(30 * time.Second)
	if _, err := w.store.PauseBudget(ctx, "shop", 40*time.Second); err != nil { // another key's 429
		t.Fatal(err)
	}
	w.runDue(eng, due, 4*time.Minute)
	ra, rb := w.requests(a), w.requests(b)
	if len(ra) == 0 || len(rb) == 0 {
		t.Fatalf("a sent %v, b sent %v", ra, rb)
	}
	if ra[0].After(rb[0]) {
		t.Fatalf("a asked first (slot at +60 s) but sent %v after b; a at +%v, b at +%v",
			ra[0].Sub(rb[0]), ra[0].Sub(w.requests(watukuytype.Key{Poller: "orders", Partition: "x"})[0]), rb[0].Sub(w.requests(watukuytype.Key{Poller: "orders", Partition: "x"})[0]))
	}
}

// Lane priority within a key: its backfill refused for the 2 s its reserve takes to come back
// does not pace the key's live lane, whose next poll is due within its interval (1.5 s).
func TestBudgetBackfillWaitDelaysItsOwnLiveLane(t *testing.T) {
	w := newBudgetWorld(t)
	ctx := context.Background()
	big := watukuytype.Budget{Name: "shop", Rate: 10, Per: time.Second, Burst: 40}
	history := budgetPoller("history", func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		if req.Lane == watukuytype.LaneLive {
			return w.pages(1, nil)(ctx, req)
		}
		n, _ := strconv.Atoi(req.Cursor)
		return watukuytype.Page{HasMore: true, Next: strconv.Itoa(n + 1)}, nil
	}, "a")
	history.CursorPosition = func(c string) (float64, bool) { n, err := strconv.Atoi(c); return float64(n), err == nil }
	eng := w.engine([]watukuytype.Budget{big}, history, budgetPoller("orders", w.pages(40, nil), "b"))
	a := watukuytype.Key{Poller: "history", Partition: "a"}
	if _, err := eng.Backfill(ctx, a, watukuytype.BackfillRequest{From: "0", To: ptr("1000")}); err != nil {
		t.Fatal(err)
	}
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); rep.Pages != 40 {
		t.Fatalf("orders: %+v", rep)
	}
	rep := eng.RunCycle(ctx, a)
	ki, err := eng.Inspect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// Its schedule's interval after an idle cycle is 1.5 s; the backfill's 2.1 s must not
	// push the live poll past it.
	if d := ki.NextDueAt.Sub(w.clock.Now()); d > 1500*time.Millisecond {
		t.Fatalf("after its backfill was refused (cycle %+v) the key's next live poll is due in %v, past its interval (1.5s); its live lane waits one interval (100ms) for a token", rep, d)
	}
}

func ptr[T any](v T) *T { return &v }

// The circuit's probe (the cycle that runs while the circuit is open) takes its request's
// token from the budget, as every request does.
func TestBudgetTakenByTheCircuitProbe(t *testing.T) {
	w := newBudgetWorld(t)
	down := true
	fail := func(watukuytype.FetchRequest) error {
		if down {
			return errors.New("connection refused")
		}
		return nil
	}
	p := budgetPoller("orders", w.pages(1, fail))
	p.Failures, p.ProbeEvery = 1, 10*time.Second
	eng := w.engine([]watukuytype.Budget{shop}, p)
	ctx := context.Background()
	k := watukuytype.Key{Poller: "orders"}
	if rep := eng.RunCycle(ctx, k); rep.Err == nil {
		t.Fatalf("the failing cycle: %+v", rep)
	}
	if ki, err := eng.Inspect(ctx, k); err != nil || ki.Circuit != watukuytype.CircuitOpen {
		t.Fatalf("after the failure: circuit %s, %v", ki.Circuit, err)
	}
	w.clock.Advance(10 * time.Second)
	down = false
	w.mu.Lock()
	w.decisions = nil
	w.mu.Unlock()
	if rep := eng.RunCycle(ctx, k); rep.Err != nil || rep.Pages != 1 {
		t.Fatalf("the probe: %+v", rep)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.decisions) != 1 || !w.decisions[0].taken {
		t.Fatalf("the probe's budget decisions: %+v, want its one request's token taken", w.decisions)
	}
}

// Engine.Probe's requests (the first page and the one after it) take their tokens from the
// poller's budget, as the workers' do, and leave the live lane its reserve as a backfill does
// (the second waits for a token to come back); the package's Probe, which has no Redis, takes
// none.
func TestProbeTakesItsTokensFromTheBudget(t *testing.T) {
	w := newBudgetWorld(t)
	p := budgetPoller("orders", w.pages(2, nil))
	eng := w.engine([]watukuytype.Budget{shop}, p)
	ctx := context.Background()
	tokens := func() float64 {
		infos, err := eng.Budgets(ctx)
		if err != nil || len(infos) != 1 {
			t.Fatalf("Budgets: %+v, %v", infos, err)
		}
		return infos[0].Tokens
	}
	if _, err := core.Probe(ctx, p, ""); err != nil {
		t.Fatal(err)
	}
	if n := tokens(); n != float64(shop.Burst) {
		t.Fatalf("after the package's Probe: %v tokens, want %d (it takes none)", n, shop.Burst)
	}
	start := w.clock.Now()
	if _, err := eng.Probe(ctx, p, ""); err != nil {
		t.Fatal(err)
	}
	waited := w.clock.Now().Sub(start)
	if n := tokens(); n > float64(shop.Burst)/2+0.01 || len(w.requests(watukuytype.Key{Poller: "orders"})) != 4 || waited < budget.Interval(shop) {
		t.Fatalf("after Engine.Probe: %v tokens, waited %v; want half the burst left (the live lane's reserve) after a wait of %v", n, waited, budget.Interval(shop))
	}
}
