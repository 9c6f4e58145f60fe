package redisstore

// begin.lua: the reply it builds from its one read of the state, epochs above the poller's
// high-water marks, and the first Begin that reads its seed from the registry in its own
// script on one server (and where the registry is elsewhere).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// replyMirrorsState checks that a granted Begin's reply state is exactly the state hash after
// the Begin without the lease's fields, and that the grant left no write id behind.
func replyMirrorsState(t *testing.T, b redistest.Backend, s *Store, r core.BeginResult, what string) {
	t.Helper()
	ctx := context.Background()
	all := b.Client.HGetAll(ctx, s.Key(r.Lease.Key, "state")).Val()
	want := map[string]string{}
	for k, v := range all {
		if !statehash.IsLeaseField(k) {
			want[k] = v
		}
	}
	if !maps.Equal(r.State, want) {
		t.Errorf("%s: reply state %v, the hash without its lease %v", what, r.State, want)
	}
	for k := range r.State {
		if statehash.IsLeaseField(k) {
			t.Errorf("%s: reply state carries lease field %q", what, k)
		}
	}
	if w, ok := all["write"]; ok && w != "0" { // 0: no write of this grant yet
		t.Errorf("%s: the grant kept a write id %q", what, w)
	}
	if all["epoch"] != strconv.FormatInt(r.Lease.Epoch, 10) || all["token"] != r.Lease.Token {
		t.Errorf("%s: the hash holds epoch %q token %q, the reply %d %q", what, all["epoch"], all["token"], r.Lease.Epoch, r.Lease.Token)
	}
}

// The reply's state fields, built from the script's in-memory table, are the state hash
// after the grant without the lease: a first Begin over leftovers (a trigger, a stale write
// id and reply), a re-sent Begin, a delete (deleted mirrored), an add over a forgotten
// deletion (DEL and incarnation mirrored), an op.
func TestBeginReplyStateIsTheHashWithoutTheLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		registerListing(t, s, "a", "b")
		a := watukuytype.Key{Poller: "orders", Partition: "a"}
		if err := s.Trigger(ctx, a); err != nil {
			t.Fatal(err)
		}
		b.Client.HSet(ctx, s.Key(a, "state"), "foo", "bar", "write", "7", "reply", "9 9")
		r := beginOK(t, s, a, core.BeginForCycle)
		replyMirrorsState(t, b, s, r, "first cycle over leftovers")
		if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: r.Now, Trigger: r.State["trig"]}); err != nil {
			t.Fatal(err)
		}

		op := beginOK(t, s, a, core.BeginForOp)
		replyMirrorsState(t, b, s, op, "op")
		if err := s.End(ctx, op.Lease, core.EndRequest{NextDue: op.Now, Trigger: op.State["trig"]}); err != nil {
			t.Fatal(err)
		}

		del := beginOK(t, s, a, core.BeginForDelete)
		replyMirrorsState(t, b, s, del, "delete")
		if del.State["deleted"] != "1" {
			t.Errorf("delete: reply state %v without deleted=1", del.State)
		}
		if err := s.DeleteKey(ctx, del.Lease); err != nil {
			t.Fatal(err)
		}
		expire(t, b, s.Key(a, "state"), s.markTTL)
		// A stale pause racing the deletion leaves a state without an epoch; the add drops it.
		b.Client.HSet(ctx, s.Key(a, "state"), "paused", "1", "foo", "bar", "write", "3")
		add := beginOK(t, s, a, core.BeginForAdd)
		replyMirrorsState(t, b, s, add, "add over a forgotten deletion")
		if add.State["paused"] != "" || add.State["foo"] != "" || add.State["incarnation"] == "" {
			t.Errorf("add over a forgotten deletion: reply state %v, want the leftovers gone and an incarnation", add.State)
		}
		if add.Lease.Epoch <= del.Lease.Epoch {
			t.Errorf("add: epoch %d, the deleted key reached %d", add.Lease.Epoch, del.Lease.Epoch)
		}

		b.Client.AddHook(resend{})
		k := watukuytype.Key{Poller: "orders", Partition: "b"}
		rs := beginOK(t, s, k, core.BeginForCycle)
		replyMirrorsState(t, b, s, rs, "re-sent first Begin")
		// b was never begun: one above the mark a's deletion raised (a's delete epoch), taken once.
		if rs.Lease.Epoch != del.Lease.Epoch+1 {
			t.Errorf("re-sent first Begin: epoch %d, want %d (above the mark, taken once)", rs.Lease.Epoch, del.Lease.Epoch+1)
		}
	})
}

