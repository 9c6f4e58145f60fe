package watukuy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// dueScore is the key's score in its poller's due set (ok false without an entry).
func dueScore(t *testing.T, b redistest.Backend, eng *Engine, key watukuytype.Key) (time.Time, bool) {
	t.Helper()
	v, err := b.Client.ZScore(t.Context(), eng.store.DueKey(key.Poller), key.String()).Result()
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(v)), true
}

// redisZ is key's due-set member due at at.
func redisZ(at time.Time, key watukuytype.Key) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: key.String()}
}

// A key whose cycle died (the process was killed after Begin) is claimed again as soon as its
// lease lapses, plus the claim grace: not after a fixed claim timeout of minutes.
func TestClaimFollowsLeaseOfDeadCycle(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		ttl := 30 * time.Second
		a := e.engine(e.poller(func(p *watukuytype.Poller) { p.LeaseTTL = ttl }), faulty(&faultyStore{failCommt: 1}))
		if rep := e.tick(a); len(rep.Errors) != 1 {
			t.Fatalf("the dying cycle: %+v", rep)
		}
		bb := e.engine(e.poller(func(p *watukuytype.Poller) { p.LeaseTTL = ttl }), nil)
		e.clock.Advance(ttl + core.ClaimGrace - time.Millisecond)
		if keys, err := bb.store.ClaimDue(t.Context(), 10, 0, nil); err != nil || len(keys) != 0 {
			t.Fatalf("claimed %v (%v) before the dead cycle's lease and the grace lapsed", keys, err)
		}
		e.clock.Advance(2 * time.Millisecond)
		keys, err := bb.store.ClaimDue(t.Context(), 10, 0, nil)
		if err != nil || len(keys) != 1 {
			t.Fatalf("%v after the lease lapsed: claimed %v, want the dead cycle's key", err, keys)
		}
		// The new claim holds the key for its lease TTL plus the grace again.
		if at, _ := dueScore(t, b, bb, keys[0]); !at.Equal(e.clock.Now().Add(ttl + core.ClaimGrace)) {
			t.Fatalf("claimed until %v, want now + TTL + grace (%v)", at, e.clock.Now().Add(ttl+core.ClaimGrace))
		}
		if rep := bb.core.RunCycle(t.Context(), keys[0]); rep.Outcome != watukuytype.Ran || rep.Events != 3 {
			t.Fatalf("the next owner's cycle: %+v", rep)
		}
	})
}

// claimWatch runs check after the lease keeper's renewals (real clock): a cycle that outlives
// its claim timeout stays claimed as long as its lease is renewed.
type claimWatch struct {
	core.Store
	mu     sync.Mutex
	holds  int
	renews chan struct{}
}

func (c *claimWatch) HoldClaim(ctx context.Context, key watukuytype.Key, d time.Time) error {
	err := c.Store.HoldClaim(ctx, key, d)
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
	select {
	case c.renews <- struct{}{}:
	default:
	}
	return err
}

// A healthy cycle longer than the claim is never claimed twice: each renewal of its lease
// holds its claim on (server clock, a claim of 200 ms and a lease of 150 ms).
func TestLongCycleNeverClaimedTwice(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		cw := &claimWatch{renews: make(chan struct{}, 1)}
		a, err := newEngine(Options{Redis: b.Client, InstanceID: "long", ClaimTimeout: 200 * time.Millisecond}, seams{wrapStore: func(s core.Store) core.Store { cw.Store = s; return cw }})
		if err != nil {
			t.Fatal(err)
		}
		other, err := New(Options{Redis: b.Client, InstanceID: "other"})
		if err != nil {
			t.Fatal(err)
		}
		p := e.poller(func(p *watukuytype.Poller) { p.LeaseTTL = 150 * time.Millisecond })
		if err := a.Register(p); err != nil {
			t.Fatal(err)
		}
		var stolen []watukuytype.Key
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			start := time.Now()
			for time.Since(start) < 600*time.Millisecond { // three times the claim timeout
				select {
				case <-cw.renews:
				case <-ctx.Done():
					return ctx.Err()
				}
				keys, err := other.store.ClaimDue(ctx, 10, 200*time.Millisecond, []string{"orders"})
				if err != nil {
					return err
				}
				stolen = append(stolen, keys...)
			}
			return nil
		})
		rep, err := a.Tick(t.Context(), 5*time.Second)
		if err != nil || rep.Ran != 1 || rep.Events != 3 || len(rep.Errors) != 0 {
			t.Fatalf("long cycle: %+v %v", rep, err)
		}
		if len(stolen) != 0 {
			t.Fatalf("a running cycle's key was claimed again: %v", stolen)
		}
		cw.mu.Lock()
		defer cw.mu.Unlock()
		if cw.holds < 3 {
			t.Fatalf("%d claim holds in a 600 ms cycle with a 150 ms lease", cw.holds)
		}
	})
}

