package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/internal/leasectx"
	"github.com/watukuy/watukuy/watukuytype"
)

// DefaultLeaseTTL is a poller's lease TTL unless it sets one.
const DefaultLeaseTTL = 30 * time.Second

// ClaimGrace is how long a claim outlives the lease its cycle holds (or would take at once):
// a dead cycle's key is claimed again this long after its lease lapses, and a live cycle's
// renewal, sent every TTL/3, always lands before its claim lapses.
const ClaimGrace = 2 * time.Second

// leaseKeeper renews a cycle's lease every ttl/3 and after each committed page, and cancels
// the cycle as soon as the lease is lost or may have expired. Validity is counted on the
// local clock from when a confirming call was sent, never from when its reply arrived: a
// reply can come late (a GC pause, a stalled network), and the server counted from before.
type leaseKeeper struct {
	store  Store
	lease  Lease
	now    func() time.Time
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	validUntil time.Time // local clock: the last confirmation's send time + ttl

	paused atomic.Bool // a confirmation found the key paused
	over   atomic.Bool // the lease is known lost, or the cycle ended and released it

	stop     chan struct{}
	done     chan struct{} // closed when the renewals end, once they have started
	stopOnce sync.Once
	start    *time.Timer // starts the renewals at the first one's time
	started  bool        // set by close: the renewals had started (wait for done)
}

func startLeaseKeeper(ctx context.Context, s Store, l Lease, now func() time.Time, sentAt time.Time, cancel context.CancelCauseFunc) *leaseKeeper {
	k := &leaseKeeper{store: s, lease: l, now: now, cancel: cancel, validUntil: sentAt.Add(l.TTL),
		stop: make(chan struct{}), done: make(chan struct{})}
	// No goroutine until the first renewal is due: most cycles end long before.
	k.start = time.AfterFunc(l.TTL/3, func() { k.loop(ctx) })
	return k
}

// loop renews now and every ttl/3 until the keeper is closed, ctx ends or the lease is lost.
func (k *leaseKeeper) loop(ctx context.Context) {
	defer close(k.done)
	t := time.NewTicker(k.lease.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if !k.renewal(ctx) {
			return
		}
		select {
		case <-k.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renewal renews the lease and holds the key's claim on; it reports false when it cancelled
// the cycle (the lease lost, or no longer surely valid).
func (k *leaseKeeper) renewal(ctx context.Context) bool {
	c, err := k.renew(ctx)
	if err == nil {
		// Up to the renewed lease's end plus the grace, an absolute time: a hold that lands
		// late (the process frozen after the renewal, the command held in the network)
		// reaches no further than this grant's lease could, and by then another owner's
		// claim or due time is later, so it changes nothing.
		err = k.store.HoldClaim(ctx, k.lease.Key, c.Expires.Add(ClaimGrace))
	}
	if err == nil {
		return true
	}
	if watukuytype.IsLeaseLost(err) {
		k.over.Store(true)
		k.cancel(err)
		return false
	}
	if !k.valid() {
		k.cancel(&watukuytype.LeaseLostError{Key: k.lease.Key, Epoch: k.lease.Epoch, Reason: "could not renew before expiry: " + err.Error()})
		return false
	}
	return true
}

// confirm renews the lease now and records what the renewal found.
func (k *leaseKeeper) confirm(ctx context.Context) error {
	_, err := k.renew(ctx)
	return err
}

// renew is confirm returning the renewal's reply.
func (k *leaseKeeper) renew(ctx context.Context) (Confirm, error) {
	sent := k.now()
	c, err := k.store.Renew(ctx, k.lease)
	if err != nil {
		return c, k.check(err)
	}
	k.touched(sent, c.Paused)
	return c, nil
}

// touched records a fenced call (a renewal or a commit) that succeeded, sent at local time
// sent, and whether it found the key paused.
func (k *leaseKeeper) touched(sent time.Time, paused bool) {
	k.mu.Lock()
	if v := sent.Add(k.lease.TTL); v.After(k.validUntil) {
		k.validUntil = v
	}
	k.mu.Unlock()
	if paused {
		k.paused.Store(true)
	}
}

// margin is kept back from the lease's validity for clock drift between this process and
// Redis, and bounds how long a cycle goes without confirming its lease before a request.
func (k *leaseKeeper) margin() time.Duration { return k.lease.TTL / 10 }

// valid reports whether the lease is surely still ours.
func (k *leaseKeeper) valid() bool {
	if k.over.Load() {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now().Before(k.validUntil.Add(-k.margin()))
}

// check passes on a fenced call's error, recording a lost lease, so that CheckLease answers
// with it from then on.
func (k *leaseKeeper) check(err error) error {
	if watukuytype.IsLeaseLost(err) {
		k.over.Store(true)
	}
	return err
}

// stale reports whether the last confirmation is older than the margin: the process may have
// been paused since, and whatever it believes of the key (lease, pause, throttle window) is to
// be confirmed before it sends a request.
func (k *leaseKeeper) stale() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now().Sub(k.validUntil.Add(-k.lease.TTL)) > k.margin()
}

// close stops the renewals and waits for one in flight; the cycle is over, and so is what
// CheckLease allows. A cycle closes it before End: a claim hold landing after End wrote the
// key's next due time would push that time back.
func (k *leaseKeeper) close() {
	k.over.Store(true)
	k.stopOnce.Do(func() {
		close(k.stop)
		k.started = !k.start.Stop() // stopped in time: the renewals never start
	})
	if k.started {
		<-k.done
	}
}

// withLeaseCheck returns ctx carrying the keeper's check, for the requests and handler calls
// made with it.
func (k *leaseKeeper) withLeaseCheck(ctx context.Context) context.Context {
	return leasectx.With(ctx, func() error {
		if !k.valid() {
			return &watukuytype.LeaseLostError{Key: k.lease.Key, Epoch: k.lease.Epoch, Reason: "the lease may have expired (a pause past its validity)"}
		}
		return nil
	})
}
