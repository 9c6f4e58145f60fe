package watukuy

// Failovers of a replicated Redis (a primary, a replica, and a proxy the clients dial, moved as
// Sentinel would): a lost grant fences its holder out (G5), and no delivered commit is lost
// (G3).

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A failover that lost writes grants one epoch twice (A's epoch 2 on the primary only, then B's
// on the promoted replica): the lease token tells the grants apart, so A's commit and end are
// refused, A delivers nothing, and B's lease survives A's end.
func TestG5FailoverThatLostTheGrant(t *testing.T) {
	r := redistest.Replicas(t)
	ctx := t.Context()
	clients, err := netproxy.New(tcpAddr(t, r.Primary)) // where Sentinel sends the clients
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	api := fakeapi.New()
	api.Put("o1", nil)
	var mu sync.Mutex
	var delivered []string
	var epochs []int64
	type gate struct{ in, out chan struct{} }
	gates := map[string]*gate{}
	instance := func(name string) *Engine {
		rdb := redis.NewClient(&redis.Options{Addr: clients.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		g := &gate{in: make(chan struct{}), out: make(chan struct{})}
		gates[name] = g
		armed := false
		h := &hookStore{afterBegin: func(b core.BeginResult) {
			if b.Status == core.BeginOK {
				mu.Lock()
				epochs = append(epochs, b.Lease.Epoch)
				mu.Unlock()
			}
		}}
		eng, err := newEngine(Options{Redis: rdb, InstanceID: name}, seams{wrapStore: hooked(h)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := eng.Setup(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		feed := api.ChangeFeed(10)
		p := watukuytype.Poller{Name: "orders", Version: watukuytype.Field("version"), Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Second},
			Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				if armed {
					close(g.in) // inside its lease, the request sent
					<-g.out
				}
				return feed(ctx, req)
			},
			Handler: func(ctx context.Context, ev watukuytype.Event) error {
				mu.Lock()
				delivered = append(delivered, name+":"+ev.Identity+"@"+ev.Version)
				mu.Unlock()
				return nil
			}}
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
		armed = name != "setup"
		return eng
	}
	key := watukuytype.Key{Poller: "orders"}
	if rep := instance("setup").RunCycle(ctx, key); rep.Outcome != watukuytype.Ran || rep.Err != nil {
		t.Fatalf("first cycle: %+v", rep)
	}
	r.WaitSynced(t)
	r.CutLink()
	api.Put("o1", nil)
	a := instance("A")
	if err := a.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan watukuytype.CycleReport)
	go func() { aDone <- a.RunCycle(context.Background(), key) }()
	<-gates["A"].in // A holds epoch 2, on the primary only
	r.KillPrimary()
	r.Promote(t)
	clients.Retarget(tcpAddr(t, r.Replica))
	bb := instance("B")
	if err := bb.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan watukuytype.CycleReport)
	go func() { bDone <- bb.RunCycle(context.Background(), key) }()
	<-gates["B"].in // B holds the key on the promoted replica
	close(gates["A"].out)
	repA := <-aDone
	mu.Lock()
	if len(epochs) != 3 || epochs[1] != epochs[2] {
		t.Fatalf("grants %v: the failover did not repeat an epoch, the scenario did not happen", epochs)
	}
	mu.Unlock()
	if !errors.As(repA.Err, new(*watukuytype.LeaseLostError)) {
		t.Errorf("A's cycle on a lost grant of epoch %d: %+v, want LeaseLost", epochs[1], repA)
	}
	owner, err := r.Replica.Client.HGet(ctx, bb.store.Key(key, "state"), "owner").Result()
	if err != nil || owner != "B" {
		t.Errorf("B's lease after A's end: owner %q (%v)", owner, err)
	}
	close(gates["B"].out)
	if repB := <-bDone; repB.Outcome != watukuytype.Ran || repB.Err != nil {
		t.Errorf("B's cycle: %+v", repB)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range delivered {
		if strings.HasPrefix(d, "A:") {
			t.Errorf("A delivered %s on a grant it lost", d)
		}
	}
	if !slices.Contains(delivered, "B:o1@2") {
		t.Errorf("deliveries %v: B never delivered o1@2", delivered)
	}
}

// With WaitReplicas a commit's events are delivered only once a replica has it: the commit a
// failover cuts off delivers nothing (REPLICATION), and after the failover the consumer ends in
// the API's state.
func TestG3FailoverNeverLosesADeliveredCommit(t *testing.T) {
	r := redistest.Replicas(t)
	ctx := t.Context()
	clients, err := netproxy.New(tcpAddr(t, r.Primary))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: clients.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	api := fakeapi.New()
	rec := &recorder{}
	eng, err := New(Options{Redis: rdb, InstanceID: "w", WaitReplicas: 1, WaitTimeout: 2 * time.Second}) // a loaded machine acks late
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(watukuytype.Poller{Name: "orders", Strategy: watukuytype.SnapshotDiff, Fetch: api.Listing(10), Version: watukuytype.Field("version"),
		ConfirmDeletes: 1, Handler: rec.handle, Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	key := watukuytype.Key{Poller: "orders"}
	cycle := func() watukuytype.CycleReport {
		t.Helper()
		if err := eng.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		return eng.RunCycle(ctx, key)
	}
	api.Put("i1", nil)
	api.Put("i2", nil)
	if rep := cycle(); rep.Delivered != 2 || rep.Err != nil {
		t.Fatalf("first cycle: %+v", rep)
	}
	r.WaitSynced(t)
	r.CutLink()
	api.Put("i3", nil)
	rep := cycle()
	if rep.Delivered != 0 || rep.Events != 1 {
		t.Fatalf("a commit no replica has was delivered: %+v", rep)
	}
	if ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); !strings.Contains(string(ki.LastError), "REPLICATION") {
		t.Fatalf("lastError after an unreplicated commit: %s", ki.LastError)
	}
	r.KillPrimary()
	r.Promote(t)
	clients.Retarget(tcpAddr(t, r.Replica))
	if rep := cycle(); rep.Delivered != 0 {
		t.Fatalf("delivered %d events with no replica to confirm them", rep.Delivered)
	}
	r.Reattach(t) // redundancy restored: deliveries go on
	api.Delete("i3")
	api.Put("i4", nil)
	for range 3 {
		cycle()
	}
	got, want := rec.final(), api.Final()
	if len(got) != len(want) {
		t.Fatalf("the consumer holds %v, the API %v", got, want)
	}
	for id, v := range want {
		if got[id] != strconv.Itoa(v) {
			t.Fatalf("the consumer holds %v, the API %v", got, want)
		}
	}
}