// A hold raises a claim only: it never pushes back a due-now entry (a trigger), never lowers
// a later due time, and writes nothing for a key without an entry.
func TestHoldClaim(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(), nil)
		ctx := t.Context()
		k := watukuytype.Key{Poller: "orders"}
		set := func(at time.Time) {
			if err := b.Client.ZAdd(ctx, eng.store.DueKey("orders"), redisZ(at, k)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		now := e.clock.Now()
		for _, c := range []struct {
			name  string
			score time.Time
			want  time.Time
		}{
			{"claimed: raised", now.Add(time.Second), now.Add(5 * time.Second)},
			{"due now (trigger): kept", now, now},
			{"due later than the hold: kept", now.Add(time.Hour), now.Add(time.Hour)},
		} {
			set(c.score)
			if err := eng.store.HoldClaim(ctx, k, now.Add(5*time.Second)); err != nil {
				t.Fatal(err)
			}
			if got, _ := dueScore(t, b, eng, k); !got.Equal(c.want) {
				t.Errorf("%s: due %v, want %v", c.name, got, c.want)
			}
		}
		b.Client.ZRem(ctx, eng.store.DueKey("orders"), k.String())
		if err := eng.store.HoldClaim(ctx, k, now.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, ok := dueScore(t, b, eng, k); ok {
			t.Fatal("a hold created a due entry")
		}
	})
}

// hangingFetch blocks the second request until its context ends (or 10 s pass: the request
// was not given up), after signalling it.
func hangingFetch(e *env, started chan<- struct{}) {
	var once sync.Once
	e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
		if req.Page == 0 {
			return nil
		}
		once.Do(func() { close(started) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("the hanging request was never given up")
		}
	})
}

// A stopping engine (SIGTERM) gives up a request in flight, keeps what its cycle committed,
// releases the lease and leaves the key due at once, so another instance goes on from the
// committed cursor in seconds, not after the lease lapses. No failure is counted.
func TestStopHandsKeyBackAtOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 25) // three pages of 10
		started := make(chan struct{})
		hangingFetch(e, started)
		a := e.engine(e.poller(), nil)
		done := make(chan watukuytype.TickReport, 1)
		go func() { done <- e.tick(a) }()
		<-started
		if err := a.Stop(true, 10*time.Second); err != nil {
			t.Fatalf("stop: %v", err)
		}
		rep := <-done
		if rep.Ran != 1 || len(rep.Errors) != 0 || rep.Events != 10 {
			t.Fatalf("the stopped cycle: %+v (want ran 1, the first page's 10 events, no error)", rep)
		}
		ki, err := a.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if err != nil {
			t.Fatal(err)
		}
		if ki.LeaseOwner != "" || ki.LastError != nil || ki.Failures != 0 || ki.Status != "idle" {
			t.Fatalf("after the stop: owner %q lastError %s failures %d status %s", ki.LeaseOwner, ki.LastError, ki.Failures, ki.Status)
		}
		if at, ok := dueScore(t, b, a, watukuytype.Key{Poller: "orders"}); !ok || at.After(e.clock.Now()) {
			t.Fatalf("due at %v (entry %v), want due at once (now %v)", at, ok, e.clock.Now())
		}
		e.api.OnFetch(nil)
		bb := e.engine(e.poller(), nil)
		if rep := e.tick(bb); rep.Ran != 1 || rep.Events != 15 {
			t.Fatalf("the next instance at once: %+v, want the remaining 15 events", rep)
		}
	})
}