// G2: a never-begun key of a poller whose deleted keys reached a 15-digit epoch (above Lua
// 5.1's tostring precision, %.14g) starts exactly one above it; the epoch is written as
// digits, and the lease's fenced writes pass.
func TestG2FirstBeginAboveA15DigitMark(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "a")
		const mark = 123456789012345
		if err := b.Client.HSet(ctx, s.retiredKey(), "orders", strconv.FormatInt(mark, 10)+" 0").Err(); err != nil {
			t.Fatal(err)
		}
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		for i := int64(1); i <= 3; i++ {
			r := beginOK(t, s, key, core.BeginForCycle)
			if got := b.Client.HGet(ctx, s.Key(key, "state"), "epoch").Val(); r.Lease.Epoch != mark+i || got != strconv.FormatInt(mark+i, 10) {
				t.Fatalf("grant %d: epoch %d, stored %q; want %d", i, r.Lease.Epoch, got, mark+i)
			}
			if _, err := s.CommitPoll(ctx, r.Lease, core.Commit{Events: []core.OutboxEvent{{ID: "e" + strconv.FormatInt(i, 10), OrderingKey: "o", Envelope: []byte(`{}`)}}}); err != nil {
				t.Fatalf("grant %d: commit: %v", i, err)
			}
			if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"]}); err != nil {
				t.Fatalf("grant %d: end: %v", i, err)
			}
		}
	})
}

// G2/G5: an epoch past 2^53 still grows (HINCRBY is exact where a Lua double is not).
func TestG2EpochPast2To53StillGrows(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		registerListing(t, s, "a")
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		const big = "9007199254740993" // 2^53 + 1
		if err := b.Client.HSet(ctx, s.Key(key, "state"), "epoch", big).Err(); err != nil {
			t.Fatal(err)
		}
		r := beginOK(t, s, key, core.BeginForCycle)
		stored := b.Client.HGet(ctx, s.Key(key, "state"), "epoch").Val()
		if n, _ := strconv.ParseInt(stored, 10, 64); n <= 9007199254740993 || r.Lease.Epoch != n {
			t.Fatalf("epoch %s before the grant, %s after it (reply %d): it must grow", big, stored, r.Lease.Epoch)
		}
	})
}

// G2 with the client re-sending every script: partitions add of a forgotten deleted key and
// its first cycle each take one grant above the poller's high-water mark, and a re-sent
// commit of that grant is recognised by its write id (fence after the grant's HDEL write).
func TestG2ResentBeginsAfterAForgottenDeletion(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		registerListing(t, s, "cfg")
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, key)
		var reached int64
		for range 3 {
			r := beginOK(t, s, key, core.BeginForCycle)
			reached = r.Lease.Epoch
			if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"]}); err != nil {
				t.Fatal(err)
			}
		}
		deleteKey(t, s, key)
		expire(t, b, s.Key(key, "state"), s.markTTL)
		var markEpoch int64
		if f := strings.Fields(b.Client.HGet(ctx, s.retiredKey(), "orders").Val()); len(f) == 2 {
			markEpoch, _ = strconv.ParseInt(f[0], 10, 64)
		}
		if markEpoch <= reached {
			t.Fatalf("high-water mark %d, the key reached %d", markEpoch, reached)
		}
		b.Client.AddHook(resend{})
		add, err := s.Begin(ctx, key, "op", 30*time.Second, core.BeginForAdd)
		if err != nil || add.Status != core.BeginOK || add.Lease.Epoch != markEpoch+1 {
			t.Fatalf("re-sent add Begin: %s epoch %d %v; want ok, epoch %d", statusName(add.Status), add.Lease.Epoch, err, markEpoch+1)
		}
		if _, err := s.AddKey(ctx, add.Lease, add.State["deleted"] == "1"); err != nil {
			t.Fatal(err)
		}
		if err := s.End(ctx, add.Lease, core.EndRequest{NextDue: add.Now, Trigger: add.State["trig"]}); err != nil {
			t.Fatal(err)
		}
		c := beginOK(t, s, key, core.BeginForCycle)
		if c.Lease.Epoch != markEpoch+2 {
			t.Fatalf("re-sent cycle Begin: epoch %d, want %d", c.Lease.Epoch, markEpoch+2)
		}
		res, err := s.CommitPoll(ctx, c.Lease, core.Commit{Events: []core.OutboxEvent{{ID: "e", OrderingKey: "o", Envelope: []byte(`{}`)}}})
		if err != nil {
			t.Fatalf("re-sent commit after the grant: %v", err)
		}
		if n := b.Client.XLen(ctx, s.Key(key, "outbox")).Val(); n != 1 || len(res.StreamIDs) != 1 {
			t.Fatalf("re-sent commit: outbox holds %d entries, ids %v; want the one event once", n, res.StreamIDs)
		}
	})
}

