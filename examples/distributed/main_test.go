package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/redistest"
)

// delivered is the handlers' output, parsed: per item (tenant/id), the versions delivered in
// order, and which workers delivered; every line signals grew.
type delivered struct {
	mu       sync.Mutex
	lines    int
	versions map[string][]int
	types    map[string][]string
	by       map[string]int
	bad      []string
	grew     chan struct{}
}

func newDelivered() *delivered {
	return &delivered{versions: map[string][]int{}, types: map[string][]string{}, by: map[string]int{}, grew: make(chan struct{}, 1)}
}

// Write takes one line of printEvents: "worker type tenant/id vN".
func (d *delivered) Write(p []byte) (int, error) {
	d.mu.Lock()
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		f := strings.Fields(line)
		v, err := 0, error(nil)
		if len(f) == 4 {
			v, err = strconv.Atoi(strings.TrimPrefix(f[3], "v"))
		}
		if len(f) != 4 || err != nil {
			d.bad = append(d.bad, line)
			continue
		}
		d.lines++
		d.versions[f[2]] = append(d.versions[f[2]], v)
		d.types[f[2]] = append(d.types[f[2]], f[1])
		d.by[f[0]]++
	}
	d.mu.Unlock()
	select {
	case d.grew <- struct{}{}:
	default:
	}
	return len(p), nil
}

// wait returns once n events were delivered, or fails the test after timeout.
func (d *delivered) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		got := d.lines
		d.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-d.grew:
		case <-deadline.C:
			t.Fatalf("%d of %d events delivered after %v", got, n, timeout)
		}
	}
}

// One scheduler and two workers, each on an engine of its own, on a private redis-server:
// every change of the demo API arrives once, in order per item, and both workers run cycles.
func TestDistributedPool(t *testing.T) {
	b := redistest.Real(t)
	api := newDemoAPI()
	srv := httptest.NewServer(api.handler())
	defer srv.Close()
	out := newDelivered()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	s, err := newScheduler(b.Client, log)
	if err != nil {
		t.Fatal(err)
	}
	var workers []*worker
	for _, name := range []string{"w1", "w2"} {
		w, err := newWorker(b.Client, name, srv.URL, out, log)
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 3)
	go func() { errc <- s.Run(ctx) }()
	for _, w := range workers {
		go func() { errc <- w.Run(ctx) }()
	}

	want := map[string][]int{} // per item, the versions the API went through
	for _, tenant := range tenants {
		for i := 1; i <= 3; i++ {
			want[fmt.Sprintf("%s/item-%d", tenant, i)] = []int{1}
		}
	}
	expected := len(want)
	out.wait(t, expected, 30*time.Second)
	// Rounds of changes, each delivered before the next (a feed of current states shows only
	// an item's last change since the previous poll), until both workers have run cycles.
	ran := func() bool { return workers[0].cycles.Load() > 0 && workers[1].cycles.Load() > 0 }
	for round := 0; round < 3 || !ran(); round++ {
		if round == 40 {
			t.Fatalf("after 40 rounds the workers ran %d and %d cycles: both should run some", workers[0].cycles.Load(), workers[1].cycles.Load())
		}
		for _, tenant := range tenants {
			id := fmt.Sprintf("item-%d", 1+round%4)
			k := tenant + "/" + id
			want[k] = append(want[k], api.change(tenant, id))
			expected++
		}
		out.wait(t, expected, 30*time.Second)
	}
	cancel()
	for range 3 {
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	}

	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.bad) > 0 {
		t.Errorf("malformed event lines: %q", out.bad)
	}
	for k, versions := range want {
		if got := out.versions[k]; !slices.Equal(got, versions) {
			t.Errorf("%s: delivered versions %v, want %v (each once, in order)", k, got, versions)
		}
		types := out.types[k]
		if len(types) == 0 || types[0] != "created" || slices.ContainsFunc(types[1:], func(s string) bool { return s != "updated" }) {
			t.Errorf("%s: event types %v, want created then updated", k, types)
		}
	}
	if len(out.versions) != len(want) {
		t.Errorf("events for %d items, want %d: %v", len(out.versions), len(want), out.versions)
	}
	t.Logf("cycles: w1 %d, w2 %d; events delivered: %v", workers[0].cycles.Load(), workers[1].cycles.Load(), out.by)
}

// The banner lists each tenant's change feed as a real path the demo API answers.
func TestBannerListsTheFeeds(t *testing.T) {
	srv := httptest.NewServer(newDemoAPI().handler())
	defer srv.Close()
	lines := strings.Split(strings.TrimSpace(banner(srv.URL)), "\n")
	var feeds []string
	for _, l := range lines {
		if u, ok := strings.CutPrefix(strings.TrimSpace(l), srv.URL); ok {
			feeds = append(feeds, u)
		}
	}
	want := []string{"/tenants/eu/changes", "/tenants/us/changes", "/tenants/apac/changes"}
	if !slices.Equal(feeds, want) {
		t.Fatalf("the banner's feeds: %q, want %q in:\n%s", feeds, want, banner(srv.URL))
	}
	for _, f := range feeds {
		resp, err := http.Get(srv.URL + f + "?after=0&limit=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", f, resp.Status)
		}
	}
}

// Logs to a pipe carry no colour codes, nor with NO_COLOR set.
func TestLogsPlainOffTerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if !plain(w) {
		t.Error("colours on a pipe")
	}
	t.Setenv("NO_COLOR", "1")
	if !plain(os.Stdin) || !plain(w) {
		t.Error("colours with NO_COLOR set")
	}
}
