package redisstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Every fenced script fails with LEASE_LOST and writes nothing, whether the epoch is stale
// (another instance took over) or the lease expired with nobody else holding it.
func TestFencedWritesLeaveNoTrace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := &clock{t: time.UnixMilli(1_800_000_000_000)}
		s, err := New(b.Client, Options{Clock: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		key := core.Key{Poller: "orders", Partition: "t1"}
		ttl := 30 * time.Second
		begin := func(owner string) core.Lease {
			t.Helper()
			r, err := s.Begin(ctx, key, owner, ttl, true)
			if err != nil || r.Status != core.BeginOK {
				t.Fatalf("begin: %+v %v", r, err)
			}
			return r.Lease
		}
		l1 := begin("a")
		// Some state to protect: an item, an event pending in the group, a parked row.
		if _, err := s.CommitPoll(ctx, l1, core.Commit{State: map[string]string{"cursor.live": "c1"},
			Upserts: []core.Upsert{{Identity: "x", Row: []byte("123456781")}},
			Events:  []core.OutboxEvent{{ID: "ev1", OrderingKey: "x", Envelope: []byte(`{}`)}, {ID: "ev2", OrderingKey: "y", Envelope: []byte(`{}`)}},
			Invalid: []core.ParkedRow{{ID: "inv1", Row: []byte(`{"kind":"invalid"}`)}}}); err != nil {
			t.Fatal(err)
		}
		batch, err := s.ReadOutbox(ctx, l1, 10)
		entries := batch.Entries
		if err != nil || len(entries) != 2 {
			t.Fatalf("read: %v %v", entries, err)
		}

		ops := map[string]func(l core.Lease) error{
			"renew": func(l core.Lease) error { _, err := s.Renew(ctx, l); return err },
			"commitPoll": func(l core.Lease) error {
				_, err := s.CommitPoll(ctx, l, core.Commit{State: map[string]string{"cursor.live": "stale"},
					Upserts: []core.Upsert{{Identity: "z", Row: []byte("999999999")}}, Deletes: []string{"x"},
					Events: []core.OutboxEvent{{ID: "ev9", OrderingKey: "z", Envelope: []byte(`{}`)}}, Unpark: []string{"inv1"}})
				return err
			},
			"readOutbox": func(l core.Lease) error { _, err := s.ReadOutbox(ctx, l, 10); return err },
			"ack":        func(l core.Lease) error { _, err := s.Ack(ctx, l, []string{entries[0].StreamID}); return err },
			"park": func(l core.Lease) error {
				return s.Park(ctx, l, []core.Poison{{StreamID: entries[0].StreamID, ParkedID: "ev1", OrderingKey: "x", Row: []byte(`{}`)}},
					[]core.Held{{StreamID: entries[1].StreamID, JSON: []byte(`{}`)}})
			},
			"releaseParked": func(l core.Lease) error { _, _, err := s.ReleaseParked(ctx, l, false, []string{"inv1"}); return err },
			"end": func(l core.Lease) error {
				return s.End(ctx, l, core.EndRequest{State: map[string]string{"nextDue": "1"}, NextDue: clk.now()})
			},
		}
		check := func(t *testing.T, l core.Lease) {
			for name, op := range ops {
				before := b.Dump(t)
				err := op(l)
				var ll *core.LeaseLostError
				if !errors.As(err, &ll) {
					t.Errorf("%s with a dead lease: %v, want LeaseLostError", name, err)
					continue
				}
				after := b.Dump(t)
				if name == "end" {
					// End's due-time write shares a pipeline with the script; when fenced off,
					// the store re-writes the due score from the owner's state.
					delete(before, s.DueKey())
					delete(after, s.DueKey())
				}
				if !reflect.DeepEqual(before, after) {
					t.Errorf("%s with a dead lease changed Redis:\nbefore %v\nafter  %v", name, before, after)
				}
			}
		}
		t.Run("expired", func(t *testing.T) {
			clk.add(ttl + time.Millisecond)
			check(t, l1)
		})
		t.Run("stale epoch", func(t *testing.T) {
			l2 := begin("b")
			if l2.Epoch != l1.Epoch+1 {
				t.Fatalf("epoch %d after %d", l2.Epoch, l1.Epoch)
			}
			check(t, l1)
			if _, err := s.Renew(ctx, l2); err != nil {
				t.Fatalf("the live lease cannot renew: %v", err)
			}
		})
		t.Run("same epoch, another grant's token", func(t *testing.T) {
			// After a failover that lost a grant, the epoch can repeat: the token tells the
			// grants apart.
			clk.add(ttl + time.Millisecond)
			l3 := begin("c")
			forged := l3
			forged.Token = "a-lost-grant"
			check(t, forged)
			if _, err := s.Renew(ctx, l3); err != nil {
				t.Fatalf("the live lease cannot renew: %v", err)
			}
		})
	})
}

// Two claimers never take the same due key; a claimed key comes back after the claim timeout.
func TestClaimDue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := &clock{t: time.UnixMilli(1_800_000_000_000)}
		s, _ := New(b.Client, Options{Clock: clk.now})
		keys := map[core.Key][]byte{}
		for i := 0; i < 50; i++ {
			keys[core.Key{Poller: "p", Partition: fmt.Sprint(i)}] = []byte(`{"source":"config"}`)
		}
		if err := s.Register(ctx, nil, keys); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		claimed := map[core.Key]int{}
		var wg sync.WaitGroup
		for w := 0; w < 5; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ks, err := s.ClaimDue(ctx, 3, time.Minute, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ks) == 0 {
						return
					}
					mu.Lock()
					for _, k := range ks {
						claimed[k]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(claimed) != 50 {
			t.Fatalf("claimed %d keys, want 50", len(claimed))
		}
		for k, n := range claimed {
			if n != 1 {
				t.Fatalf("%s claimed %d times", k, n)
			}
		}
		if ks, _ := s.ClaimDue(ctx, 100, time.Minute, nil); len(ks) != 0 {
			t.Fatalf("claimed again before the timeout: %d", len(ks))
		}
		clk.add(time.Minute)
		if ks, _ := s.ClaimDue(ctx, 100, time.Minute, nil); len(ks) != 50 {
			t.Fatalf("after the claim timeout: %d keys due, want 50", len(ks))
		}
	})
}

// Every key of one (poller, partition) shares a hash tag, so each script touches one slot.
func TestKeysShareOneHashTag(t *testing.T) {
	s, _ := New(nil, Options{Prefix: "wk"})
	k := core.Key{Poller: "orders", Partition: "t_42"}
	for _, suffix := range []string{"state", "lease", "items", "outbox", "parked", "holds", "held"} {
		got := s.Key(k, suffix)
		if want := "wk:{orders|t_42}:" + suffix; got != want {
			t.Errorf("%s: %s, want %s", suffix, got, want)
		}
	}
	if _, err := New(nil, Options{Prefix: "a{b}"}); err == nil {
		t.Error("a prefix with braces was accepted")
	}
}