// A cycle's End carrying the next key's first Begin: on one server that Begin reads its seed
// itself; a key the registry does not hold is answered deleted and what a racing trigger left
// of it goes; a registered one starts above the poller's high-water mark.
func TestEndCarriesFirstBeginsThatReadTheirSeed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "a", "b")
		if err := b.Client.HSet(ctx, s.retiredKey(), "orders", "41 0").Err(); err != nil {
			t.Fatal(err)
		}
		a := watukuytype.Key{Poller: "orders", Partition: "a"}
		gone := watukuytype.Key{Poller: "orders", Partition: "gone"}
		// What a trigger racing its deletion could leave (an older trigger wrote it there).
		if err := b.Client.HSet(ctx, s.Key(gone, "state"), "nextDue", "0", "trig", "1").Err(); err != nil {
			t.Fatal(err)
		}
		r := beginOK(t, s, a, core.BeginForCycle)
		if r.Lease.Epoch != 42 {
			t.Fatalf("first Begin: epoch %d, want 42 (above the mark 41)", r.Lease.Epoch)
		}
		n := &core.NextBegin{Key: gone, Owner: "w", TTL: time.Minute, At: clk.Now()}
		if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"], Next: n}); err != nil {
			t.Fatal(err)
		}
		if !n.Sent || n.Err != nil || n.Result.Status != core.BeginDeleted {
			t.Fatalf("next Begin of an unregistered key: sent %v %s %v, want deleted", n.Sent, statusName(n.Result.Status), n.Err)
		}
		if x := b.Client.Exists(ctx, s.Key(gone, "state")).Val(); x != 0 {
			t.Fatal("the trigger's leftovers of an unregistered key stayed")
		}
		r = beginOK(t, s, a, core.BeginForCycle)
		n = &core.NextBegin{Key: watukuytype.Key{Poller: "orders", Partition: "b"}, Owner: "w", TTL: time.Minute, At: clk.Now()}
		if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"], Next: n}); err != nil {
			t.Fatal(err)
		}
		if !n.Granted() || n.Result.Lease.Epoch != 42 {
			t.Fatalf("next Begin of a registered key: %s epoch %d %v, want ok, epoch 42", statusName(n.Result.Status), n.Result.Lease.Epoch, n.Err)
		}
	})
}

