package admin_test

// Operators racing cycles and each other: no answer is a 500 (a busy key is a retryable 503),
// and afterwards every change reaches the handler and every key has its due entry.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytype"
)

// An action that needs the key's lease while a cycle holds it (a slow API) gives up after 5 s
// with "try again": a retryable 503 key_busy with Retry-After, not a 500.
func TestActionWhileCycleHoldsLease(t *testing.T) {
	s := newSite(t)
	api := fakeapi.New()
	api.PutMany(3, "w", nil)
	var slow atomic.Bool
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	api.OnFetch(func(ctx context.Context, _ watukuytype.FetchRequest) error {
		if slow.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	s.addPoller(watukuytype.Poller{Name: "slow"}, api)
	slow.Store(true)
	ok[any](s, "POST", "/api/keys/slow/-/trigger", "")
	ctx, cancel := context.WithCancel(context.Background())
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		_, _ = s.eng.Tick(ctx, 60*time.Second)
	}()
	defer func() { cancel(); <-ticked }()
	defer close(release)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the cycle did not start")
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/keys/slow/-/reset-cursor", `{"cursor": null}`},
		{"DELETE", "/api/pollers/slow/partitions/-", ""},
	} {
		start := time.Now()
		code, h, b := s.raw(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		if code != 503 || codeOf(b) != "key_busy" || h.Get("Retry-After") == "" {
			t.Errorf("%s %s while a cycle holds the key: %d (Retry-After %q) %s after %v; want 503 key_busy with Retry-After",
				r.method, r.path, code, h.Get("Retry-After"), b, time.Since(start).Round(time.Millisecond))
		}
	}
	if s.inspect("slow", "").Paused {
		t.Error("a refused remove paused the key")
	}
}

// raceSite is a site with poller "race" (partitions p1 and p2 on one change feed that a
// writer keeps changing) whose handler records the highest version delivered per partition
// and identity.
type raceSite struct {
	*site
	api *fakeapi.API
	mu  sync.Mutex
	got map[string]map[string]int // partition → identity → highest version delivered
}

func newRaceSite(t *testing.T) *raceSite {
	s := &raceSite{site: newSite(t), api: fakeapi.New(), got: map[string]map[string]int{}}
	s.api.PutMany(20, "r", nil)
	s.addPoller(watukuytype.Poller{Name: "race", Partitions: []string{"p1", "p2"}, Handler: func(_ context.Context, ev watukuytype.Event) error {
		var v int
		fmt.Sscan(ev.Version, &v)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.got[ev.Partition] == nil {
			s.got[ev.Partition] = map[string]int{}
		}
		s.got[ev.Partition][ev.Identity] = max(s.got[ev.Partition][ev.Identity], v)
		return nil
	}}, s.api)
	return s
}

// storm runs ops (method, path, body) from workers goroutines at random for d while a
// writer changes items and a loop ticks the engine; it returns every answer's status and
// code, counted.
func (s *raceSite) storm(d time.Duration, workers int, ops [][3]string) map[string]int {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the API's items change
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			s.api.Put(fmt.Sprintf("r%04d", i%20), nil)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	go func() { // a worker; its last tick ends by itself (a cancelled cycle would keep its lease)
		defer wg.Done()
		for ctx.Err() == nil {
			_, _ = s.eng.Tick(context.Background(), 300*time.Millisecond)
		}
	}()
	var mu sync.Mutex
	seen := map[string]int{}
	var ow sync.WaitGroup
	deadline := time.Now().Add(d)
	for w := range workers {
		ow.Add(1)
		go func() {
			defer ow.Done()
			for i := w; time.Now().Before(deadline); i += workers {
				op := ops[i%len(ops)]
				code, _, b := s.raw(op[0], op[1], op[2], func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
				mu.Lock()
				k := fmt.Sprintf("%d %s", code, codeOf(b))
				seen[k]++
				if code >= 500 && codeOf(b) != "key_busy" {
					s.t.Errorf("%s %s during the storm: %d %.300s", op[0], op[1], code, b)
				}
				mu.Unlock()
			}
		}()
	}
	ow.Wait()
	cancel()
	wg.Wait()
	return seen
}

// settle ticks until the race keys' outboxes are empty and every identity's final version
// has been delivered on each partition in parts, or fails.
func (s *raceSite) settle(parts ...string) {
	t := s.t
	t.Helper()
	final := s.api.Final()
	for range 30 {
		for _, p := range parts {
			if err := s.eng.Trigger(context.Background(), watukuytype.Key{Poller: "race", Partition: p}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.eng.Tick(context.Background(), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		missing := 0
		for _, p := range parts {
			for id, v := range final {
				if s.got[p][id] < v {
					missing++
				}
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return
		}
	}
	for _, p := range parts {
		ki := s.inspect("race", p)
		b, _ := json.Marshal(ki)
		t.Logf("%s: %s", p, b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		for id, v := range final {
			if s.got[p][id] < v {
				t.Errorf("%s %s: version %d was never delivered (highest %d)", p, id, v, s.got[p][id])
			}
		}
	}
}

// noOrphans checks that the repair sweep finds nothing to repair (every live key has its
// due entry) and that every due entry of poller names a key the engine knows.
func (s *site) noOrphans(poller string) {
	t := s.t
	t.Helper()
	ctx := context.Background()
	if rep, err := s.eng.RepairDue(ctx); err != nil || len(rep) > 0 {
		t.Errorf("RepairDue after the storm: %v %v (a key was left without a due entry)", rep, err)
	}
	keys, _, err := s.eng.KeysPage(ctx, poller, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k.String()] = true
	}
	for _, m := range s.b.Client.ZRange(ctx, "wk:{global}:due:"+poller, 0, -1).Val() {
		if !known[m] {
			t.Errorf("due entry %q names no key of %s (%v)", m, poller, keys)
		}
	}
}

// Operators pause, resume, trigger, backfill and reset a key (and its poller) at once while
// cycles run and items change: no answer is a 500, and afterwards every change of the API
// reaches the handler on both partitions and every key has its due entry.
func TestRaceOperatorsAndCycles(t *testing.T) {
	s := newRaceSite(t)
	seen := s.storm(4*time.Second, 4, [][3]string{
		{"POST", "/api/keys/race/p1/pause", ""},
		{"POST", "/api/keys/race/p1/resume", ""},
		{"POST", "/api/keys/race/p1/trigger", ""},
		{"POST", "/api/pollers/race/trigger", ""},
		{"POST", "/api/keys/race/p1/backfill", `{"from": null}`},
		{"POST", "/api/keys/race/p1/reset-cursor", `{"cursor": null}`},
		{"POST", "/api/pollers/race/pause", ""},
		{"POST", "/api/pollers/race/resume", ""},
		{"GET", "/api/keys?poller=race", ""},
	})
	t.Logf("answers: %v", seen)
	ok[any](s.site, "POST", "/api/pollers/race/resume", "")
	s.settle("p1", "p2")
	s.noOrphans("race")
}

// partitions delete, add and remove race pause, resume, trigger and cycles of one key: the
// answers are 200, 404, 409 or 503 key_busy; afterwards due entries match the live keys, and
// the key, added once more, polls and delivers again.
func TestRacePartitionLifecycle(t *testing.T) {
	s := newRaceSite(t)
	ok[any](s.site, "POST", "/api/pollers/race/partitions", `{"partition": "p3"}`)
	seen := s.storm(4*time.Second, 6, [][3]string{
		{"POST", "/api/keys/race/p3/pause", ""},
		{"POST", "/api/keys/race/p3/resume", ""},
		{"POST", "/api/keys/race/p3/trigger", ""},
		{"DELETE", "/api/pollers/race/partitions/p3?purge=true", ""},
		{"POST", "/api/pollers/race/partitions", `{"partition": "p3"}`},
		{"DELETE", "/api/pollers/race/partitions/p3", ""},
		{"POST", "/api/keys/race/p1/trigger", ""},
	})
	t.Logf("answers: %v", seen)
	for k := range seen {
		switch k {
		case "200 ", "404 not_found", "409 conflict", "503 key_busy":
		default:
			t.Errorf("answer %q during the storm", k)
		}
	}
	for range 3 { // stale tasks and due entries of the storm play out
		_, _ = s.eng.Tick(context.Background(), time.Second)
	}
	s.noOrphans("race")
	// Bring p3 back, and see it work. (Deleted first, so that it comes back empty whatever
	// the storm's last actions left; see TestDeleteRacesQueuedAction.)
	if code, b := s.do("DELETE", "/api/pollers/race/partitions/p3?purge=true", opsSecret, ""); code != 200 && code != 404 {
		t.Fatalf("delete p3: %d %s", code, b)
	}
	ok[any](s.site, "POST", "/api/pollers/race/partitions", `{"partition": "p3"}`)
	s.mu.Lock()
	delete(s.got, "p3")
	s.mu.Unlock()
	s.settle("p1", "p3")
	if ki := s.inspect("race", "p3"); ki.Paused || ki.Items == 0 {
		t.Errorf("p3 after the storm: %+v", ki)
	}
	s.noOrphans("race")
}
