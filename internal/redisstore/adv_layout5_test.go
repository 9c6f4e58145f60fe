package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// layout4Store is a store under prefix on a real redis-server whose data is recorded as
// layout 4 (one registered key), with a test clock.
func layout4Store(t *testing.T, prefix string) (*Store, redistest.Backend, *fakeclock.Clock) {
	t.Helper()
	b := redistest.Real(t)
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	s, err := New(b.Client, Options{Prefix: prefix, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Client.Set(ctx, s.layoutKey(), "4", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.HSet(ctx, s.registryKey(), "orders|t1", `{"source":"config"}`).Err(); err != nil {
		t.Fatal(err)
	}
	return s, b, clk
}

// Migrate 4→5 with a prefix that holds a glob character ('[', '*', '?' or '\'; New refuses
// only braces) folds every lease hash, a live grant's and a deleted partition's alike: the
// SCAN pattern escapes the prefix. (Found by the adversarial review: unescaped, "wk[eu]"
// matched "wke:{…}" and "wku:{…}", never "wk[eu]:{…}"; migrate folded nothing, so a live
// layout-4 grant was invisible to Inspect and LeaseLive until some Begin folded it.)
func TestAdv5MigrateFoldsUnderAGlobPrefix(t *testing.T) {
	s, b, clk := layout4Store(t, "wk[eu]")
	ctx := context.Background()
	live := watukuytype.Key{Poller: "orders", Partition: "t1"}
	gone := watukuytype.Key{Poller: "orders", Partition: "t2"}
	now := clk.Now().UnixMilli()
	if err := b.Client.HSet(ctx, s.Key(live, "lease"), "epoch", 7, "token", "0123456789abcdef01234567", "owner", "w4",
		"expiresAt", now+60_000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.HSet(ctx, s.Key(gone, "lease"), "epoch", 9, "token", "fedcba9876543210fedcba98", "write", 3).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.HSet(ctx, s.Key(gone, "state"), statehash.Deleted, "1", statehash.Incarnation, "5").Err(); err != nil {
		t.Fatal(err)
	}
	m, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrate: %+v", m)
	for _, k := range []watukuytype.Key{live, gone} {
		if n := b.Client.Exists(ctx, s.Key(k, "lease")).Val(); n != 0 {
			t.Errorf("after migrate to layout 5, %s still exists (not folded)", s.Key(k, "lease"))
		}
	}
	if e := b.Client.HGet(ctx, s.Key(gone, "state"), statehash.LeaseEpoch).Val(); e != "9" {
		t.Errorf("the deleted partition's state holds epoch %q after migrate, want 9", e)
	}
	snap, err := s.Inspect(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	if snap.LeaseOwner != "w4" || snap.LeaseEpoch != 7 || snap.LeaseExpires.UnixMilli() != now+60_000 {
		t.Errorf("inspect of a key with a live layout-4 grant after migrate: owner %q epoch %d expires %v; want w4, 7, %d",
			snap.LeaseOwner, snap.LeaseEpoch, snap.LeaseExpires.UnixMilli(), now+60_000)
	}
	if ok, err := s.LeaseLive(ctx, live); err != nil || !ok {
		t.Errorf("LeaseLive of a key with a live layout-4 grant after migrate: %v, %v; want true", ok, err)
	}
}

// The fold with a live layout-5 lease in the state and a layout-4 hash of a higher epoch
// (written by a layout-4 process still running after migrate, whose Begin never sees the
// state's lease: it HINCRBYs the hash the fold deleted and grants itself epochs 1, 2, 3 …
// while a layout-5 holder holds epoch 1). The fold takes the higher epoch, which cuts off the
// live layout-5 holder too (its End is LEASE_LOST); the key stays leased until that grant
// would have lapsed, and the next grant is above every epoch either layout gave. (Found by
// the adversarial review: the fold kept the state's epoch while its lease was live, so the
// next grant repeated an epoch the layout-4 process had held.)
func TestAdv5FoldIntoALiveStateLeaseKeepsTheHigherEpoch(t *testing.T) {
	s, b, _ := layout4Store(t, "wk")
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := watukuytype.Key{Poller: "orders", Partition: "t1"}
	first, err := s.Begin(ctx, key, "w5", 30*time.Second, core.BeginForDelete)
	if err != nil || first.Status != core.BeginOK {
		t.Fatalf("begin: %+v %v", first, err)
	}
	// A layout-4 worker took (and released) epochs 1..3 in the hash meanwhile.
	if err := b.Client.HSet(ctx, s.Key(key, "lease"), "epoch", first.Lease.Epoch+2, "token", "0123456789abcdef01234567",
		"write", 4).Err(); err != nil {
		t.Fatal(err)
	}
	// Another layout-5 Begin folds the hash while the first grant lives (it answers leased).
	if r, err := s.Begin(ctx, key, "w5b", 30*time.Second, core.BeginForDelete); err != nil || r.Status != core.BeginLeased {
		t.Fatalf("second begin: %+v %v", r, err)
	}
	if err := s.End(ctx, first.Lease, core.EndRequest{NextDue: time.UnixMilli(1)}); !watukuytype.IsLeaseLost(err) {
		t.Fatalf("the layout-5 holder's End after the fold raised the epoch: %v, want LEASE_LOST (cut off)", err)
	}
	if r, err := s.Begin(ctx, key, "w5c", 30*time.Second, core.BeginForDelete); err != nil || r.Status != core.BeginLeased {
		t.Fatalf("a begin while the cut-off grant would still live: %+v %v, want leased", r, err)
	}
	// That grant lapses.
	if err := b.Client.HSet(ctx, s.Key(key, "state"), statehash.LeaseExpires, 1).Err(); err != nil {
		t.Fatal(err)
	}
	next, err := s.Begin(ctx, key, "w5", 30*time.Second, core.BeginForDelete)
	if err != nil || next.Status != core.BeginOK {
		t.Fatalf("third begin: %+v %v", next, err)
	}
	if next.Lease.Epoch <= first.Lease.Epoch+2 {
		t.Errorf("the grant after the fold has epoch %d, not above the layout-4 hash's %d: the fold lowered the epoch",
			next.Lease.Epoch, first.Lease.Epoch+2)
	}
	if e := b.Client.HGet(ctx, s.Key(key, "state"), statehash.LeaseEpoch).Val(); e != strconv.FormatInt(next.Lease.Epoch, 10) {
		t.Fatalf("state epoch %q", e)
	}
}