// clusterModeNode starts a redis-server in cluster mode owning every slot, for a plain
// *redis.Client: as a redis:// URL to a managed cluster-mode endpoint is reached.
func clusterModeNode(t *testing.T) redistest.Backend {
	t.Helper()
	b := redistest.RealTCP(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	if err := b.Client.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.Client.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if time.Now().After(deadline) {
			t.Fatal("the one-node cluster never became ok")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b
}

// A single-shard Redis Cluster (cluster-enabled, one node owning every slot) reached through
// a plain *redis.Client, as a redis:// URL to a managed cluster-mode endpoint is: the first
// Begin that reads its seed in its own script is refused across slots, and the store reads
// the registry first from then on; a whole cycle and a partitions delete run.
func TestFirstBeginOnAClusterModeNodeThroughAPlainClient(t *testing.T) {
	b := clusterModeNode(t)
	ctx := context.Background()
	s, clk := newStore(t, b)
	registerListing(t, s, "a", "b")
	for _, p := range []string{"a", "b"} {
		r, err := s.Begin(ctx, watukuytype.Key{Poller: "orders", Partition: p}, "w", time.Minute, core.BeginForCycle)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("first Begin of %s: %s, %v", p, statusName(r.Status), err)
		}
	}
	if s.oneServer.Load() {
		t.Fatal("the store still sends seeds read in the Begin's own script to a cluster-mode node")
	}
	cycleSteps(t, b, s, clk, func() {}) // a whole cycle, then partitions delete
}

// A go-redis Ring shards keys by hash tag over several servers: the registry (under
// {global}) is on one of them, so a first Begin reads it first; every registered key begins.
func TestFirstBeginOnARing(t *testing.T) {
	ctx := context.Background()
	m1, m2 := redistest.Miniredis(t), redistest.Miniredis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s1": m1.Mini.Addr(), "s2": m2.Mini.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	parts := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}
	s, err := New(ring, Options{})
	if err != nil {
		t.Fatal(err)
	}
	registerListing(t, s, parts...)
	for _, p := range parts {
		r, err := s.Begin(ctx, watukuytype.Key{Poller: "orders", Partition: p}, "w", time.Minute, core.BeginForCycle)
		if err != nil || r.Status != core.BeginOK {
			t.Errorf("first Begin of registered %s: %s %v", p, statusName(r.Status), err)
		}
	}
}

// G2/G5: epochs stored at 14, 15 and 16 digits grow by exactly one per grant across the
// boundary between the epoch begin.lua computes and the one HINCRBY raises; the reply equals
// the stored epoch, and the lease's fenced writes (commit, End) pass.
func TestG2EpochsGrowByOneAcrossTheSixteenDigitBoundary(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, start := range []string{"99999999999998", "999999999999997", "999999999999999", "1000000000000000", "9007199254740987"} {
			t.Run(start, func(t *testing.T) {
				ctx := context.Background()
				s, clk := newStore(t, b)
				part := "e" + start
				registerListing(t, s, part)
				key := watukuytype.Key{Poller: "orders", Partition: part}
				if err := b.Client.HSet(ctx, s.Key(key, "state"), "epoch", start).Err(); err != nil {
					t.Fatal(err)
				}
				want := start
				for i := 0; i < 4; i++ {
					want = plusOne(t, want)
					r := beginOK(t, s, key, core.BeginForCycle)
					stored := b.Client.HGet(ctx, s.Key(key, "state"), "epoch").Val()
					if stored != want || strconv.FormatInt(r.Lease.Epoch, 10) != want {
						t.Fatalf("grant %d: stored %q reply %d, want %s", i, stored, r.Lease.Epoch, want)
					}
					if _, err := s.CommitPoll(ctx, r.Lease, core.Commit{State: map[string]string{"cursor.live": strconv.Itoa(i)}}); err != nil {
						t.Fatalf("grant %d: commit: %v", i, err)
					}
					if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"]}); err != nil {
						t.Fatalf("grant %d: end: %v", i, err)
					}
				}
			})
		}
	})
}

// G2: a never-begun key seeded from high-water marks at the 15/16-digit boundary starts exactly
// one above the mark, with its incarnation.
func TestG2SeedsAtTheSixteenDigitBoundaryStartOneAboveTheMark(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for i, mark := range []string{"999999999999999", "1000000000000000", "999999999999998"} {
			ctx := context.Background()
			s, err := New(b.Client, Options{Prefix: fmt.Sprintf("seed%d", i)}) // a fresh registry and retired hash per mark
			if err != nil {
				t.Fatal(err)
			}
			registerListing(t, s, "a")
			if err := b.Client.HSet(ctx, s.retiredKey(), "orders", mark+" 1800000000005").Err(); err != nil {
				t.Fatal(err)
			}
			key := watukuytype.Key{Poller: "orders", Partition: "a"}
			r := beginOK(t, s, key, core.BeginForCycle)
			want := plusOne(t, mark)
			h := b.Client.HGetAll(ctx, s.Key(key, "state")).Val()
			if h["epoch"] != want || strconv.FormatInt(r.Lease.Epoch, 10) != want {
				t.Errorf("mark %s: stored %q reply %d, want %s", mark, h["epoch"], r.Lease.Epoch, want)
			}
			if h["incarnation"] != "1800000000005" {
				t.Errorf("mark %s: incarnation %q", mark, h["incarnation"])
			}
		}
	})
}

