package watukuytest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/watukuy/watukuy/watukuytest"
	"github.com/watukuy/watukuy/watukuytype"
)

// shop is a user's own in-memory fake: a listing with versions, changed between steps.
type shop struct {
	mu    sync.Mutex
	items map[string]int
}

func (s *shop) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.items))
	for id := range s.items {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var p watukuytype.Page
	for _, id := range ids {
		raw, _ := json.Marshal(map[string]any{"id": id, "version": s.items[id]})
		p.Items = append(p.Items, raw)
	}
	return p, nil
}

func TestEnvTicksAPoller(t *testing.T) {
	s := &shop{items: map[string]int{"a": 1, "b": 1}}
	var got []string
	env := watukuytest.New(t, watukuytype.Poller{Name: "shop", Strategy: watukuytype.SnapshotDiff, Fetch: s.fetch,
		Version: watukuytype.Field("version"), Handler: func(ctx context.Context, ev watukuytype.Event) error {
			got = append(got, string(ev.Type)+" "+ev.Identity)
			return nil
		}, Delivery: watukuytype.Delivery{Concurrency: 1}})
	env.Settle(10)
	s.mu.Lock()
	delete(s.items, "a")
	s.mu.Unlock()
	env.Settle(10)
	if fmt.Sprint(got) != "[created a created b deleted a]" {
		t.Fatalf("got %v", got)
	}
}

// A user's poller through the kill points, pauses and competing engines: zero violations.
func TestRunChaosOnAUserPoller(t *testing.T) {
	s := &shop{items: map[string]int{}}
	rng := rand.New(rand.NewPCG(3, 4))
	between := func(step int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		id := "i" + strconv.Itoa(rng.IntN(20))
		s.items[id]++
	}
	rep := watukuytest.RunChaos(t, []watukuytype.Poller{{Name: "shop", Strategy: watukuytype.SnapshotDiff, Fetch: s.fetch,
		Version: watukuytype.Field("version"), Handler: func(context.Context, watukuytype.Event) error { return nil }}},
		watukuytest.ChaosOptions{Seed: 9, Steps: 150, Between: between})
	// Without a Truth function the final state and deletes are not measured; the rest is.
	if !rep.NotMeasured["G3"] || rep.NotMeasured["G1"] || rep.NotMeasured["G5"] {
		t.Fatalf("measured: %v", rep.NotMeasured)
	}
	if rep.Deliveries == 0 {
		t.Fatal("nothing was delivered")
	}
	for _, l := range rep.Lines() {
		t.Log(l)
	}
}

// A user's own truth (built from their fake, with no watukuy internals) makes the run check
// the final state (G3) and deletes (G6) too.
func TestRunChaosChecksAUserTruth(t *testing.T) {
	s := &shop{items: map[string]int{}}
	var changes []watukuytest.Change
	last := map[string]int{} // an item created again goes on from its last version, as the checks expect
	rng := rand.New(rand.NewPCG(5, 6))
	between := func(step int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		id := "i" + strconv.Itoa(rng.IntN(20))
		if _, ok := s.items[id]; ok && rng.IntN(4) == 0 {
			changes = append(changes, watukuytest.Change{ID: id, Version: s.items[id], Deleted: true})
			delete(s.items, id)
			return
		}
		last[id]++
		s.items[id] = last[id]
		changes = append(changes, watukuytest.Change{ID: id, Version: s.items[id]})
	}
	truth := func() map[watukuytype.Key]watukuytest.Truth {
		s.mu.Lock()
		defer s.mu.Unlock()
		final := map[string]int{}
		for id, v := range s.items {
			final[id] = v
		}
		return map[watukuytype.Key]watukuytest.Truth{{Poller: "shop"}: {Changes: append([]watukuytest.Change(nil), changes...), Final: final}}
	}
	rep := watukuytest.RunChaos(t, []watukuytype.Poller{{Name: "shop", Strategy: watukuytype.SnapshotDiff, Fetch: s.fetch,
		Version: watukuytype.Field("version"), Handler: func(context.Context, watukuytype.Event) error { return nil }}},
		watukuytest.ChaosOptions{Seed: 11, Steps: 150, Between: between, Truth: truth})
	if rep.NotMeasured["G3"] || rep.NotMeasured["G6"] || rep.Failed() || rep.Deliveries == 0 {
		t.Fatalf("report: %+v", rep)
	}
}