// Keys a stopping engine was handed but never began (the rest of a task) are due again at
// once, not when their claim lapses.
func TestStoppedEngineHandsBackUnstartedKeys(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(), nil)
		if err := eng.core.Setup(t.Context()); err != nil {
			t.Fatal(err)
		}
		keys, err := eng.store.ClaimDue(t.Context(), 10, 0, nil)
		if err != nil || len(keys) != 1 {
			t.Fatalf("claim: %v %v", keys, err)
		}
		if err := eng.Stop(true, time.Second); err != nil {
			t.Fatal(err)
		}
		if rep := eng.core.RunCycle(t.Context(), keys[0]); rep.Err == nil {
			t.Fatal("a stopped engine ran a cycle")
		}
		if at, _ := dueScore(t, b, eng, keys[0]); at.After(e.clock.Now()) {
			t.Fatalf("due at %v, want at once (%v)", at, e.clock.Now())
		}
	})
}

// tick --max-duration bounds the run, running cycles included: at the deadline a cycle gives
// up its request, keeps what it committed, releases its lease and leaves the key due at once.
func TestTickMaxDurationBoundsRunningCycles(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 25)
		started := make(chan struct{})
		hangingFetch(e, started)
		eng := e.engine(e.poller(), nil)
		const maxDuration = 300 * time.Millisecond
		start := time.Now()
		rep, err := eng.Tick(t.Context(), maxDuration)
		if took := time.Since(start); took > maxDuration+2*time.Second {
			t.Fatalf("tick took %v with --max-duration %v", took, maxDuration)
		}
		if err != nil || rep.Ran != 1 || rep.Events != 10 || len(rep.Errors) != 0 {
			t.Fatalf("tick: %+v %v", rep, err)
		}
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.LeaseOwner != "" || ki.LastError != nil {
			t.Fatalf("after the deadline: owner %q lastError %s", ki.LeaseOwner, ki.LastError)
		}
		if at, ok := dueScore(t, b, eng, watukuytype.Key{Poller: "orders"}); !ok || at.After(e.clock.Now()) {
			t.Fatalf("due at %v, want at once", at)
		}
	})
}

// trigger is an operator's override: it clears a Retry-After window (a bogus 24 h one here),
// logs the window it cleared, and the key is polled at once. A cycle that found the window at
// Begin does not write it back at its End.
func TestTriggerClearsRetryAfterWindow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		var logs bytes.Buffer
		throttle := true
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			if throttle {
				throttle = false
				return &watukuytype.HTTPError{Key: req.Key, StatusCode: 429, RetryAfter: 24 * time.Hour}
			}
			return nil
		})
		eng, err := newEngine(Options{Redis: b.Client, InstanceID: "op", Logger: zerolog.New(&logs)}, seams{clock: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(e.poller()); err != nil {
			t.Fatal(err)
		}
		e.tick(eng)
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.ThrottledUntil == nil || ki.Status != "throttled" {
			t.Fatalf("the 429 set no window: %+v", ki)
		}
		window := *ki.ThrottledUntil
		// A cycle that begins inside the window, with the trigger landing during it: it makes
		// no request, and its End neither writes the window back nor keeps the key waiting.
		var once sync.Once
		race := e.engine(e.poller(), racing(func(b core.BeginResult) {
			if b.Status == core.BeginOK {
				once.Do(func() {
					if err := eng.Trigger(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
						t.Error(err)
					}
				})
			}
		}))
		if err := b.Client.ZAdd(t.Context(), eng.store.DueKey("orders"), redisZ(e.clock.Now(), watukuytype.Key{Poller: "orders"})).Err(); err != nil {
			t.Fatal(err)
		}
		b.Client.HSet(t.Context(), eng.store.Key(watukuytype.Key{Poller: "orders"}, "state"), statehash.NextDue, "0")
		fetches := e.api.Fetches()
		// The same tick claims the key again at once and polls it.
		if rep := e.tick(race); rep.Ran != 2 || rep.Events != 3 || e.api.Fetches() == fetches {
			t.Fatalf("after the trigger: %+v, want the cycle inside the window, then the key polled at once", rep)
		}
		ki, _ = eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.ThrottledUntil != nil {
			t.Fatalf("the window is back after the trigger: until %v", ki.ThrottledUntil)
		}
		if !strings.Contains(logs.String(), "cleared the key's Retry-After window") || !strings.Contains(logs.String(), window.UTC().Format("2006-01-02T15:04")) {
			t.Fatalf("the cleared window is not logged: %s", logs.String())
		}
	})
}

