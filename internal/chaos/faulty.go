package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// KillPoint names the exact call at which a FaultyStore "crashes" its engine.
type KillPoint string

// The kill points (docs/design.md, Kill points).
const (
	K1BeforeAcquire KillPoint = "K1-before-acquire" // Begin is never sent
	K2AfterFetch    KillPoint = "K2-after-fetch"    // a page was fetched; its commit is never sent
	K3AfterCommit   KillPoint = "K3-after-commit"   // the commit is written; nothing is delivered
	K4AfterPark     KillPoint = "K4-after-park"     // a poison event was parked; the acks of the events delivered before it are never sent
	K4BeforeAck     KillPoint = "K4-before-ack"     // events were delivered; the ack is never sent
	K5AfterAck      KillPoint = "K5-after-ack"      // the ack is written; the schedule is not
	K6BeforeEnd     KillPoint = "K6-before-end"     // after the acks, the end is never sent
	K7DuringRelease KillPoint = "K7-during-release" // the end is written; the process dies on its way out
)

// KillPoints lists every kill point.
func KillPoints() []KillPoint {
	return []KillPoint{K1BeforeAcquire, K2AfterFetch, K3AfterCommit, K4AfterPark, K4BeforeAck, K5AfterAck, K6BeforeEnd, K7DuringRelease}
}

// ErrKilled is what every call of a killed store returns.
var ErrKilled = errors.New("chaos: process killed")

// FaultyStore wraps the real store of one engine instance. Once an armed kill point fires,
// the store is dead: every later call fails without reaching Redis, as if the process had
// died at that exact call. It also records grants, commits, accepted writes and parked ids.
type FaultyStore struct {
	core.Store
	Instance string
	Rec      *Recorder
	Clock    func() time.Time
	// BeforeBegin and AfterBegin, when set, run around every Begin that reaches Redis: the
	// scenario makes a grant's reply late, or loses the grant (a failover) and freezes the
	// instance.
	BeforeBegin func(key watukuytype.Key)
	AfterBegin  func(key watukuytype.Key, b core.BeginResult, err error)

	mu       sync.Mutex
	armed    KillPoint
	armedKey *watukuytype.Key
	fired    KillPoint
}

// Arm makes the next call at p kill the store.
func (f *FaultyStore) Arm(p KillPoint) {
	f.mu.Lock()
	f.armed, f.armedKey = p, nil
	f.mu.Unlock()
}

// ArmFor makes the next call at p for key kill the store.
func (f *FaultyStore) ArmFor(p KillPoint, key watukuytype.Key) {
	f.mu.Lock()
	f.armed, f.armedKey = p, &key
	f.mu.Unlock()
}

// Killed returns the kill point that fired, or "".
func (f *FaultyStore) Killed() KillPoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// at reports whether the store is dead, or dies now at point p of a call for key.
func (f *FaultyStore) at(p KillPoint, key watukuytype.Key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fired != "" {
		return true
	}
	if p != "" && f.armed == p && (f.armedKey == nil || *f.armedKey == key) {
		f.fired = p
		return true
	}
	return false
}

func (f *FaultyStore) dead() bool { return f.at("", watukuytype.Key{}) }

func (f *FaultyStore) now() time.Time {
	if f.Clock != nil {
		return f.Clock()
	}
	return time.Now()
}

// write runs a fenced call and records it when accepted; call returns the lease's new expiry
// when it renewed the lease.
func (f *FaultyStore) write(op string, l core.Lease, before, after KillPoint, call func() (time.Time, error)) error {
	if f.at(before, l.Key) {
		return ErrKilled
	}
	n, start := f.Rec.Next(), f.now()
	exp, err := call()
	if err != nil {
		return err
	}
	f.Rec.Wrote(Write{Instance: f.Instance, Op: op, Key: l.Key, Epoch: l.Epoch, Token: l.Token, Start: start, Expires: exp, N: n})
	// The write happened: record it whatever happens next. With no kill point after it, a
	// kill that fired meanwhile in another of the engine's cycles ends this one at its next call.
	if after != "" && f.at(after, l.Key) {
		return ErrKilled
	}
	return nil
}

// Begin implements core.Store.
func (f *FaultyStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, mode core.BeginMode) (core.BeginResult, error) {
	if f.at(K1BeforeAcquire, key) {
		return core.BeginResult{}, ErrKilled
	}
	if f.BeforeBegin != nil {
		f.BeforeBegin(key)
	}
	b, err := f.Store.Begin(ctx, key, owner, ttl, mode)
	if err == nil && b.Status == core.BeginOK {
		f.Rec.Granted(Grant{Instance: f.Instance, Key: key, Epoch: b.Lease.Epoch, Token: b.Lease.Token, At: f.now(), Expires: b.Now.Add(ttl)})
	}
	if f.AfterBegin != nil {
		f.AfterBegin(key, b, err)
	}
	return b, err
}

