package watukuy

import (
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Every lease holder reads the outbox as one consumer of its group: 200 process lifetimes that
// each die with an event in the outbox leave at most one consumer, and the drained outbox is
// deleted with its group.
func TestBoundedMemoryOneOutboxConsumer(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var eng *Engine
		for range 200 {
			// A new process each time: it drains what the last one left in the outbox (a
			// reader of the group), then commits one event and dies before delivering it.
			e.api.Put("o1", nil)
			e.clock.Advance(3 * time.Minute)
			eng = e.engine(e.poller(), faulty(&faultyStore{dieCommit: 1}))
			e.tick(eng)
		}
		// The last process died with its event in the outbox: the group is there, with the
		// consumers 200 lifetimes left in it.
		outbox := eng.store.Key(watukuytype.Key{Poller: "orders"}, "outbox")
		cs, err := b.Client.XInfoConsumers(t.Context(), outbox, "dispatch").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) > 1 {
			t.Fatalf("%d consumers in the outbox group after 200 process lifetimes", len(cs))
		}
		e.clock.Advance(3 * time.Minute)
		eng = e.engine(e.poller(), nil)
		e.settle(eng)
		// A drained outbox is deleted, its group and consumers with it.
		if n := b.Client.Exists(t.Context(), outbox).Val(); n != 0 {
			t.Fatalf("the outbox is still there once every event was delivered (%d entries)", b.Client.XLen(t.Context(), outbox).Val())
		}
		if n := len(e.rec.events()); n != 200 {
			t.Fatalf("%d events delivered, want 200", n)
		}
	})
}