// G5: a grant past int64's maximum epoch fails (HINCRBY refuses it) and writes nothing: a Lua
// error does not undo what the script wrote before it, so the epoch is raised before the
// grant's HSET. Fails if such a grant succeeds (an epoch that wraps) or leaves a write.
func TestG5AGrantThatFailsWritesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		if b.Name == "miniredis" {
			t.Skip("miniredis' HINCRBY wraps around at int64's maximum where Redis fails")
		}
		ctx := context.Background()
		s, _ := newStore(t, b)
		registerListing(t, s, "a")
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		const max = "9223372036854775807"
		if err := b.Client.HSet(ctx, s.Key(key, "state"), "epoch", max, "token", "old", "write", "7").Err(); err != nil {
			t.Fatal(err)
		}
		before := b.Client.HGetAll(ctx, s.Key(key, "state")).Val()
		r, err := s.Begin(ctx, key, "w", 30*time.Second, core.BeginForDelete)
		after := b.Client.HGetAll(ctx, s.Key(key, "state")).Val()
		if err == nil {
			t.Errorf("a grant past epoch %s: %s epoch %d, want an error", max, statusName(r.Status), r.Lease.Epoch)
		}
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("a failed grant wrote: before %v, after %v", before, after)
		}
	})
}

// G5/G7: a Begin re-sent by the client (each script runs twice) over a state that holds the
// last grant's write id: the re-sent copy is the same grant, and the grant's first writes pass
// (write '0' is below every write id), each applied once.
func TestG7ResentBeginsOverTheLastWriteIDAreOneGrantEach(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "a")
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		r := beginOK(t, s, key, core.BeginForCycle)
		if _, err := s.CommitPoll(ctx, r.Lease, core.Commit{Events: []core.OutboxEvent{{ID: "e0", OrderingKey: "o", Envelope: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"]}); err != nil {
			t.Fatal(err)
		}
		b.Client.AddHook(resend{})
		for i := 1; i <= 3; i++ {
			r2 := beginOK(t, s, key, core.BeginForCycle)
			if r2.Lease.Epoch != r.Lease.Epoch+int64(i) {
				t.Fatalf("grant %d: epoch %d, want %d (one grant per re-sent Begin)", i, r2.Lease.Epoch, r.Lease.Epoch+int64(i))
			}
			if w := b.Client.HGet(ctx, s.Key(key, "state"), "write").Val(); w != "0" {
				t.Errorf("grant %d: write %q after the grant, want 0", i, w)
			}
			if _, err := s.CommitPoll(ctx, r2.Lease, core.Commit{Events: []core.OutboxEvent{{ID: fmt.Sprintf("e%d", i), OrderingKey: "o", Envelope: []byte(`{}`)}}}); err != nil {
				t.Fatalf("grant %d: commit: %v", i, err)
			}
			if err := s.End(ctx, r2.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r2.State["trig"]}); err != nil {
				t.Fatalf("grant %d: end: %v", i, err)
			}
		}
		if n := b.Client.XLen(ctx, s.Key(key, "outbox")).Val(); n != 4 {
			t.Errorf("outbox holds %d entries, want 4 (each commit once)", n)
		}
	})
}