// CommitPoll implements core.Store.
func (f *FaultyStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	var res core.CommitResult
	err := f.write("commitPoll", l, K2AfterFetch, K3AfterCommit, func() (time.Time, error) {
		var err error
		if res, err = f.Store.CommitPoll(ctx, l, c); err != nil {
			return time.Time{}, err
		}
		if v, ok := c.State[statehash.Throttled]; ok {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				f.Rec.Throttled(Throttle{Instance: f.Instance, Key: l.Key, From: f.now(), To: time.UnixMilli(ms)})
			}
		}
		if len(c.Events) == 0 {
			return res.LeaseExpires, nil
		}
		evs := make([]watukuytype.Event, len(c.Events))
		oks := make([]string, len(c.Events))
		for i, e := range c.Events {
			_ = json.Unmarshal(e.Envelope, &evs[i])
			evs[i].Seq, oks[i] = res.StreamIDs[i], e.OrderingKey
		}
		f.Rec.Committed(Commit{Instance: f.Instance, Key: l.Key, Epoch: l.Epoch, Events: evs, OrderingKeys: oks, At: f.now()})
		return res.LeaseExpires, nil
	})
	if err != nil {
		return core.CommitResult{}, err
	}
	return res, nil
}

// Ack implements core.Store.
func (f *FaultyStore) Ack(ctx context.Context, l core.Lease, acked []core.Entry) (bool, error) {
	var paused bool
	err := f.write("ack", l, K4BeforeAck, K5AfterAck, func() (time.Time, error) {
		var err error
		if paused, err = f.Store.Ack(ctx, l, acked); err == nil {
			f.Rec.Acked(f.Instance, l.Key, acked)
		}
		return time.Time{}, err
	})
	return paused, err
}

// End implements core.Store. The next key's Begin sent along with End (a worker's task) meets
// the kill point before acquiring, and its grant is recorded, as a Begin of its own would.
func (f *FaultyStore) End(ctx context.Context, l core.Lease, e core.EndRequest) error {
	if n := e.Next; n != nil && f.at(K1BeforeAcquire, n.Key) {
		e.Next = nil
	}
	err := f.write("end", l, K6BeforeEnd, K7DuringRelease, func() (time.Time, error) { return time.Time{}, f.Store.End(ctx, l, e) })
	if n := e.Next; n.Granted() {
		b := n.Result
		f.Rec.Granted(Grant{Instance: f.Instance, Key: n.Key, Epoch: b.Lease.Epoch, Token: b.Lease.Token, At: f.now(), Expires: b.Now.Add(n.TTL)})
	}
	return err
}

// Renew implements core.Store.
func (f *FaultyStore) Renew(ctx context.Context, l core.Lease) (core.Confirm, error) {
	var c core.Confirm
	err := f.write("renew", l, "", "", func() (time.Time, error) {
		var err error
		c, err = f.Store.Renew(ctx, l)
		return c.Expires, err
	})
	return c, err
}

// ReadOutbox implements core.Store.
func (f *FaultyStore) ReadOutbox(ctx context.Context, l core.Lease, n int) (core.Batch, error) {
	var out core.Batch
	err := f.write("readOutbox", l, "", "", func() (time.Time, error) {
		var err error
		out, err = f.Store.ReadOutbox(ctx, l, n)
		return time.Time{}, err
	})
	return out, err
}

// Park implements core.Store.
func (f *FaultyStore) Park(ctx context.Context, l core.Lease, p core.Parking) error {
	return f.write("park", l, "", K4AfterPark, func() (time.Time, error) {
		if err := f.Store.Park(ctx, l, p); err != nil {
			return time.Time{}, err
		}
		for _, p := range p.Poison {
			f.Rec.Parked(p.ParkedID)
		}
		for _, h := range p.Held {
			var e struct{ ID string }
			_ = json.Unmarshal(h.JSON, &e)
			f.Rec.Parked(e.ID)
		}
		return time.Time{}, nil
	})
}

// ReleaseParked implements core.Store.
func (f *FaultyStore) ReleaseParked(ctx context.Context, l core.Lease, retry bool, ids []string) (int, int, error) {
	var a, b int
	err := f.write("releaseParked", l, "", "", func() (time.Time, error) {
		var err error
		a, b, err = f.Store.ReleaseParked(ctx, l, retry, ids)
		if err == nil && !retry {
			f.Rec.Discarded(ids...)
		}
		return time.Time{}, err
	})
	return a, b, err
}

// The unfenced calls of a dead process never reach Redis either.

// ClaimDue implements core.Store.
func (f *FaultyStore) ClaimDue(ctx context.Context, limit int, claimTimeout time.Duration, pollers []string) ([]watukuytype.Key, error) {
	if f.dead() {
		return nil, ErrKilled
	}
	return f.Store.ClaimDue(ctx, limit, claimTimeout, pollers)
}

// LoadRows implements core.Store.
func (f *FaultyStore) LoadRows(ctx context.Context, key watukuytype.Key, ids []string, want core.LoadWant) (core.StoredRows, error) {
	if f.dead() {
		return core.StoredRows{}, ErrKilled
	}
	return f.Store.LoadRows(ctx, key, ids, want)
}

// SetDue implements core.Store.
func (f *FaultyStore) SetDue(ctx context.Context, key watukuytype.Key, at time.Time) error {
	if f.dead() {
		return ErrKilled
	}
	return f.Store.SetDue(ctx, key, at)
}

// TakeToken implements core.Store, recording the tokens given (a held token once, when it is
// first given).
func (f *FaultyStore) TakeToken(ctx context.Context, t core.BudgetTake) (core.BudgetGrant, error) {
	if f.dead() {
		return core.BudgetGrant{}, ErrKilled
	}
	g, err := f.Store.TakeToken(ctx, t)
	if err == nil && g.Taken && !g.Held {
		f.Rec.Took(Take{Instance: f.Instance, Key: t.Key, Bucket: t.Bucket, Slot: g.At.Add(g.Wait)})
	}
	return g, err
}
