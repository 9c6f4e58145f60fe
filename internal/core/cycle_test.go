package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// The cycle's outcome matrix: what one cycle reports and leaves in the key's state, for each
// way it can end (changes, fetch failure, circuit, throttle, truncation, stall, config,
// 304) and each way it can be skipped (paused, leased, not due).
func TestCycleOutcomes(t *testing.T) {
	notModified := func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
		return watukuytype.Page{NotModified: true}, nil
	}
	type want struct {
		outcome   watukuytype.Outcome
		pages     int
		events    int
		delivered int
		truncated bool
		notMod    bool
		err       string // substring of CycleReport.Err; "" means nil
		requests  int    // requests the checked cycle sent
		status    watukuytype.Status
		failures  int
		circuit   watukuytype.CircuitState
		lastError watukuytype.ErrorCode // LastError.Code; "" means none
		throttled time.Duration         // ThrottledUntil - now; 0 means none
		nextDue   time.Duration         // NextDueAt - now
		cursor    string
	}
	for _, tc := range []struct {
		name    string
		items   int // in the feed before anything runs
		size    int // page size
		mod     func(p *watukuytype.Poller)
		prepare func(w *world, f *feed, eng *core.Engine) // before the checked cycle
		fail    error                                     // every request of the checked cycle fails with it
		want    want
	}{
		{name: "changes are committed and delivered", items: 3, size: 10,
			want: want{outcome: watukuytype.Ran, pages: 1, events: 3, delivered: 3, requests: 1, status: watukuytype.StatusIdle, circuit: watukuytype.CircuitClosed,
				nextDue: time.Second, cursor: "3"}},
		{name: "a fetch failure counts and backs off", items: 3, size: 10, fail: errors.New("connection reset"),
			want: want{outcome: watukuytype.Ran, pages: 1, err: "connection reset", requests: 1, status: watukuytype.StatusFailing, failures: 1,
				circuit: watukuytype.CircuitClosed, lastError: watukuytype.CodeFetch, nextDue: 500 * time.Millisecond}}, // DefaultBackoff 1s, r=0.5
		{name: "consecutive failures open the circuit", items: 3, size: 10, fail: errors.New("connection reset"),
			mod: func(p *watukuytype.Poller) { p.Failures = 2 },
			prepare: func(w *world, f *feed, eng *core.Engine) {
				f.setErr(errors.New("connection reset"))
				w.run(eng)
				w.clock.Advance(time.Second)
			},
			want: want{outcome: watukuytype.Ran, pages: 1, err: "connection reset", requests: 1, status: watukuytype.StatusCircuitOpen, failures: 2,
				circuit: watukuytype.CircuitOpen, lastError: watukuytype.CodeFetch, nextDue: time.Minute}}, // ProbeEvery = Schedule.Max
		{name: "a success clears failures and lastError", items: 3, size: 10,
			prepare: func(w *world, f *feed, eng *core.Engine) {
				f.setErr(errors.New("connection reset"))
				w.run(eng)
				f.setErr(nil)
				w.clock.Advance(time.Second)
			},
			want: want{outcome: watukuytype.Ran, pages: 1, events: 3, delivered: 3, requests: 1, status: watukuytype.StatusIdle, circuit: watukuytype.CircuitClosed,
				nextDue: time.Second, cursor: "3"}},
		{name: "429 with Retry-After throttles, not a failure", items: 3, size: 10,
			fail: &watukuytype.HTTPError{Key: key, StatusCode: 429, URL: "http://api/x", RetryAfter: 90 * time.Second},
			want: want{outcome: watukuytype.Ran, pages: 1, requests: 1, status: watukuytype.StatusThrottled, circuit: watukuytype.CircuitClosed,
				throttled: 90 * time.Second, nextDue: 90 * time.Second}},
		{name: "503 with Retry-After throttles", items: 3, size: 10,
			fail: &watukuytype.HTTPError{Key: key, StatusCode: 503, URL: "http://api/x", RetryAfter: 20 * time.Second},
			want: want{outcome: watukuytype.Ran, pages: 1, requests: 1, status: watukuytype.StatusThrottled, circuit: watukuytype.CircuitClosed,
				throttled: 20 * time.Second, nextDue: 20 * time.Second}},
		{name: "503 without Retry-After is a failure", items: 3, size: 10,
			fail: &watukuytype.HTTPError{Key: key, StatusCode: 503, URL: "http://api/x"},
			want: want{outcome: watukuytype.Ran, pages: 1, err: "HTTP 503", requests: 1, status: watukuytype.StatusFailing, failures: 1,
				circuit: watukuytype.CircuitClosed, lastError: watukuytype.CodeFetch, nextDue: 500 * time.Millisecond}},
		{name: "inside the throttle window the key is not due", items: 3, size: 10,
			prepare: func(w *world, f *feed, eng *core.Engine) {
				f.setErr(&watukuytype.HTTPError{Key: key, StatusCode: 429, URL: "http://api/x", RetryAfter: 90 * time.Second})
				w.run(eng)
				f.setErr(nil)
				w.clock.Advance(30 * time.Second)
			},
			want: want{outcome: watukuytype.SkippedNotDue, status: watukuytype.StatusThrottled, circuit: watukuytype.CircuitClosed,
				throttled: 60 * time.Second, nextDue: 60 * time.Second}},
		{name: "a cursor stall has its own code", items: 3, size: 10,
			fail: &watukuytype.CursorStallError{Key: key, Cursor: "c", Msg: "all at the cursor"},
			want: want{outcome: watukuytype.Ran, pages: 1, err: "cursor stall", requests: 1, status: watukuytype.StatusFailing, failures: 1,
				circuit: watukuytype.CircuitClosed, lastError: watukuytype.CodeCursorStall, nextDue: 500 * time.Millisecond}},
		{name: "a config error from fetch has its own code", items: 3, size: 10,
			fail: &watukuytype.ConfigError{Poller: key.Poller, Field: "items", Msg: "not an array"},
			want: want{outcome: watukuytype.Ran, pages: 1, err: "not an array", requests: 1, status: watukuytype.StatusFailing, failures: 1,
				circuit: watukuytype.CircuitClosed, lastError: watukuytype.CodeConfig, nextDue: 500 * time.Millisecond}},
		{name: "maxPagesPerCycle truncates and leaves the key due", items: 7, size: 2,
			mod: func(p *watukuytype.Poller) { p.MaxPagesPerCycle = 2 },
			want: want{outcome: watukuytype.Ran, pages: 2, events: 4, delivered: 4, truncated: true, requests: 2, status: watukuytype.StatusIdle,
				circuit: watukuytype.CircuitClosed, nextDue: 0, cursor: "4"}},
		{name: "the cycle after a truncated one goes on from its cursor", items: 7, size: 2,
			mod:     func(p *watukuytype.Poller) { p.MaxPagesPerCycle = 2 },
			prepare: func(w *world, f *feed, eng *core.Engine) { w.run(eng) },
			want: want{outcome: watukuytype.Ran, pages: 2, events: 3, delivered: 3, requests: 2, status: watukuytype.StatusIdle,
				circuit: watukuytype.CircuitClosed, nextDue: time.Second, cursor: "7"}},
		{name: "a snapshot listing longer than maxPagesPerCycle goes on in the next cycle, due at once", items: 7, size: 2,
			mod: func(p *watukuytype.Poller) { p.MaxPagesPerCycle = 2; p.Strategy = watukuytype.SnapshotDiff },
			want: want{outcome: watukuytype.Ran, pages: 2, events: 4, delivered: 4, truncated: true, requests: 2,
				status: watukuytype.StatusIdle, circuit: watukuytype.CircuitClosed}},
		{name: "304 is idle", items: 3, size: 10,
			mod: func(p *watukuytype.Poller) { p.Fetch = notModified },
			want: want{outcome: watukuytype.Ran, pages: 1, notMod: true, status: watukuytype.StatusIdle, circuit: watukuytype.CircuitClosed,
				nextDue: 1500 * time.Millisecond}}, // Min 1s, idle ×1.5
		{name: "a paused key is skipped", items: 3, size: 10,
			prepare: func(w *world, f *feed, eng *core.Engine) {
				if err := eng.Pause(context.Background(), key); err != nil {
					w.t.Fatal(err)
				}
			},
			want: want{outcome: watukuytype.SkippedPaused, status: watukuytype.StatusPaused, circuit: watukuytype.CircuitClosed, nextDue: 5 * time.Minute}},
		{name: "a key leased by another instance is skipped", items: 3, size: 10,
			prepare: func(w *world, f *feed, eng *core.Engine) {
				b, err := w.store.Begin(context.Background(), key, "other", 30*time.Second, core.BeginForCycle)
				if err != nil || b.Status != core.BeginOK {
					w.t.Fatalf("begin: %+v %v", b, err)
				}
			},
			want: want{outcome: watukuytype.SkippedLeased, status: watukuytype.StatusRunning, circuit: watukuytype.CircuitClosed,
				nextDue: 30*time.Second + core.ClaimGrace}},
		{name: "a key not due is skipped", items: 3, size: 10,
			prepare: func(w *world, f *feed, eng *core.Engine) { w.run(eng) },
			want:    want{outcome: watukuytype.SkippedNotDue, status: watukuytype.StatusIdle, circuit: watukuytype.CircuitClosed, nextDue: time.Second, cursor: "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(tc.size)
			f.putN(tc.items)
			mod := tc.mod
			if mod == nil {
				mod = func(*watukuytype.Poller) {}
			}
			eng := w.engine(w.poller(f.fetch, mod))
			if tc.prepare != nil {
				tc.prepare(w, f, eng)
			}
			f.setErr(tc.fail)
			w.rec.take()
			before := f.requestCount()
			now := w.clock.Now()
			rep := w.run(eng)
			ki := w.inspect(eng)
			got := want{outcome: rep.Outcome, pages: rep.Pages, events: rep.Events, delivered: rep.Delivered,
				truncated: rep.Truncated, notMod: rep.NotModified, err: tc.want.err, requests: f.requestCount() - before,
				status: ki.Status, failures: ki.Failures, circuit: ki.Circuit, lastError: lastError(t, ki).Code, cursor: ki.Cursor}
			if (rep.Err == nil) != (tc.want.err == "") || rep.Err != nil && !strings.Contains(rep.Err.Error(), tc.want.err) {
				got.err = "<" + errString(rep.Err) + ">"
			}
			if ki.ThrottledUntil != nil {
				got.throttled = ki.ThrottledUntil.Sub(now)
			}
			// The due set decides when the key is claimed; the state's nextDue (absent after a
			// skip, which writes only the due set) must say the same.
			got.nextDue = w.due().Sub(now)
			if ki.NextDueAt != nil && ki.NextDueAt.Sub(now) != got.nextDue {
				t.Errorf("state nextDue in %v, due set in %v", ki.NextDueAt.Sub(now), got.nextDue)
			}
			if got != tc.want {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
			if delivered := len(w.rec.take()); delivered != rep.Delivered {
				t.Errorf("report says %d delivered, the handler accepted %d", rep.Delivered, delivered)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// lostCommitReply applies a commit that writes a Retry-After window, then reports an error as
// a read timeout would: the commit's outcome is unknown to the cycle.
type lostCommitReply struct {
	core.Store
	lost atomic.Int32
}

func (l *lostCommitReply) CommitPoll(ctx context.Context, lease core.Lease, cm core.Commit) (core.CommitResult, error) {
	r, err := l.Store.CommitPoll(ctx, lease, cm)
	if _, ok := cm.State[statehash.Throttled]; ok && err == nil {
		l.lost.Add(1)
		return core.CommitResult{}, fmt.Errorf("redisstore: commit_poll: read tcp: i/o timeout (%w)", context.DeadlineExceeded)
	}
	return r, err
}

// G8 with End deleting a default field only when the cycle's state holds it: a 429 with
// Retry-After 90 s is saved at once by a commit whose reply is lost, so the cycle never learns
// it wrote the window. (Such a cycle fails as a store error and sends no End; the lease
// lapses.) The window must survive, and no later cycle, whose Ends do run, may request inside
// it. Fails if any End deletes the window early or a cycle requests before it ends.
func TestG8WindowSavedByACommitWhoseReplyWasLost(t *testing.T) {
	w := newWorld(t)
	st := &lostCommitReply{Store: w.store}
	w.store = st
	var requests atomic.Int32
	eng := w.engine(w.poller(func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
		requests.Add(1)
		return watukuytype.Page{}, &watukuytype.HTTPError{Key: key, StatusCode: 429, URL: "http://api/x", RetryAfter: 90 * time.Second}
	}))
	start := w.clock.Now()
	rep := w.run(eng)
	t.Logf("first cycle: %v %v; commits with a lost reply: %d", rep.Outcome, rep.Err, st.lost.Load())
	if st.lost.Load() != 1 {
		t.Fatalf("the throttle commit was not made (%d)", st.lost.Load())
	}
	if w.inspect(eng).ThrottledUntil == nil {
		t.Errorf("End deleted the Retry-After window a commit of its cycle saved")
	}
	for w.clock.Now().Before(start.Add(85 * time.Second)) {
		w.clock.Advance(5 * time.Second)
		w.run(eng)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("G8: %d requests within the 90 s Retry-After window, want 1", n)
	}
	if w.inspect(eng).ThrottledUntil == nil {
		t.Errorf("a later cycle's End deleted the Retry-After window %v before it ended", w.clock.Now().Sub(start))
	}
}

// A store that answers a Begin as granted with no lease in it (zero TTL, no token): the cycle
// fails its Begin, and the worker goes on. Fails if the cycle goes on under that grant (its
// lease keeper could panic on the zero TTL) or reports something else.
func TestGrantWithoutALeaseFailsTheCycle(t *testing.T) {
	w := newWorld(t)
	w.store = noLease{w.store}
	fetched := 0
	eng := w.engine(w.poller(func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
		fetched++
		return watukuytype.Page{}, nil
	}))
	rep := eng.RunCycle(context.Background(), key)
	if rep.Err == nil || !strings.Contains(rep.Err.Error(), "without a lease") || fetched != 0 {
		t.Fatalf("cycle under a grant without a lease: outcome %v, error %v, fetched %d; want a failed Begin", rep.Outcome, rep.Err, fetched)
	}
}

// noLease answers every Begin as granted with a zero lease.
type noLease struct{ core.Store }

func (noLease) Begin(context.Context, watukuytype.Key, string, time.Duration, core.BeginMode) (core.BeginResult, error) {
	return core.BeginResult{Status: core.BeginOK}, nil
}
