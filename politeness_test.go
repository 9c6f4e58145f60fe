package watukuy

// G8: no request inside a Retry-After window or before the API's rate-limit pace allows it,
// whatever the timing of Begin, of a cycle's end, of a yield or of a frozen instance.

import (
	"context"
	"encoding/json"
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

// lateBeginStore delays Begin's request: the engine took its send time, then the command
// sits in transit (a pool wait, a dial, a retry after a dropped connection) before the
// script runs. The test clock (Redis' and the engine's) moves on meanwhile.
type lateBeginStore struct {
	core.Store
	clock interface{ Advance(time.Duration) }
	delay time.Duration
	armed atomic.Bool
}

func (d *lateBeginStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, op core.BeginMode) (core.BeginResult, error) {
	if d.armed.CompareAndSwap(true, false) {
		d.clock.Advance(d.delay)
	}
	return d.Store.Begin(ctx, key, owner, ttl, op)
}

// A Begin whose request spent 2.4 s in transit (a pool wait, a dial, a retry) does not put the
// cycle's clock ahead of the server's: nothing is sent inside the Retry-After window a 429 gave
// (checked first with Begin on time).
func TestG8LateBeginRequestStaysOutOfTheWindow(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		var mu sync.Mutex
		var window time.Time
		var inWindow []string
		throttle := true
		p := e.poller(func(p *watukuytype.Poller) {
			feed := e.api.ChangeFeed(10)
			p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				mu.Lock()
				defer mu.Unlock()
				now := e.clock.Now()
				if now.Before(window) {
					inWindow = append(inWindow, fmt.Sprintf("request at %s, window until %s",
						now.Format("15:04:05.000"), window.Format("15:04:05.000")))
				}
				if throttle {
					throttle = false
					window = now.Add(5 * time.Second)
					return watukuytype.Page{}, &watukuytype.HTTPError{Key: req.Key, StatusCode: 429, RetryAfter: 5 * time.Second}
				}
				return feed(ctx, req)
			}
		})
		d := &lateBeginStore{clock: e.clock, delay: 2400 * time.Millisecond}
		eng := e.engine(p, func(s core.Store) core.Store { d.Store = s; return d })
		ctx := t.Context()
		key := watukuytype.Key{Poller: "orders"}
		if rep := eng.RunCycle(ctx, key); rep.Pages != 1 {
			t.Fatalf("first cycle: %+v", rep)
		}
		e.clock.Advance(time.Second)
		// Control: due inside the window, Begin on time: the gate holds.
		makeDue(t, eng, "orders", "")
		if rep := eng.RunCycle(ctx, key); rep.Pages != 0 {
			t.Fatalf("control cycle sent %d requests inside the window: %+v", rep.Pages, rep)
		}
		// Due again, Begin's request 2.4 s in transit (lease 30 s: still valid).
		makeDue(t, eng, "orders", "")
		d.armed.Store(true)
		eng.RunCycle(ctx, key)
		mu.Lock()
		defer mu.Unlock()
		if len(inWindow) > 0 {
			t.Fatalf("G8: requests inside the Retry-After window: %v", inWindow)
		}
	})
}

// A cycle that ends without a request (its drain halted: POISON_HALT) in the last seconds of a
// Retry-After window, its Begin late in transit, keeps the window: the next cycle sends nothing
// inside it (the control has Begin on time).
func TestG8WindowOutlivesTheEndOfALateCycle(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, late := range []bool{false, true} {
			e := newEnv(t, b)
			putN(e, 2)
			var mu sync.Mutex
			watch := &windowWatch{clock: e.clock}
			throttle := false
			name := fmt.Sprintf("late-%v", late)
			p := e.poller(func(p *watukuytype.Poller) {
				p.Name = name
				p.LogRetention = time.Hour // so that an operator's replay can refill the outbox
				p.Delivery.Poison = watukuytype.PoisonHalt
				p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
				feed := e.api.ChangeFeed(10)
				p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
					mu.Lock()
					defer mu.Unlock()
					watch.note("request")
					if throttle {
						throttle = false
						return watukuytype.Page{}, watch.throttle(req.Key, 10*time.Second)
					}
					return feed(ctx, req)
				}
			})
			d := &lateBeginStore{clock: e.clock, delay: 2400 * time.Millisecond}
			eng := e.engine(p, func(s core.Store) core.Store { d.Store = s; return d })
			ctx := t.Context()
			key := watukuytype.Key{Poller: name}
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
			if n, err := eng.Replay(ctx, watukuytype.Key{Poller: name, Partition: ""}, time.Now().Add(-time.Hour), time.Time{}); err != nil || n != 2 {
				t.Fatalf("replay: %d, %v", n, err)
			}
			e.rec.setFail(func(watukuytype.Event) error { return fmt.Errorf("handler down") })
			e.clock.Advance(7 * time.Second) // 3 s left in the window
			if late {
				d.armed.Store(true) // Begin's request 2.4 s in transit
			} else {
				e.clock.Advance(2400 * time.Millisecond) // control: the same server time, Begin on time
			}
			rep := eng.RunCycle(ctx, key) // drain: POISON_HALT, no request
			ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: name, Partition: ""})
			t.Logf("late=%v: cycle with the failed drain: %v; throttled until %v", late, rep.Err, ki.ThrottledUntil)
			// The handler is back; the key is due again (a resume), 0.6 s before the window ends.
			e.rec.setFail(nil)
			makeDue(t, eng, name, "")
			eng.RunCycle(ctx, key)
			watch.check(t, fmt.Sprintf("Begin late: %v", late))
		}
	})
}