// Begin reads the outbox, the released set and the invalid index only when one EXISTS finds one
// of them: a key whose only extra structure is the released set (events released now, nothing
// in the outbox), or only the invalid hash, is still read: the first is due though nextDue is
// later, the second reports its invalid count.
func TestBeginReadsTheReleasedSetAndInvalidIndexWithoutAnOutbox(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "r", "i")
		rk := watukuytype.Key{Poller: "orders", Partition: "r"}
		ik := watukuytype.Key{Poller: "orders", Partition: "i"}
		for _, k := range []watukuytype.Key{rk, ik} {
			r := beginOK(t, s, k, core.BeginForCycle)
			if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Hour), Trigger: r.State["trig"]}); err != nil {
				t.Fatal(err)
			}
		}
		b.Client.ZAdd(ctx, s.Key(rk, "released"), redis.Z{Score: float64(clk.Now().Add(-time.Second).UnixMilli()), Member: "o"})
		r, err := s.Begin(ctx, rk, "w", 30*time.Second, core.BeginForCycle)
		if err != nil || r.Status != core.BeginOK || r.Released != 1 {
			t.Errorf("released only: %s released %d %v; want ok with 1 released", statusName(r.Status), r.Released, err)
		}
		b.Client.HSet(ctx, s.Key(ik, "invalid"), "id1", "inv_x\n1", "id2", "inv_y\n1")
		r, err = s.Begin(ctx, ik, "w", 30*time.Second, core.BeginForOp)
		if err != nil || r.Status != core.BeginOK || r.InvalidIndexed != 2 || r.OutboxLen != 0 {
			t.Errorf("invalid only: %s invalid %d outbox %d %v; want ok, 2, 0", statusName(r.Status), r.InvalidIndexed, r.OutboxLen, err)
		}
	})
}

// plusOne is the decimal number s plus one, exactly.
func plusOne(t *testing.T, s string) string {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("not a number %q", s)
	}
	return n.Add(n, big.NewInt(1)).String()
}

// A key's first Begin where its seed is read apart (a cluster, a Ring, or a cluster-mode
// node behind a plain client): when the seeded Begin after the registry read fails, the
// failure is the answer, not a grant, for Begin and for a Begin sent with an End. Fails if
// the error is lost and a zero lease (epoch 0, no token, TTL 0) comes back as granted: a
// cycle would run under no lease, and the lease keeper would panic on its zero TTL.
func TestSeededBeginThatFailsIsNoGrant(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		s.oneServer.Store(false) // the seed read apart, as on a cluster
		registerListing(t, s, "a", "b")
		key := func(p string) watukuytype.Key { return watukuytype.Key{Poller: "orders", Partition: p} }
		h := &failNthBegin{sha: s.scripts["begin"].Hash()}
		b.Client.AddHook(h)
		h.failAt(2) // 1: answered fresh; 2: the seeded one
		r, err := s.Begin(ctx, key("a"), "w", time.Minute, core.BeginForCycle)
		if !errors.Is(err, errInjected) {
			t.Errorf("Begin whose seeded call failed: %s epoch %d token %q, error %v; want the failure", statusName(r.Status), r.Lease.Epoch, r.Lease.Token, err)
		}
		h.failAt(0)
		ra := beginOK(t, s, key("a"), core.BeginForCycle)
		h.failAt(2)
		n := &core.NextBegin{Key: key("b"), Owner: "w", TTL: time.Minute, At: clk.Now()}
		if err := s.End(ctx, ra.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Minute), Trigger: ra.State[statehash.Trigger], Next: n}); err != nil {
			t.Fatalf("End: %v", err)
		}
		if n.Granted() || !errors.Is(n.Err, errInjected) {
			t.Errorf("Begin sent with the End, its seeded call failed: granted %v epoch %d, error %v; want the failure", n.Granted(), n.Result.Lease.Epoch, n.Err)
		}
	})
}

// failNthBegin fails the nth call of begin.lua counted from its last failAt (alone, or with
// the whole pipeline that carries it) with a network error, without sending it.
type failNthBegin struct {
	sha    string
	nth, n atomic.Int64
}

// failAt counts the calls from zero again and fails the nth (0: none).
func (h *failNthBegin) failAt(nth int64) { h.n.Store(0); h.nth.Store(nth) }

func (h *failNthBegin) hit(c redis.Cmder) bool {
	a := c.Args()
	return c.Name() == "evalsha" && len(a) > 1 && a[1] == h.sha && h.n.Add(1) == h.nth.Load()
}

func (h *failNthBegin) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failNthBegin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hit(cmd) {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (h *failNthBegin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.hit(c) {
				for _, c := range cmds {
					c.SetErr(errInjected)
				}
				return errInjected
			}
		}
		return next(ctx, cmds)
	}
}

var errInjected = errors.New("read tcp: i/o timeout (injected)")