// A stop before the API answered anything teaches nothing of the API: a restart never counts
// as a failure nor clears one (failures, lastError and the circuit stay), and the key is due
// at once.
func TestStopBeforeAnyAnswerKeepsTheSchedule(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		fail := true
		started := make(chan struct{})
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			if fail {
				return &watukuytype.HTTPError{Key: req.Key, StatusCode: 500}
			}
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		a := e.engine(e.poller(), nil)
		e.tick(a)
		before, _ := a.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if before.Failures != 1 || before.LastError == nil {
			t.Fatalf("setup: failures %d lastError %s", before.Failures, before.LastError)
		}
		e.clock.Advance(3 * time.Minute)
		fail = false
		done := make(chan watukuytype.TickReport, 1)
		go func() { done <- e.tick(a) }()
		<-started
		if err := a.Stop(true, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		<-done
		ki, _ := a.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Failures != 1 || ki.Circuit != "closed" || string(ki.LastError) != string(before.LastError) || ki.LeaseOwner != "" {
			t.Fatalf("after a stop with no answer: failures %d circuit %s lastError %s owner %q; want them as before",
				ki.Failures, ki.Circuit, ki.LastError, ki.LeaseOwner)
		}
		if at, ok := dueScore(t, b, a, watukuytype.Key{Poller: "orders"}); !ok || at.After(e.clock.Now()) {
			t.Fatalf("due at %v, want at once", at)
		}
	})
}

// endRace holds the lease keeper's first claim hold after arm until End has run (or 300 ms
// went by, well inside the lease), as a renewal racing the cycle's end would land.
type endRace struct {
	core.Store
	armed   chan struct{} // closed when the fetch is done
	holding chan struct{} // closed when the armed hold began
	ended   chan struct{} // closed when End returned
	once    sync.Once
}

func (r *endRace) HoldClaim(ctx context.Context, key watukuytype.Key, until time.Time) error {
	select {
	case <-r.armed:
		first := false
		r.once.Do(func() { first = true })
		if first {
			close(r.holding)
			select {
			case <-r.ended:
			case <-time.After(300 * time.Millisecond): // the keeper is stopped first: End waits for this hold
			}
		}
	default:
	}
	return r.Store.HoldClaim(ctx, key, until)
}

func (r *endRace) End(ctx context.Context, l core.Lease, req core.EndRequest) error {
	err := r.Store.End(ctx, l, req)
	close(r.ended)
	return err
}

// The lease keeper stops before the cycle's End: a claim hold in flight lands first, so the
// due time End writes (100 ms on, here) is the key's, not pushed back to the lease's end plus
// the grace by a hold landing after it.
func TestKeeperStopsBeforeEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		r := &endRace{armed: make(chan struct{}), holding: make(chan struct{}), ended: make(chan struct{})}
		a, err := newEngine(Options{Redis: b.Client, InstanceID: "ender"}, seams{wrapStore: func(s core.Store) core.Store { r.Store = s; return r }})
		if err != nil {
			t.Fatal(err)
		}
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			close(r.armed)
			return nil
		})
		p := e.poller(func(p *watukuytype.Poller) {
			p.LeaseTTL = 1200 * time.Millisecond // renewed every 400 ms
			p.Schedule = watukuytype.Schedule{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}
			p.Handler = func(ctx context.Context, ev watukuytype.Event) error {
				<-r.holding // the keeper's next hold is under way when the cycle goes on to End
				return e.rec.handle(ctx, ev)
			}
		})
		if err := a.Register(p); err != nil {
			t.Fatal(err)
		}
		if err := a.core.Setup(t.Context()); err != nil {
			t.Fatal(err)
		}
		key := watukuytype.Key{Poller: "orders"}
		if keys, err := a.store.ClaimDue(t.Context(), 1, 0, nil); err != nil || len(keys) != 1 {
			t.Fatalf("claim: %v %v", keys, err)
		}
		if rep := a.core.RunCycle(t.Context(), key); rep.Outcome != watukuytype.Ran || rep.Events != 3 || rep.Err != nil {
			t.Fatalf("cycle: %+v", rep)
		}
		at, _ := dueScore(t, b, a, key)
		nextDue, _ := b.Client.HGet(t.Context(), a.store.Key(key, "state"), statehash.NextDue).Int64()
		if at.UnixMilli() != nextDue {
			t.Fatalf("due at %v, but End wrote %v: a claim hold landed after End", at, time.UnixMilli(nextDue))
		}
	})
}