// A 429 on a Detail request (the delete pass of a listing) keeps its Retry-After window past
// the end of its cycle, as a 429 on the listing does (the control): a trigger then sends
// nothing inside it.
func TestG8DetailRetryAfterOutlivesTheCycle(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, detail429 := range []bool{false, true} {
			e := newEnv(t, b)
			var mu sync.Mutex
			watch := &windowWatch{clock: e.clock}
			listing := []string{`{"id":"a"}`, `{"id":"b"}`}
			throttleList := false
			p := e.poller(func(p *watukuytype.Poller) {
				p.Name = fmt.Sprintf("detail%v", detail429)
				p.Strategy = watukuytype.SnapshotDiff
				p.Version = nil
				p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
					mu.Lock()
					defer mu.Unlock()
					watch.note("listing request")
					if throttleList {
						throttleList = false
						return watukuytype.Page{}, watch.throttle(req.Key, time.Minute)
					}
					var pg watukuytype.Page
					for _, it := range listing {
						pg.Items = append(pg.Items, json.RawMessage(it))
					}
					return pg, nil
				}
				p.Detail = func(ctx context.Context, key watukuytype.Key, id string) (json.RawMessage, bool, error) {
					watch.note("detail request")
					return nil, false, watch.throttle(key, time.Minute)
				}
			})
			eng := e.engine(p, nil)
			ctx := t.Context()
			key := watukuytype.Key{Poller: p.Name}
			eng.RunCycle(ctx, key) // a and b created
			mu.Lock()
			if detail429 {
				listing = listing[:1] // b missing: its Detail request gets the 429
			} else {
				throttleList = true // control: the listing itself gets the 429
			}
			mu.Unlock()
			e.clock.Advance(time.Minute)
			if rep := eng.RunCycle(ctx, key); rep.Outcome != watukuytype.Ran {
				t.Fatalf("second cycle: %+v", rep)
			}
			ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: p.Name, Partition: ""})
			t.Logf("detail429=%v: after the 429, throttled until %v", detail429, ki.ThrottledUntil)
			e.clock.Advance(5 * time.Second)
			makeDue(t, eng, p.Name, "")
			eng.RunCycle(ctx, key)
			watch.check(t, fmt.Sprintf("429 on the detail request: %v", detail429))
		}
	})
}

