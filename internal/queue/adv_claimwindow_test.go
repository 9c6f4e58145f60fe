package queue

// Adversarial tests of the claim window and its confirmation: each reproduced a hole in the
// first version and holds now.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// advPausedConfirm is a Claimer whose ConfirmClaims waits for release: the scheduler is
// frozen (GC pause, SIGSTOP, a batch whose enqueues take longer than the window) between its
// enqueue and its confirmation.
type advPausedConfirm struct {
	*redisstore.Store
	reached chan struct{}
	release chan struct{}
}

func (p *advPausedConfirm) ConfirmClaims(ctx context.Context, c watukuytype.Claim, keys []watukuytype.Key, claimTimeout time.Duration) error {
	close(p.reached)
	<-p.release
	return p.Store.ConfirmClaims(ctx, c, keys, claimTimeout)
}

// A late confirmation leaves another scheduler's newer claim alone. Scheduler A claims k,
// enqueues its task and is frozen before its confirmation. Meanwhile k's task runs and k is
// made due again (here an operator's trigger; a cycle whose End writes a due time already
// passed does the same), and scheduler B claims k and dies in its enqueue. A's confirmation,
// once A resumes, must not hold B's claim: no task will run k. (Found by the adversarial
// review: the first confirmation held any future marked claim, and k stayed out 32 s; it now
// holds only the very score its own claim wrote.)
func TestAdvLateConfirmLeavesAnotherSchedulersClaim(t *testing.T) {
	b, st, k := oneKey(t)
	ctx := context.Background()
	gate := &advPausedConfirm{Store: st, reached: make(chan struct{}), release: make(chan struct{})}
	a := &Scheduler{Store: gate, Client: asynq.NewClientFromRedisClient(b.Client), Prefix: "w", PerTask: 1}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if n, err := a.Once(ctx); n != 1 || err != nil {
			t.Errorf("scheduler A: %d claimed, %v", n, err)
		}
	}()
	<-gate.reached
	// A's task ran k (asynq keeps no completed task: Retention(0)).
	if err := asynq.NewInspectorFromRedisClient(b.Client).DeleteTask(DefaultQueue, TaskID("w", k[0])); err != nil {
		t.Fatal(err)
	}
	if err := st.Trigger(ctx, k[0]); err != nil {
		t.Fatal(err)
	}
	dying := &Scheduler{Store: st, Client: hungAsynqClient(t), Prefix: "w", PerTask: 1}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := dying.Once(dctx); n != 1 || err == nil {
		t.Fatalf("scheduler B dying in its enqueue: %d claimed, %v", n, err)
	}
	if d := dueIn(t, b, st, k[0]); d > DefaultClaimWindow {
		t.Fatalf("B's claim: due in %s, want at most the window", d)
	}
	close(gate.release)
	wg.Wait()
	if d := dueIn(t, b, st, k[0]); d > DefaultClaimWindow {
		t.Errorf("k claimed by B, which died before its enqueue, then A's late confirmation: due in %s, want at most the window %s (no task of k is queued)", d, DefaultClaimWindow)
	}
}

// The same through the client's re-send. go-redis sends confirm_claims.lua again after a
// read timeout (MaxRetries): the first run was applied and its reply lost. Between the two, k
// became due (a trigger) and another scheduler claimed it and died before its enqueue. The
// re-sent confirmation must leave that claim (found by the adversarial review: it held it for
// the lease TTL plus the grace, 32 s).
func TestAdvResentConfirmLeavesANewerClaim(t *testing.T) {
	b, st, k := oneKey(t)
	ctx := context.Background()
	ca, err := st.ClaimForEnqueue(ctx, 10, DefaultClaimWindow, []string{"p"})
	if err != nil || len(ca.Keys) != 1 {
		t.Fatalf("A's claim: %v, %v", ca, err)
	}
	if err := st.ConfirmClaims(ctx, ca, k, 0); err != nil { // applied; its reply is lost
		t.Fatal(err)
	}
	if err := st.Trigger(ctx, k[0]); err != nil {
		t.Fatal(err)
	}
	if cb, err := st.ClaimForEnqueue(ctx, 10, DefaultClaimWindow, []string{"p"}); err != nil || len(cb.Keys) != 1 {
		t.Fatalf("B's claim: %v, %v", cb, err)
	}
	// B dies before its enqueue.
	if err := st.ConfirmClaims(ctx, ca, k, 0); err != nil { // the re-send
		t.Fatal(err)
	}
	if d := dueIn(t, b, st, k[0]); d > DefaultClaimWindow {
		t.Errorf("B's claim after A's re-sent confirmation: due in %s, want at most the window %s", d, DefaultClaimWindow)
	}
}

// A ClaimWindow under a millisecond is rounded to one: a scheduler that dies between its
// claim and its enqueue leaves its keys out about that long. (Found by the adversarial review:
// it was sent as 0 ms, which claim_due.lua reads as "no fixed claim", the whole lease TTL plus
// the grace.)
func TestAdvSubMillisecondClaimWindowStaysShort(t *testing.T) {
	b, st, k := oneKey(t)
	ctx := context.Background()
	dying := &Scheduler{Store: st, Client: hungAsynqClient(t), Prefix: "w", PerTask: 1, ClaimWindow: 500 * time.Microsecond}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := dying.Once(dctx); n != 1 || err == nil {
		t.Fatalf("a scheduler dying in its enqueue: %d claimed, %v", n, err)
	}
	if d := dueIn(t, b, st, k[0]); d > time.Second {
		t.Errorf("ClaimWindow 500µs, scheduler dead before its enqueue: due in %s, want at most a second", d)
	}
}

// oneKey is a store (prefix "w") on a private redis-server with one key of poller p
// registered.
func oneKey(t *testing.T) (redistest.Backend, *redisstore.Store, []watukuytype.Key) {
	t.Helper()
	b := redistest.Real(t)
	st, err := redisstore.New(b.Client, redisstore.Options{Prefix: "w"})
	if err != nil {
		t.Fatal(err)
	}
	k := keys(1)
	if err := st.Register(context.Background(), pollerP, entries(k)); err != nil {
		t.Fatal(err)
	}
	return b, st, k
}
