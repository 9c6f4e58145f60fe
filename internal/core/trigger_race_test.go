package core_test

// The trigger that ends an operation (Engine.dueNow) racing a partitions delete whose mark
// expires before the trigger lands (the operator's process paused after the operation's lease
// ended).

import (
	"context"
	"errors"
	"testing"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// triggerHookStore runs beforeTrigger (once) before Store.Trigger.
type triggerHookStore struct {
	core.Store
	beforeTrigger func()
}

func (h *triggerHookStore) Trigger(ctx context.Context, key watukuytype.Key) error {
	if f := h.beforeTrigger; f != nil {
		h.beforeTrigger = nil
		f()
	}
	return h.Store.Trigger(ctx, key)
}

// reset-cursor of an added partition; before its closing trigger, another operator deletes the
// partition and its deletion mark expires. The operation reports the key deleted, and nothing
// of the key may stay in Redis (no due entry will ever bring a Begin that drops a stray state).
func TestOpTriggerAfterAForgottenDeleteLeavesNothing(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, a, _, _ := partitionEngines(t, b)
		key := watukuytype.Key{Poller: partKey.Poller, Partition: "x"}
		if err := a.AddPartition(ctx, key); err != nil {
			t.Fatal(err)
		}
		th := &triggerHookStore{Store: st}
		eng, err := core.NewEngine(core.Options{Store: th, InstanceID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		p := watukuytype.Poller{Name: partKey.Poller, Partitions: []string{partKey.Partition}, Fetch: newFeed(10).fetch, Version: watukuytype.Field("v"),
			Handler: (&recorder{}).handle, Schedule: watukuytype.Schedule{Min: 1e9, Max: 60e9},
			Delivery: watukuytype.Delivery{Concurrency: 1, Attempts: 2, Backoff: watukuytype.Backoff{Base: 1e3, Factor: 1, Max: 1e3}}}
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
		if err := eng.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		var delErr error
		th.beforeTrigger = func() {
			delErr = a.DeletePartition(ctx, key)
			_ = b.Client.Del(ctx, st.Key(key, "state")).Err() // the mark expires
		}
		err = eng.ResetCursor(ctx, key, "", false)
		if delErr != nil {
			t.Fatalf("the delete: %v", delErr)
		}
		if nf := (*watukuytype.NotFoundError)(nil); !errors.As(err, &nf) || !nf.Deleted {
			t.Fatalf("reset-cursor of a key deleted before its trigger: %v, want NotFoundError{Deleted}", err)
		}
		if left := b.Client.Keys(ctx, "wk:{orders|x}:*").Val(); len(left) != 0 {
			t.Fatalf("left of the deleted, forgotten key: %v (state %v)", left, b.Client.HGetAll(ctx, st.Key(key, "state")).Val())
		}
	})
}