// An instance frozen between two pages past its lease sends nothing when it resumes: another
// instance took the key meanwhile and got a 429 with a Retry-After window. A is frozen in its
// rate-limit wait before page 2 until B has its 429.
func TestG8FrozenInstanceStaysOutOfTheNewOwnersWindow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 20)
		var mu sync.Mutex
		var requests []string
		var window time.Time
		fetchAs := func(instance string, status int) func(p *watukuytype.Poller) {
			return func(p *watukuytype.Poller) {
				feed := e.api.ChangeFeed(10)
				p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
					mu.Lock()
					defer mu.Unlock()
					requests = append(requests, fmt.Sprintf("%s page %d at %s", instance, req.Page, e.clock.Now().Format("15:04:05")))
					if status == 429 {
						window = e.clock.Now().Add(time.Minute)
						return watukuytype.Page{}, &watukuytype.HTTPError{Key: req.Key, StatusCode: 429, RetryAfter: time.Minute}
					}
					page, err := feed(ctx, req)
					// One request left in a 900 ms window: the engine waits before page 2.
					page.RateLimit = &watukuytype.RateLimit{Limit: 2, Remaining: 1, Reset: 900 * time.Millisecond}
					return page, err
				}
			}
		}
		paged, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		a, err := newEngine(Options{Redis: b.Client, InstanceID: "instance-a"}, seams{clock: e.clock.Now, wait: func(ctx context.Context, d time.Duration) error {
			once.Do(func() {
				close(paged)
				<-resume // A is frozen in its wait before page 2
			})
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Register(e.poller(fetchAs("A", 200))); err != nil {
			t.Fatal(err)
		}
		done := make(chan watukuytype.TickReport)
		go func() { done <- e.tick(a) }()
		select {
		case <-paged: // page 1 delivered and acked: A waits for the rate limit
		case rep := <-done:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("A's cycle ended without waiting for the rate limit: %+v; requests %v", rep, requests)
		}
		e.clock.Advance(31 * time.Second) // A is frozen past its 30 s lease
		bb := e.engine(e.poller(fetchAs("B", 429)), nil)
		if err := bb.Trigger(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		e.tick(bb)
		close(resume)
		<-done
		mu.Lock()
		defer mu.Unlock()
		if window.IsZero() {
			t.Fatalf("B never got its 429: %v", requests)
		}
		if got := requests[len(requests)-1]; !strings.HasPrefix(got, "B ") {
			t.Fatalf("after B's 429 (window until %s) the requests were %v", window.Format("15:04:05"), requests)
		}
	})
}

// A 429 with Retry-After that comes back while its cycle is asked to yield (Stop draining,
// Tick's deadline) is kept, not dropped with the yield: the next instance, at once, sends
// nothing inside the window (the control gets the same 429 without a yield).
func TestG8YieldKeepsARetryAfterWindow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, mode := range []string{"control-no-yield", "stop-drain", "tick-deadline"} {
			t.Run(mode, func(t *testing.T) {
				e := newEnv(t, b)
				putN(e, 25) // three pages of 10
				name := "y429-" + mode
				w := &windowWatch{clock: e.clock}
				var a *Engine
				var once sync.Once
				e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
					w.note(fmt.Sprintf("%s page %d", req.Lane, req.Page))
					first := false
					if req.Page == 1 {
						once.Do(func() { first = true })
					}
					if !first {
						return nil
					}
					switch mode {
					case "stop-drain":
						go func() { _ = a.Stop(true, 10*time.Second) }()
						<-ctx.Done() // the yield reached the request ...
					case "tick-deadline":
						<-ctx.Done()
					}
					return w.throttle(req.Key, time.Hour) // ... as the API's 429 came back
				})
				p := e.poller(func(p *watukuytype.Poller) { p.Name = name })
				a = e.engine(p, nil)
				if mode == "tick-deadline" {
					if _, err := a.Tick(t.Context(), 300*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				} else {
					e.tick(a)
				}
				ki, _ := a.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				// The next instance, at once (the fake clock has not moved: the API's window
				// of an hour is in force).
				bb := e.engine(p, nil)
				e.tick(bb)
				w.check(t, fmt.Sprintf("%s; after the first instance: throttledUntil %v status %s", mode, ki.ThrottledUntil, ki.Status))
			})
		}
	})
}

// A truncated cycle (yielded in its in-cycle wait, or paced past the longest in-cycle wait) is
// due when the API's rate-limit pace allows, counted from the answer that carried the headers,
// not from its Begin: the next instance sends nothing early.
func TestG8TruncatedCycleDueAfterItsPace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name string
			pace time.Duration
			stop bool
		}{
			{"control-in-cycle-wait", 900 * time.Millisecond, false},
			{"yield-during-in-cycle-wait", 900 * time.Millisecond, true},
			{"paced-over-a-second", 5 * time.Second, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				putN(e, 25) // three pages of 10
				name := "pace-" + tc.name
				feed := e.api.ChangeFeed(10)
				var mu sync.Mutex
				var notBefore time.Time
				var early []string
				slow := true
				fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
					now := e.clock.Now()
					mu.Lock()
					if now.Before(notBefore) {
						early = append(early, fmt.Sprintf("page %d at %s, the pace allows %s", req.Page, now.Format("15:04:05.000"), notBefore.Format("15:04:05.000")))
					}
					first := slow
					slow = false
					mu.Unlock()
					if first {
						e.clock.Advance(10 * time.Second) // a slow first answer: the cycle is 10 s old
					}
					p, err := feed(ctx, req)
					if err != nil {
						return p, err
					}
					p.RateLimit = &watukuytype.RateLimit{Limit: 100, Remaining: 0, Reset: tc.pace}
					mu.Lock()
					notBefore = e.clock.Now().Add(tc.pace)
					mu.Unlock()
					return p, nil
				}
				p := e.poller(func(p *watukuytype.Poller) { p.Name = name; p.Fetch = fetch })
				var a *Engine
				wait := func(ctx context.Context, d time.Duration) error {
					if !tc.stop {
						e.clock.Advance(d)
						return nil
					}
					go func() { _ = a.Stop(true, 10*time.Second) }()
					<-ctx.Done()
					return context.Cause(ctx)
				}
				a, err := newEngine(Options{Redis: b.Client, InstanceID: "pace-a"}, seams{clock: e.clock.Now, wait: wait})
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Register(p); err != nil {
					t.Fatal(err)
				}
				e.tick(a)
				// The next instance at once (the clock stands where the last answer left it).
				e.tick(e.engine(p, nil))
				mu.Lock()
				defer mu.Unlock()
				if len(early) > 0 {
					t.Errorf("G8 (pacing): requests before the API's rate-limit pace allowed them: %v", early)
				}
			})
		}
	})
}
