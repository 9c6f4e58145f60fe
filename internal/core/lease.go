package core

import (
	"context"
	"sync"
	"time"
)

// leaseKeeper renews a cycle's lease every ttl/3 and after each committed page, and cancels
// the cycle as soon as the lease is lost or may have expired.
type leaseKeeper struct {
	store  Store
	lease  Lease
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	validUntil time.Time // local monotonic clock: last renewal's send time + ttl

	stop chan struct{}
	done chan struct{}
}

func startLeaseKeeper(ctx context.Context, s Store, l Lease, acquiredAt time.Time, cancel context.CancelCauseFunc) *leaseKeeper {
	k := &leaseKeeper{store: s, lease: l, cancel: cancel, validUntil: acquiredAt.Add(l.TTL),
		stop: make(chan struct{}), done: make(chan struct{})}
	go k.loop(ctx)
	return k
}

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
		case <-t.C:
			sent := time.Now()
			_, err := k.store.Renew(ctx, k.lease)
			switch {
			case err == nil:
				k.touched(sent)
			case IsLeaseLost(err):
				k.cancel(err)
				return
			case !k.valid():
				k.cancel(&LeaseLostError{Key: k.lease.Key, Epoch: k.lease.Epoch, Reason: "could not renew before expiry: " + err.Error()})
				return
			}
		}
	}
}

// touched records a successful renewal (or commit) sent at local time sent.
func (k *leaseKeeper) touched(sent time.Time) {
	k.mu.Lock()
	if v := sent.Add(k.lease.TTL); v.After(k.validUntil) {
		k.validUntil = v
	}
	k.mu.Unlock()
}

// valid reports whether the lease is surely still ours, with a tenth of the TTL as margin
// for clock drift between this process and Redis.
func (k *leaseKeeper) valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return time.Now().Before(k.validUntil.Add(-k.lease.TTL / 10))
}

func (k *leaseKeeper) close() {
	close(k.stop)
	<-k.done
}