// A cycle cancelled from outside (asynq takes back the task of a process stopped past its
// task lease) after its lease's validity passed reports a lost lease, which is what happened;
// cancelled while the lease is valid, it reports the cancellation.
func TestCancelledPastValidityIsLeaseLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, past := range []bool{false, true} {
			e := newEnv(t, b)
			putN(e, 3)
			started := make(chan struct{})
			e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
			name := fmt.Sprintf("cancelled-%v", past)
			a := e.engine(e.poller(func(p *watukuytype.Poller) { p.Name = name }), nil)
			if err := a.core.Setup(t.Context()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan watukuytype.CycleReport, 1)
			go func() { done <- a.core.RunCycle(ctx, watukuytype.Key{Poller: name}) }()
			select {
			case <-started:
			case rep := <-done:
				t.Fatalf("the cycle ended before its request: %+v", rep)
			}
			if past {
				e.clock.Advance(31 * time.Second) // the default lease is 30 s
			}
			cancel()
			rep := <-done
			if got := watukuytype.IsLeaseLost(rep.Err); got != past {
				t.Errorf("cancelled %s the lease's validity: %v (lease lost: %v, want %v)", map[bool]string{false: "within", true: "past"}[past], rep.Err, got, past)
			}
		}
	})
}

// A paused key is looked at again 5 minutes later, not at every lapse of its claim; a resume
// racing the skip keeps the key due at once.
func TestPausedKeyRecheckedLater(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var resume func()
		a := e.engine(e.poller(), racing(func(b core.BeginResult) {
			if b.Status == core.BeginPaused && resume != nil {
				resume()
			}
		}))
		ctx := t.Context()
		key := watukuytype.Key{Poller: "orders"}
		if err := a.core.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Pause(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		claim := func() {
			t.Helper()
			if keys, err := a.store.ClaimDue(ctx, 1, 0, nil); err != nil || len(keys) != 1 {
				t.Fatalf("claim: %v %v", keys, err)
			}
		}
		claim()
		if rep := a.core.RunCycle(ctx, key); rep.Outcome != watukuytype.SkippedPaused || rep.Err != nil {
			t.Fatalf("paused cycle: %+v", rep)
		}
		if at, _ := dueScore(t, b, a, key); !at.Equal(e.clock.Now().Add(5 * time.Minute)) {
			t.Fatalf("a paused key is due at %v, want 5 minutes on (%v)", at, e.clock.Now().Add(5*time.Minute))
		}
		resume = func() {
			if err := a.Resume(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
				t.Error(err)
			}
		}
		e.clock.Advance(5 * time.Minute)
		claim()
		a.core.RunCycle(ctx, key)
		if at, _ := dueScore(t, b, a, key); at.After(e.clock.Now()) {
			t.Fatalf("a resume racing the paused skip: due at %v, want at once", at)
		}
	})
}

// A stale task that meets a live lease (asynq gives back a dead worker's task while the dead
// cycle's lease still runs) leaves the key due when that lease lapses plus the grace, as its
// claim would: never later, which would delay the takeover.
func TestLeasedSkipDueWhenTheLeaseLapses(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		a := e.engine(e.poller(), faulty(&faultyStore{failCommt: 1})) // dies holding its lease
		e.tick(a)
		ki, _ := a.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.LeaseExpires == nil {
			t.Fatal("setup: the dead cycle holds no lease")
		}
		e.clock.Advance(20 * time.Second)
		bb := e.engine(e.poller(), nil)
		if rep := bb.core.RunCycle(t.Context(), watukuytype.Key{Poller: "orders"}); rep.Outcome != watukuytype.SkippedLeased {
			t.Fatalf("the stale task: %+v", rep)
		}
		if at, _ := dueScore(t, b, bb, watukuytype.Key{Poller: "orders"}); !at.Equal(ki.LeaseExpires.Add(core.ClaimGrace)) {
			t.Fatalf("due at %v, want the lease's end + the grace (%v)", at, ki.LeaseExpires.Add(core.ClaimGrace))
		}
	})
}

