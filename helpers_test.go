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
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// newClock is the shared test clock every engine in a test uses in place of Redis TIME.
func newClock() *fakeclock.Clock { return fakeclock.New(time.UnixMilli(1_800_000_000_000)) }

// recorder is a handler that records every delivery attempt that succeeded, in order.
type recorder struct {
	mu   sync.Mutex
	evs  []watukuytype.Event
	fail func(ev watukuytype.Event) error
}

func (r *recorder) handle(ctx context.Context, ev watukuytype.Event) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		if err := fail(ev); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	return nil
}

func (r *recorder) setFail(f func(ev watukuytype.Event) error) {
	r.mu.Lock()
	r.fail = f
	r.mu.Unlock()
}

func (r *recorder) events() []watukuytype.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]watukuytype.Event(nil), r.evs...)
}

// lastVersion returns the last delivered version per identity (deletes remove it).
func (r *recorder) final() map[string]string {
	m := map[string]string{}
	for _, ev := range r.events() {
		if ev.Type == watukuytype.Deleted {
			delete(m, ev.Identity)
		} else {
			m[ev.Identity] = ev.Version
		}
	}
	return m
}

// env is one test's world: a Redis backend, a clock, a fake API and a recorder.
type env struct {
	t     *testing.T
	b     redistest.Backend
	clock *fakeclock.Clock
	api   *fakeapi.API
	rec   *recorder
	n     int
}

func newEnv(t *testing.T, b redistest.Backend) *env {
	return &env{t: t, b: b, clock: newClock(), api: fakeapi.New(), rec: &recorder{}}
}

// poller is the default test poller: a change feed of 10 items a page.
func (e *env) poller(mod ...func(*watukuytype.Poller)) watukuytype.Poller {
	p := watukuytype.Poller{Name: "orders", Fetch: e.api.ChangeFeed(10), Version: watukuytype.Field("version"),
		Handler: e.rec.handle, Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Minute},
		Delivery: watukuytype.Delivery{Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	for _, m := range mod {
		m(&p)
	}
	return p
}

// engine starts a new engine instance (a new process, as far as Redis can tell).
func (e *env) engine(p watukuytype.Poller, wrap func(core.Store) core.Store) *Engine {
	e.t.Helper()
	e.n++
	// The jitter's random number is fixed mid-range: a failed cycle's backoff (full jitter) can
	// then never come out under a millisecond, making the key due again within the same tick
	// on the fake clock, which stands still.
	eng, err := newEngine(Options{Redis: e.b.Client, InstanceID: "instance-" + string(rune('a'-1+e.n))},
		seams{clock: e.clock.Now, wrapStore: wrap, rand: func() float64 { return 0.5 }})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := eng.Register(p); err != nil {
		e.t.Fatal(err)
	}
	return eng
}

// tick runs one Tick and fails the test on an engine error.
func (e *env) tick(eng *Engine) watukuytype.TickReport {
	e.t.Helper()
	rep, err := eng.Tick(context.Background(), 10*time.Second)
	if err != nil {
		e.t.Fatalf("tick: %v", err)
	}
	return rep
}

// settle advances the clock past any lease, claim timeout or interval and ticks until a
// tick runs cleanly with nothing to emit or deliver.
func (e *env) settle(eng *Engine) {
	e.t.Helper()
	for i := 0; i < 40; i++ {
		e.clock.Advance(3 * time.Minute)
		rep := e.tick(eng)
		if rep.Ran > 0 && rep.Events == 0 && rep.Delivered == 0 && len(rep.Errors) == 0 && rep.SkippedLeased == 0 && rep.DeleteCandidates == 0 {
			return
		}
	}
	e.t.Fatalf("keys still busy after 40 ticks: %+v", e.tick(eng))
}

// settleTo304 settles the keys, then runs the orders key once more: that cycle must get a
// 304 (the quiet pass committed the ETag, the next one sends it), or the test proves nothing.
func (e *env) settleTo304(eng *Engine) {
	e.t.Helper()
	e.settle(eng)
	e.clock.Advance(3 * time.Minute)
	e.tick(eng)
	if ki, _ := eng.Inspect(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""}); ki.LastPoll == nil || !strings.Contains(string(ki.LastPoll), `"notModified":true`) {
		e.t.Fatalf("the live lane does not get 304s, the test proves nothing: %s", ki.LastPoll)
	}
}

var errKilled = errors.New("killed")

