package core_test

import (
	"context"
	"encoding/json"
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

// Adversarial tests of shared budgets: each shows a way the budget's promises break.

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

// An hourly quota (60/h, burst 1: one token a minute). A key whose first cycle yields holds
// the slot of its next token in its state (budgetSlot). Its next cycle sends with that token
// and is then frozen past its lease (GC pause, SIGSTOP) before it can clear budgetSlot;
// another worker takes the key over, reads the same budgetSlot, and the script honours it
// again (it is within burst×interval + 5 s of the slot): two requests on one token, and the
// budget's keys exceed its bound.
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

// A key holding a slot of budget A (budgetSlot in its state) is moved to budget B by a config
// reload. Its next cycle hands the A slot to B's bucket, which honours it without taking a
// token: B's own key has just spent B's only token, and the moved key sends beside it.
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
	if err := eng.Replace(moved, other); err != nil {
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

// A key sits out a short budget wait (≤ 1 s) holding its token; meanwhile another worker's
// key hears a 429 and pauses the whole budget for 30 s. The waiting key does not look at the
// bucket again: it sends inside the pause.
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

// Redis forgets the bucket (a failover to a replica that missed its last writes, a restart
// without AOF, a flush) while keys hold slots in their states, up to 10 minutes ahead. The
// new bucket is full and gives its tokens again, while every held slot is still honoured:
// for as long as the held slots reach, the budget's keys send at twice its rate. (Losing a
// bucket with no held slots costs at most a burst and the second of tokens sat out in cycles.)
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
	if err := eng.Replace(budgetPoller("orders", w.pages(1, nil), parts...), other); err != nil {
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

// The operator lowers a budget's rate (the API's quota dropped) with a config reload. Keys
// that held slots under the old rate keep them, and send at the old pace for as long as the
// old queue reaches (up to 10 minutes): the new budget is exceeded all that time.
func TestBudgetLoweredRateKeepsTheOldPace(t *testing.T) {
	w := newBudgetWorld(t)
	old := watukuytype.Budget{Name: "shop", Rate: 30, Per: time.Minute, Burst: 1}  // a token every 2 s
	lower := watukuytype.Budget{Name: "shop", Rate: 3, Per: time.Minute, Burst: 1} // every 20 s
	parts := letters(20)
	p := budgetPoller("orders", w.pages(1, nil), parts...)
	eng := w.engine([]watukuytype.Budget{old}, p)
	due := w.askAll(eng, "orders", parts)
	reloaded := w.clock.Now()
	if err := eng.SetBudgets([]watukuytype.Budget{lower}); err != nil {
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

// The operator raises a budget's rate a hundredfold. The bucket's tat, ten minutes ahead at
// the old pace, is not rescaled: a key asking after the reload still waits for the old queue
// to drain, about ten minutes, although the new budget could serve it at once.
func TestBudgetRaisedRateStillWaitsForTheOldQueue(t *testing.T) {
	w := newBudgetWorld(t)
	old := watukuytype.Budget{Name: "shop", Rate: 1, Per: time.Minute, Burst: 1}
	raised := watukuytype.Budget{Name: "shop", Rate: 100, Per: time.Minute, Burst: 1}
	parts := letters(11)
	p, fresh := budgetPoller("orders", w.pages(1, nil), parts...), budgetPoller("fresh", w.pages(1, nil))
	eng := w.engine([]watukuytype.Budget{old}, p, fresh)
	w.askAll(eng, "orders", parts) // the old queue: 10 held slots, a minute apart
	if err := eng.SetBudgets([]watukuytype.Budget{raised}); err != nil {
		t.Fatal(err)
	}
	rep := eng.RunCycle(context.Background(), watukuytype.Key{Poller: "fresh"})
	if rep.Pages == 0 && rep.Deferred > time.Minute {
		t.Fatalf("after raising the budget to 100/min a new key is deferred %v (the old queue), want at most a few seconds", rep.Deferred)
	}
}

// Tick's deadline (and a stopping worker) asks cycles to stop at their next step. The detail
// requests of a listing's missing identities each take a budget token and sit out up to a
// second for it, with no look at the yield in between: a listing that lost many items at
// once runs on past the deadline for one token interval per item, and the deletes are
// committed only at the end (a serverless Tick killed at its time limit loses them all).
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

// Fairness across a pause: a and then b ask a 1/min budget and hold the next two slots. A 429
// elsewhere pauses the budget over a's slot; a's cycle comes back inside the pause, is
// refused, and its held slot is dropped (its token spent). When the pause ends a queues
// anew, behind b, which asked after it: a's request goes two minutes after its slot.
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

// Lane priority within a key: another key has just spent the bucket (10/s, burst 40). A key
// with a backfill polls live (one page, after one interval), then its backfill is refused
// for the 2 s its reserve (half the burst) takes to come back. That wait becomes the pace of
// the whole key: its next live poll is pushed 2 s out, twenty token intervals, although the
// live lane itself could be served after one.
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