// A half-open probe whose request hangs past Tick's deadline (or the worker's stop) is no
// success: the circuit stays open with its last error, and the next ticks at the same instant
// send nothing (the control's probe gets a 500).
func TestYieldedProbeKeepsTheCircuitOpen(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, mode := range []string{"control-probe-fails", "probe-hangs-past-the-deadline"} {
			t.Run(mode, func(t *testing.T) {
				e := newEnv(t, b)
				putN(e, 3)
				name := "probe-" + mode
				hang := false
				e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
					if hang {
						<-ctx.Done()
						return ctx.Err()
					}
					return &watukuytype.HTTPError{Key: req.Key, StatusCode: 500}
				})
				eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Name = name; p.Failures = 2 }), nil)
				tick := func() {
					if _, err := eng.Tick(t.Context(), 300*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
				tick()
				e.clock.Advance(3 * time.Minute)
				tick()
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				if ki.Circuit != "open" {
					t.Fatalf("setup: two failures, circuit %q (failures %d)", ki.Circuit, ki.Failures)
				}
				e.clock.Advance(3 * time.Minute) // past probeEvery (Schedule.Max, 1 min)
				hang = mode != "control-probe-fails"
				tick() // the half-open probe
				ki, _ = eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				before := e.api.Fetches()
				for i := 0; i < 5; i++ { // five more ticks, the clock standing still
					tick()
				}
				sent := e.api.Fetches() - before
				if ki.Circuit != "open" || ki.LastError == nil || sent > 0 {
					t.Errorf("a probe that got no answer: circuit %q, failures %d, status %q, lastError %s, freshAt %v; then %d requests in 5 ticks at the same instant",
						ki.Circuit, ki.Failures, ki.Status, ki.LastError, ki.FreshAt, sent)
				}
			})
		}
	})
}

// freezeHold freezes the lease keeper of the instance it wraps right after its first
// renewal succeeded, before its claim hold is sent (a GC pause or SIGSTOP between the two).
type freezeHold struct {
	core.Store
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	returned chan struct{}
}

func (f *freezeHold) HoldClaim(ctx context.Context, key watukuytype.Key, d time.Time) error {
	first := false
	f.once.Do(func() { first = true })
	if !first {
		return f.Store.HoldClaim(ctx, key, d)
	}
	close(f.entered)
	<-f.release
	err := f.Store.HoldClaim(ctx, key, d)
	close(f.returned)
	return err
}

// A claim hold sent late by an instance frozen between its keeper's renewal and its hold, after
// another instance took the key over and ended its cycle, leaves the due time that End wrote:
// the next cycle is not pushed back by the frozen instance's lease.
func TestFrozenHoldLeavesTheNextOwnersDue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		const ttl = 600 * time.Millisecond // the keeper renews every 200 ms (real time)
		p := e.poller(func(p *watukuytype.Poller) { p.Name = "latehold"; p.LeaseTTL = ttl })
		fetchFrozen := make(chan struct{})
		var firstFetch sync.Once
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			first := false
			firstFetch.Do(func() { first = true })
			if first {
				<-fetchFrozen // instance A is frozen mid-fetch, as its keeper is mid-hold
			}
			return nil
		})
		fh := &freezeHold{entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
		a := e.engine(p, func(s core.Store) core.Store { fh.Store = s; return fh })
		aDone := make(chan struct{})
		go func() {
			defer close(aDone)
			_, _ = a.Tick(context.Background(), 10*time.Second)
		}()
		select {
		case <-fh.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("A's keeper never renewed")
		}
		// A is frozen past its lease and its claim; B takes the key over and ends its cycle.
		e.clock.Advance(3 * time.Second)
		bb := e.engine(p, nil)
		if rep := e.tick(bb); rep.Ran != 1 || rep.Events != 3 {
			t.Fatalf("the takeover: %+v", rep)
		}
		key := watukuytype.Key{Poller: "latehold"}
		want, ok := dueScore(t, b, bb, key)
		if !ok || want.After(e.clock.Now().Add(1500*time.Millisecond)) {
			t.Fatalf("setup: after B's End the key is due at %v (now %v), want within its 1 s interval", want, e.clock.Now())
		}
		// A resumes: its keeper's hold lands.
		close(fh.release)
		<-fh.returned
		close(fetchFrozen)
		<-aDone
		if got, _ := dueScore(t, b, bb, key); !got.Equal(want) {
			t.Errorf("a late hold of a frozen instance moved the next owner's due time from %s to %s (now %s): %v late",
				want.Format("15:04:05.000"), got.Format("15:04:05.000"), e.clock.Now().Format("15:04:05.000"), got.Sub(want))
		}
	})
}
