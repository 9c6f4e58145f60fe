package redisstore

// Script calls that meet an emptied script cache (NOSCRIPT after a restart or a failover) or
// are sent twice (go-redis after a read timeout): each wrapper has the outcome of one clean
// call.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// flushScripts empties the script cache of every node, as a restart or a failover to a node
// that never loaded them does; the data stays.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	} else {
		err = c.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// resend is a go-redis hook that sends every script call twice, as the client does when the
// first reply was lost (MaxRetries after a read timeout), and gives the caller the second
// reply; a pipeline holding a script is sent twice whole.
type resend struct{}

func isScript(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }

func (resend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (resend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			_ = next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (resend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isScript) {
			_ = next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// cycleSteps runs one cycle of key through every fenced wrapper (a trigger landing while it
// runs), calling between before each store call, and checks what a cycle relies on: the
// page's events are in the outbox once, under the ids CommitPoll reported, the trigger
// keeps the key due now, and the lease is released. Then an operator deletes the key.
func cycleSteps(t *testing.T, b redistest.Backend, s *Store, clk *fakeclock.Clock, between func()) {
	t.Helper()
	ctx := context.Background()
	key := watukuytype.Key{Poller: "orders", Partition: "t1"}
	if err := s.Register(ctx, map[string][]byte{"orders": []byte(`{}`)}, []watukuytype.Key{key}); err != nil {
		t.Fatal(err)
	}
	between()
	begun, err := s.Begin(ctx, key, "w1", 30*time.Second, core.BeginForCycle)
	if err != nil || begun.Status != core.BeginOK {
		t.Fatalf("begin: %+v %v", begun, err)
	}
	l := begun.Lease
	between()
	if _, err := s.Renew(ctx, l); err != nil {
		t.Fatalf("renew: %v", err)
	}
	between()
	res, err := s.CommitPoll(ctx, l, core.Commit{State: map[string]string{"cursor.live": "c1"},
		Upserts: []core.Upsert{{Identity: "a", Row: []byte("1")}, {Identity: "b", Row: []byte("2")}},
		Events: []core.OutboxEvent{{ID: "ev-a", OrderingKey: "a", Envelope: []byte(`{"id":"ev-a"}`)},
			{ID: "ev-b", OrderingKey: "b", Envelope: []byte(`{"id":"ev-b"}`)}}})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if n := b.Client.XLen(ctx, s.Key(key, "outbox")).Val(); n != 2 {
		t.Fatalf("the page's 2 events are %d outbox entries", n)
	}
	between()
	batch, err := s.ReadOutbox(ctx, l, 10)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var read []string
	for _, e := range batch.Entries {
		read = append(read, e.StreamID)
	}
	if !slices.Equal(read, res.StreamIDs) {
		t.Fatalf("commit reported stream ids %v, the outbox holds %v", res.StreamIDs, read)
	}
	between()
	if _, err := s.Ack(ctx, l, outboxEntries(read...)); err != nil {
		t.Fatalf("ack: %v", err)
	}
	between()
	if err := s.Trigger(ctx, key); err != nil {
		t.Fatalf("trigger: %v", err)
	}
	between()
	if err := s.End(ctx, l, core.EndRequest{State: map[string]string{statehash.NextDue: "1"}, NextDue: clk.Now().Add(time.Hour), Trigger: begun.State[statehash.Trigger]}); err != nil {
		t.Fatalf("end: %v", err)
	}
	score, err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Result()
	if err != nil || int64(score) > clk.Now().UnixMilli() {
		t.Fatalf("a trigger landed during the cycle, the key is due at %v (%v), want now", int64(score), err)
	}
	if live, err := s.LeaseLive(ctx, key); err != nil || live {
		t.Fatalf("the lease lives after End: %v %v", live, err)
	}
	between()
	op, err := s.Begin(ctx, key, "ops", 30*time.Second, core.BeginForDelete)
	if err != nil || op.Status != core.BeginOK {
		t.Fatalf("begin op: %+v %v", op, err)
	}
	between()
	if err := s.DeleteKey(ctx, op.Lease); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, e, found, err := s.Lookup(ctx, key); err != nil || !found || !e.Deleted {
		t.Fatalf("the deleted config key: entry %+v found %v (%v), want it registered, deleted", e, found, err)
	}
}

// A server that lost its script cache between any two calls (restart, failover, SCRIPT
// FLUSH) answers NOSCRIPT to every wrapper, End's pipeline included: each loads its script
// and runs it once, with the outcome it has with the cache.
func TestScriptCacheLostBetweenCalls(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, clk := newStore(t, b)
		cycleSteps(t, b, s, clk, func() { flushScripts(t, b.Client) })
	})
}

// With WaitReplicas the script and its WAIT share a pipeline; after NOSCRIPT both are sent
// again: the page must still be written once, and its ids reported, as unreplicated when no
// replica answers.
func TestReplicatedCommitAfterScriptCacheLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
		s, err := New(b.Client, Options{Clock: clk.Now, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		key := watukuytype.Key{Poller: "orders", Partition: "t1"}
		registerListing(t, s, key.Partition)
		begun, err := s.Begin(ctx, key, "w1", 30*time.Second, core.BeginForCycle)
		if err != nil || begun.Status != core.BeginOK {
			t.Fatalf("begin: %+v %v", begun, err)
		}
		flushScripts(t, b.Client)
		res, err := s.CommitPoll(ctx, begun.Lease, core.Commit{Events: []core.OutboxEvent{{ID: "ev-a", OrderingKey: "a", Envelope: []byte(`{}`)}}})
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		if !res.Unreplicated || res.Duplicate || len(res.StreamIDs) != 1 {
			t.Fatalf("commit with no replica: %+v", res)
		}
		if n := b.Client.XLen(ctx, s.Key(key, "outbox")).Val(); n != 1 {
			t.Fatalf("one event is %d outbox entries", n)
		}
		flushScripts(t, b.Client)
		batch, err := s.ReadOutbox(ctx, begun.Lease, 10)
		if err != nil || len(batch.Entries) != 1 || batch.Entries[0].StreamID != res.StreamIDs[0] || !batch.Unreplicated {
			t.Fatalf("read: %+v %v", batch, err)
		}
	})
}

// Every script sent twice (the first reply lost): each wrapper decodes the reply of the
// second run, a DUPLICATE or a repeated read, as the success the first run was, and the
// cycle's writes happen once. On RESP3 (go-redis' default) and, on a real server, RESP2.
func TestEveryScriptResent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		b.Client.AddHook(resend{})
		s, clk := newStore(t, b)
		cycleSteps(t, b, s, clk, func() {})
	})
	t.Run("redis-server RESP2", func(t *testing.T) {
		b := redistest.Real(t)
		opts, err := redis.ParseURL(b.URL)
		if err != nil {
			t.Fatal(err)
		}
		opts.Protocol = 2
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(resend{})
		b.Client = c
		s, clk := newStore(t, b)
		cycleSteps(t, b, s, clk, func() {})
	})
}
