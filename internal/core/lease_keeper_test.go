package core

// The lease keeper, whose renewals start at the first one's time (no goroutine before): close
// before, during and after the first renewal, a slow Redis, a cycle much longer than the TTL,
// concurrent closes. Each test fails if the keeper renews or holds the claim after close
// returned, if close deadlocks, or if a long cycle stops renewing.

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// keeperStore records Renew and HoldClaim calls; renew blocks for delay (or until ctx ends).
type keeperStore struct {
	Store // nil: any other call panics
	delay time.Duration

	mu       sync.Mutex
	closed   bool          // set by the test once close returned
	late     []string      // calls that started or ended after close returned
	renews   []time.Time   // when each renewal started
	inFlight atomic.Int32  // renewals running now
	entered  chan struct{} // signalled when a renewal starts (nil: none)
}

func (s *keeperStore) mark(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.late = append(s.late, what)
	}
}

func (s *keeperStore) Renew(ctx context.Context, l Lease) (Confirm, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.mark("renew start")
	s.mu.Lock()
	s.renews = append(s.renews, time.Now())
	ch := s.entered
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return Confirm{}, ctx.Err()
		}
	}
	s.mark("renew end")
	return Confirm{Expires: time.Now().Add(l.TTL)}, nil
}

func (s *keeperStore) HoldClaim(ctx context.Context, key watukuytype.Key, until time.Time) error {
	s.mark("holdClaim")
	return nil
}

func (s *keeperStore) setClosed() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func (s *keeperStore) lateCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.late...)
}

func keeperLease(ttl time.Duration) Lease {
	return Lease{Key: watukuytype.Key{Poller: "orders", Partition: "adv"}, Owner: "w", Epoch: 1, Token: "t", TTL: ttl}
}

// closeWithin runs k.close and fails the test if it does not return within d (a deadlock).
func closeWithin(t *testing.T, k *leaseKeeper, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { k.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("close did not return within %v (deadlock)", d)
	}
}

// Closed before the first renewal is due: no goroutine runs meanwhile and nothing is ever
// sent. Fails if the keepers start a goroutine each, or a renewal or hold lands after close.
func TestLeaseKeeperClosedBeforeFirstRenewalSendsNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	st := &keeperStore{}
	const n = 200
	ks := make([]*leaseKeeper, n)
	for i := range ks {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		ks[i] = startLeaseKeeper(ctx, st, keeperLease(time.Minute), time.Now, time.Now(), cancel)
	}
	if g := runtime.NumGoroutine(); g > before+n/4 {
		t.Fatalf("goroutines: %d before, %d with %d keepers not yet due to renew", before, g, n)
	}
	for _, k := range ks {
		closeWithin(t, k, time.Second)
	}
	st.setClosed()
	if late := st.lateCalls(); len(late) > 0 {
		t.Fatalf("calls after close: %v", late)
	}
	if len(st.renews) != 0 {
		t.Fatalf("%d renewals for keepers closed before TTL/3", len(st.renews))
	}
}

// close racing the timer's firing (TTL/3 of a few ms, thousands of times, two closes at
// once as finish and its defer may do): close never deadlocks, and once it returned no
// renewal or claim hold starts. Run with -race: started is written and read under stopOnce.
func TestLeaseKeeperCloseRacingFirstRenewal(t *testing.T) {
	st := &keeperStore{}
	for i := 0; i < 3000; i++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		k := startLeaseKeeper(ctx, st, keeperLease(time.Duration(1+i%9)*time.Millisecond), time.Now, time.Now(), cancel)
		time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { closeWithin(t, k, 2*time.Second) })
		}
		wg.Wait()
		// Both closes returned: no renewal may be running or start from now on.
		if n := st.inFlight.Load(); n != 0 {
			t.Fatalf("iteration %d: %d renewals in flight after close returned", i, n)
		}
		cancel(nil)
	}
	st.setClosed()
	time.Sleep(20 * time.Millisecond)
	if late := st.lateCalls(); len(late) > 0 {
		t.Fatalf("calls after close: %v", late)
	}
}

// A renewal in flight on a slow Redis when the cycle ends: close waits for it (and its claim
// hold), so nothing lands after End. Fails if close returns while the renewal runs.
func TestLeaseKeeperCloseWaitsForSlowRenewal(t *testing.T) {
	st := &keeperStore{delay: 150 * time.Millisecond, entered: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	k := startLeaseKeeper(ctx, st, keeperLease(30*time.Millisecond), time.Now, time.Now(), cancel)
	select {
	case <-st.entered:
	case <-time.After(time.Second):
		t.Fatal("no renewal started")
	}
	closeWithin(t, k, 2*time.Second)
	if n := st.inFlight.Load(); n != 0 {
		t.Fatalf("close returned with %d renewal(s) in flight", n)
	}
	st.setClosed()
	time.Sleep(50 * time.Millisecond)
	if late := st.lateCalls(); len(late) > 0 {
		t.Fatalf("calls after close: %v", late)
	}
}

// A cycle that lasts many TTLs goes on renewing, the first renewal no sooner than TTL/3, and
// is never cancelled. Fails if the timer start skips the renewals that follow the first.
func TestLeaseKeeperRenewsThroughALongCycle(t *testing.T) {
	st := &keeperStore{}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ttl := 300 * time.Millisecond
	start := time.Now()
	k := startLeaseKeeper(ctx, st, keeperLease(ttl), time.Now, start, cancel)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		n := len(st.renews)
		st.mu.Unlock()
		if n >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in 10 s (TTL %v)", n, ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatalf("cycle cancelled: %v", context.Cause(ctx))
	}
	closeWithin(t, k, time.Second)
	st.mu.Lock()
	defer st.mu.Unlock()
	if first := st.renews[0].Sub(start); first < ttl/3 {
		t.Fatalf("first renewal %v after the start, before TTL/3 (%v)", first, ttl/3)
	}
}

// A Redis so slow that a renewal takes longer than the lease's validity: the cycle's checks
// (valid, before each request and handler call) refuse past the TTL, and close waits the slow
// renewal out without deadlocking. Fails if valid() stays true unrenewed past the TTL.
func TestLeaseKeeperRenewSlowerThanTTLIsInvalid(t *testing.T) {
	ttl := 60 * time.Millisecond
	st := &keeperStore{delay: 10 * ttl}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	start := time.Now()
	k := startLeaseKeeper(ctx, st, keeperLease(ttl), time.Now, start, cancel)
	time.Sleep(ttl + ttl/5)
	if k.valid() {
		t.Fatalf("valid() true %v after the last confirmation (TTL %v)", time.Since(start), ttl)
	}
	closeWithin(t, k, 2*time.Second)
}