// faultyStore fails chosen calls, as a process killed at that point would.
type faultyStore struct {
	core.Store
	mu        sync.Mutex
	failAck   int
	failEnd   int
	failCommt int // fail before a commit with events (K2)
	dieCommit int // commit, then fail as if the process died (K3)
	commits   int
}

func (f *faultyStore) take(n *int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *n > 0 {
		*n--
		return true
	}
	return false
}

func (f *faultyStore) Ack(ctx context.Context, l core.Lease, acked []core.Entry) (bool, error) {
	if f.take(&f.failAck) {
		return false, errKilled
	}
	return f.Store.Ack(ctx, l, acked)
}

func (f *faultyStore) End(ctx context.Context, l core.Lease, r core.EndRequest) error {
	if f.take(&f.failEnd) {
		return errKilled
	}
	return f.Store.End(ctx, l, r)
}

func (f *faultyStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	if len(c.Events) > 0 && f.take(&f.failCommt) {
		return core.CommitResult{}, errKilled
	}
	res, err := f.Store.CommitPoll(ctx, l, c)
	if err == nil {
		f.mu.Lock()
		f.commits++
		f.mu.Unlock()
	}
	if err == nil && f.take(&f.dieCommit) {
		return core.CommitResult{}, errKilled
	}
	return res, err
}

func (f *faultyStore) commitCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commits
}

// faulty returns a wrapper that installs fs around the real store.
func faulty(fs *faultyStore) func(core.Store) core.Store {
	return func(s core.Store) core.Store { fs.Store = s; return fs }
}

// renewals counts lease renewals and signals each on a channel.
type renewStore struct {
	core.Store
	renewed chan struct{}
}

func (r *renewStore) Renew(ctx context.Context, l core.Lease) (core.Confirm, error) {
	t, err := r.Store.Renew(ctx, l)
	if err == nil {
		select {
		case r.renewed <- struct{}{}:
		default:
		}
	}
	return t, err
}

// raceStore runs an operator's action right after Begin returns, as an operator racing a
// cycle (or a stale task) would land between its Begin and its next write.
type raceStore struct {
	core.Store
	afterBegin func(b core.BeginResult)
}

func (r *raceStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, op core.BeginMode) (core.BeginResult, error) {
	b, err := r.Store.Begin(ctx, key, owner, ttl, op)
	if err == nil {
		r.afterBegin(b)
	}
	return b, err
}

// racing returns a wrapper that installs a raceStore running afterBegin around the real store.
func racing(afterBegin func(b core.BeginResult)) func(core.Store) core.Store {
	return func(s core.Store) core.Store { return &raceStore{Store: s, afterBegin: afterBegin} }
}

// windowWatch records the requests a test's fake API receives inside a Retry-After window it
// handed out (G8).
type windowWatch struct {
	clock  *fakeclock.Clock
	mu     sync.Mutex
	until  time.Time
	inside []string
}

// note records a request (what) when it falls inside the window.
func (w *windowWatch) note(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := w.clock.Now(); now.Before(w.until) {
		w.inside = append(w.inside, fmt.Sprintf("%s at %s, window until %s", what, now.Format("15:04:05.000"), w.until.Format("15:04:05.000")))
	}
}

// throttle opens a window of d from now and returns the 429 that announces it.
func (w *windowWatch) throttle(key watukuytype.Key, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.until = w.clock.Now().Add(d)
	return &watukuytype.HTTPError{Key: key, StatusCode: 429, RetryAfter: d}
}

// check fails t when a request fell inside a window.
func (w *windowWatch) check(t *testing.T, label string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.inside) > 0 {
		t.Errorf("G8 (%s): requests inside the Retry-After window: %v", label, w.inside)
	}
}

// makeDue makes a key due now as a resume or a partitions add would: unlike trigger, an
// operator's override, it leaves the key's Retry-After window in place.
func makeDue(t *testing.T, eng *Engine, poller, partition string) {
	t.Helper()
	if err := eng.store.Trigger(t.Context(), watukuytype.Key{Poller: poller, Partition: partition}); err != nil {
		t.Fatal(err)
	}
}

// rejectBad is a Validate that rejects items with "bad": true while strict holds (always,
// when strict is nil): an operator fixes the validation by clearing it.
func rejectBad(strict *atomic.Bool) func(json.RawMessage) error {
	return func(item json.RawMessage) error {
		var it struct {
			Bad bool `json:"bad"`
		}
		_ = json.Unmarshal(item, &it)
		if it.Bad && (strict == nil || strict.Load()) {
			return fmt.Errorf("bad item")
		}
		return nil
	}
}
