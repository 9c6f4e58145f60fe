package redisstore

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// watched is one process of the data-watcher test: an engine with its pollers and its watcher.
type watched struct {
	eng    *core.Engine
	w      *core.DataWatch
	losses int
	log    *bytes.Buffer
}

func newWatched(t *testing.T, s *Store, reregister bool, pollers ...string) *watched {
	t.Helper()
	p := &watched{log: &bytes.Buffer{}}
	var err error
	if p.eng, err = core.NewEngine(core.Options{Store: s, InstanceID: "i", Logger: zerolog.New(p.log)}); err != nil {
		t.Fatal(err)
	}
	noop := func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		return watukuytype.Page{Next: req.Cursor}, nil
	}
	for _, name := range pollers {
		if err := p.eng.Register(watukuytype.Poller{Name: name, Partitions: []string{"a", "b"}, Fetch: noop,
			Handler: func(context.Context, watukuytype.Event) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	p.w = &core.DataWatch{Engine: p.eng, Store: s, Reregister: reregister, OnLoss: func() { p.losses++ }}
	return p
}

func (p *watched) check(t *testing.T) bool {
	t.Helper()
	lost, err := p.w.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return lost
}

// A database empty at start is no loss; a flush is, for every process, also one that checks
// after another registered again (the data id changed), and each registers its own pollers
// again (a scheduler only reports); the keys are due again. A registry that empties by itself
// (the last partition deleted) is no loss.
func TestDataWatchNoticesLossOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, err := New(b.Client, Options{Prefix: "dw"})
		if err != nil {
			t.Fatal(err)
		}
		orders, customers := newWatched(t, s, true, "orders"), newWatched(t, s, true, "customers")
		scheduler := newWatched(t, s, false)
		all := []*watched{orders, customers, scheduler}
		for _, p := range all { // an empty database, nothing registered yet
			if p.check(t) {
				t.Fatal("an empty database at start was reported as a loss")
			}
		}
		for _, p := range []*watched{orders, customers} {
			if err := p.eng.Setup(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range all {
			if p.check(t) {
				t.Fatal("a loss before any")
			}
		}
		m, err := s.DataMarks(ctx)
		if err != nil || m.ID == "" || len(m.Missing) != 0 {
			t.Fatalf("marks after setup: %+v, %v; want a data id and every key", m, err)
		}

		if err := flushAll(ctx, b.Client); err != nil {
			t.Fatal(err)
		}
		if !orders.check(t) {
			t.Fatal("orders' watcher missed the flush")
		}
		// customers checks after orders registered again: the data id changed.
		if !customers.check(t) || !scheduler.check(t) {
			t.Fatal("a watcher that checked after another registered again missed the loss")
		}
		for _, p := range all {
			if p.check(t) {
				t.Fatal("one flush reported twice")
			}
			if p.losses != 1 || strings.Count(p.log.String(), "Redis lost its data") != 1 {
				t.Errorf("losses %d, log:\n%s\nwant one loss, logged once", p.losses, p.log.String())
			}
		}
		if !strings.Contains(orders.log.String(), "registering 1 poller(s) and their 2 configured key(s) again") ||
			!strings.Contains(orders.log.String(), "partitions added at run time") {
			t.Errorf("the loss line does not say what is registered again and what is lost:\n%s", orders.log.String())
		}
		if !strings.Contains(scheduler.log.String(), "the workers register theirs again") {
			t.Errorf("the scheduler's loss line: %s", scheduler.log.String())
		}
		// An operator's tool with the Redis URL alone finds the keys again.
		tool, err := core.NewEngine(core.Options{Store: s, InstanceID: "tool"})
		if err != nil {
			t.Fatal(err)
		}
		keys, err := tool.Keys(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		want := []watukuytype.Key{{Poller: "customers", Partition: "a"}, {Poller: "customers", Partition: "b"}, {Poller: "orders", Partition: "a"}, {Poller: "orders", Partition: "b"}}
		if !slices.Equal(keys, want) {
			t.Errorf("keys after the loss: %v, want %v registered again", keys, want)
		}
		due, err := s.ClaimDue(ctx, 10, 0, []string{"orders", "customers"})
		if err != nil || len(due) != 4 {
			t.Errorf("due after the loss: %v, %v; want the 4 keys", due, err)
		}

		// The registry empties by itself when the last partition is deleted: no loss.
		if err := b.Client.Del(ctx, s.keysKey("orders"), s.keysKey("orders")+"|").Err(); err != nil {
			t.Fatal(err)
		}
		for _, p := range all {
			if p.check(t) {
				t.Error("a registry without entries was reported as a loss")
			}
		}
	})
}

// Watchers that find the layout without a data id at once record one id between them.
func TestDataIDMintedOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, err := New(b.Client, Options{Prefix: "dm"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx); err != nil { // the layout marker, as a first Setup writes it
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		ids := make([]string, 8)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids[i], _ = s.MintDataID(ctx, strings.Repeat(string(rune('a'+i)), 4))
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if id == "" || id != ids[0] {
				t.Fatalf("minted ids %v, want one", ids)
			}
		}
	})
}

// flushAll empties the database, every master of a cluster.
func flushAll(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() })
	}
	return c.FlushAll(ctx).Err()
}
