package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/buildinfo"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/pool"
	"github.com/watukuy/watukuy/watukuytype"
)

// onBackends runs fn on miniredis and on a private redis-server.
func onBackends(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, redistest.Miniredis(t).Client) })
	t.Run("redis", func(t *testing.T) { fn(t, redistest.Real(t).Client) })
}

// get answers a GET of path on h: status and body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// engine returns an engine on rdb with p registered (when it has a name).
func engine(t *testing.T, rdb redis.UniversalClient, name string, p watukuytype.Poller) *watukuy.Engine {
	t.Helper()
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, InstanceID: name, Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "" {
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	return eng
}

// runAll runs each of fns until stop, which cancels them and returns what they returned; the
// test's cleanup stops them too, before its Redis closes (also when the test fails).
func runAll(t *testing.T, fns ...func(context.Context) error) (stop func() []error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errc <- fn(ctx) }()
	}
	var once sync.Once
	var errs []error
	stop = func() []error {
		once.Do(func() {
			cancel()
			for range fns {
				if err := <-errc; err != nil {
					errs = append(errs, err)
				}
			}
		})
		return errs
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A process whose engine was stopped is not ready: /readyz answers 503 and says so.
func TestStoppedEngineIsNotReady(t *testing.T) {
	rdb := redistest.Miniredis(t).Client
	eng := engine(t, rdb, "w", watukuytype.Poller{})
	p := pool.New(eng, pool.Options{})
	if err := eng.Stop(true, time.Second); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, p.Handler(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "engine is stopped") {
		t.Fatalf("/readyz of a stopped engine: %d %q, want 503 saying it is stopped", code, body)
	}
}

// A Scheduler and two Workers, each on an engine of its own (as in processes of their own),
// run a Go-defined poller: every partition's item is delivered once; the handler of a
// worker's process answers /healthz, /readyz (503 until the worker runs and after it
// stopped) and /metrics.
func TestWorkerAndSchedulerRunGoPoller(t *testing.T) {
	onBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		partitions := []string{"a", "b", "c", "d"}
		var mu sync.Mutex
		got := map[string][]string{} // partition: the workers that delivered its item
		done := make(chan struct{})
		poller := func(worker string) watukuytype.Poller {
			return watukuytype.Poller{Name: "p", Partitions: partitions, Strategy: watukuytype.SnapshotDiff,
				Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
					return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(`{"id":"` + req.Key.Partition + `"}`)}}, nil
				},
				Handler: func(ctx context.Context, ev watukuytype.Event) error {
					mu.Lock()
					defer mu.Unlock()
					got[ev.Partition] = append(got[ev.Partition], worker)
					if len(got) == len(partitions) {
						select {
						case <-done:
						default:
							close(done)
						}
					}
					return nil
				},
				Schedule: watukuytype.Schedule{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond, Fixed: true}}
		}
		reg := prometheus.NewRegistry()
		p1 := pool.New(engine(t, rdb, "w1", poller("w1")), pool.Options{Registry: reg})
		w1 := p1.Worker(pool.WorkerOptions{Concurrency: 2})
		w2 := pool.New(engine(t, rdb, "w2", poller("w2")), pool.Options{}).Worker(pool.WorkerOptions{Concurrency: 2})
		ps := pool.New(engine(t, rdb, "s", watukuytype.Poller{}), pool.Options{})
		sch := ps.Scheduler(pool.SchedulerOptions{})
		if code, body := get(t, p1.Handler(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
			t.Fatalf("/readyz before Start: %d %q", code, body)
		}

		stop := runAll(t, sch.Run, w1.Run, w2.Run)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			mu.Lock()
			t.Fatalf("after 30s delivered %v", got)
		}
		for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": "watukuy_redis_up 1"} {
			if code, body := get(t, p1.Handler(), path); code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("%s while running: %d %q, want 200 with %q", path, code, body, want)
			}
		}
		if code, _ := get(t, ps.Handler(), "/readyz"); code != http.StatusOK {
			t.Errorf("scheduler /readyz: %d", code)
		}
		if errs := stop(); len(errs) > 0 {
			t.Errorf("run: %v", errs)
		}
		if code, _ := get(t, p1.Handler(), "/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz after Shutdown: %d, want 503", code)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range partitions {
			if len(got[p]) != 1 {
				t.Errorf("partition %s delivered by %v, want once (the item never changes)", p, got[p])
			}
		}
	})
}

// Shutdown(true) gives up a request in flight at once (long before DrainTimeout): the cycle
// releases its lease and leaves its key due at once, for another worker to take over.
func TestWorkerShutdownDrainHandsKeyBack(t *testing.T) {
	onBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		fetching := make(chan struct{}, 1)
		eng := engine(t, rdb, "w", watukuytype.Poller{Name: "slow",
			Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				select {
				case fetching <- struct{}{}:
				default:
				}
				<-ctx.Done() // an API that does not answer
				return watukuytype.Page{}, ctx.Err()
			},
			Handler: func(ctx context.Context, ev watukuytype.Event) error { return nil }})
		p := pool.New(eng, pool.Options{})
		w := p.Worker(pool.WorkerOptions{DrainTimeout: time.Minute})
		sch := p.Scheduler(pool.SchedulerOptions{})
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Shutdown(false) })
		stop := runAll(t, sch.Run)
		select {
		case <-fetching:
		case <-time.After(30 * time.Second):
			t.Fatal("no cycle started within 30s")
		}
		start := time.Now()
		if err := w.Shutdown(true); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Shutdown(true) took %v: a request in flight must be given up at once", d)
		}
		ki, err := eng.Inspect(context.Background(), watukuytype.Key{Poller: "slow", Partition: ""})
		if err != nil {
			t.Fatal(err)
		}
		if ki.LeaseOwner != "" || ki.NextDueAt == nil || time.Until(*ki.NextDueAt) > 2*time.Second {
			t.Errorf("after the drain: lease owner %q, next due %v; want the lease released and the key due at once", ki.LeaseOwner, ki.NextDueAt)
		}
		if errs := stop(); len(errs) > 0 {
			t.Errorf("scheduler: %v", errs)
		}
	})
}

// lineSignal is a log writer that closes seen at the first line containing want.
type lineSignal struct {
	want string
	seen chan struct{}
	once sync.Once
	line string // the first line with want, readable once seen is closed
}

func (l *lineSignal) Write(p []byte) (int, error) {
	if strings.Contains(string(p), l.want) {
		l.once.Do(func() { l.line = string(p); close(l.seen) })
	}
	return len(p), nil
}

// A Scheduler's data watcher only reports a loss; a Worker started after it on the same
// Process (watukuy run) replaces it with one that registers the pollers again, so the key is
// polled again after Redis lost its data.
func TestSchedulerThenWorkerRegisterAgainAfterDataLoss(t *testing.T) {
	rdb := redistest.Miniredis(t).Client
	fetched := make(chan struct{}, 100)
	eng := engine(t, rdb, "w", watukuytype.Poller{Name: "p",
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			fetched <- struct{}{}
			return watukuytype.Page{}, nil
		},
		Handler:  func(ctx context.Context, ev watukuytype.Event) error { return nil },
		Schedule: watukuytype.Schedule{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond, Fixed: true}})
	started := &lineSignal{want: "scheduler started", seen: make(chan struct{})}
	p := pool.New(eng, pool.Options{Logger: zerolog.New(started)})
	sch := p.Scheduler(pool.SchedulerOptions{})
	w := p.Worker(pool.WorkerOptions{})
	ctx := context.Background()
	stop := runAll(t, sch.Run)
	<-started.seen // its report-only watcher runs
	if v := fmt.Sprintf("%q:%q", "version", buildinfo.Read().String()); !strings.Contains(started.line, v) {
		t.Errorf("the scheduler's start line does not name the build (%s): %s", v, started.line)
	}
	if !strings.Contains(started.line, `"pollers":["p"],"everyRegistered":true`) {
		t.Errorf("the scheduler's start line does not name the registered poller it claims for: %s", started.line)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(false) })
	// The watcher records the database's data id at its first check; a loss is told by it.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for n := 0; rdb.Exists(ctx, "wk:{global}:data-id").Val() == 0; n++ {
		if n == 500 {
			t.Fatal("no data id recorded within 10s")
		}
		<-tick.C
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Without its due entry the key is never polled again, unless registered again: a cycle
	// running at the flush fetches once more at most.
	for range len(fetched) {
		<-fetched
	}
	for i := range 2 {
		select {
		case <-fetched:
		case <-time.After(20 * time.Second):
			t.Fatalf("fetch %d after the data loss did not come: the pollers were not registered again", i+1)
		}
	}
	if errs := stop(); len(errs) > 0 {
		t.Errorf("scheduler: %v", errs)
	}
}

// Serve serves the process's handler on a free port until its context ends, and a busy
// address fails at once.
func TestProcessServe(t *testing.T) {
	onBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		p := pool.New(engine(t, rdb, "s", watukuytype.Poller{}), pool.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		addr, err := p.Serve(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("/readyz of a scheduler's process: %d %q, want 200 ok", resp.StatusCode, body)
		}
		if _, err := pool.New(engine(t, rdb, "s2", watukuytype.Poller{}), pool.Options{}).Serve(ctx, addr); err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("Serve on the busy %s: %v, want an error naming it", addr, err)
		}
	})
}

// Handler serves the admin API and the status page with Options.Admin's tokens, and says both
// are off without one.
func TestHandlerServesAdmin(t *testing.T) {
	onBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		eng := engine(t, rdb, "s", watukuytype.Poller{})
		if code, body := get(t, pool.New(eng, pool.Options{}).Handler(), "/api/keys"); code != http.StatusNotFound || !strings.Contains(body, "api_off") {
			t.Errorf("/api/keys without tokens: %d %s", code, body)
		}
		tokens, err := admintoken.NewSet(admintoken.Token{ID: "ops", Secret: "ops-secret-0123456789"})
		if err != nil {
			t.Fatal(err)
		}
		h := pool.New(eng, pool.Options{Admin: tokens}).Handler()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/api/whoami", nil)
		req.Header.Set("Authorization", "Bearer ops-secret-0123456789")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"id": "ops"`) {
			t.Errorf("/api/whoami with the token: %d %s", rec.Code, rec.Body)
		}
		if code, body := get(t, h, "/status"); code != http.StatusUnauthorized || !strings.Contains(body, `<form`) {
			t.Errorf("/status logged out: %d %.200s", code, body)
		}
	})
}

// The engine's metrics reach a Go program's /metrics through NewMetrics: the series the
// engine's hooks feed (cycles) and the per-key gauges read from Redis (outbox, parked), with
// the Redis metrics beside them.
func TestMetricsExportTheEngineSeries(t *testing.T) {
	onBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		reg := prometheus.NewRegistry()
		m := pool.NewMetrics(reg)
		eng, err := watukuy.New(watukuy.Options{Redis: rdb, InstanceID: "m", Hooks: m.Hooks(watukuytype.Hooks{})})
		if err != nil {
			t.Fatal(err)
		}
		err = eng.Register(watukuytype.Poller{Name: "orders", Identity: watukuytype.Field("id"),
			Fetch: func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				return watukuytype.Page{Items: []json.RawMessage{[]byte(`{"id":"a"}`)}, Next: req.Cursor}, nil
			},
			Handler: func(context.Context, watukuytype.Event) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := eng.Tick(context.Background(), 5*time.Second); err != nil || rep.Ran != 1 {
			t.Fatalf("tick: %+v %v", rep, err)
		}
		p := pool.New(eng, pool.Options{Registry: reg, Metrics: m})
		code, body := get(t, p.Handler(), "/metrics")
		for _, want := range []string{`watukuy_cycles_total{outcome="ran",poller="orders"} 1`, `watukuy_outbox_pending{partition="",poller="orders"} 0`,
			`watukuy_parked{partition="",poller="orders"} 0`, "watukuy_redis_up"} {
			if code != http.StatusOK || !strings.Contains(body, want) {
				t.Fatalf("/metrics %d lacks %s:\n%s", code, want, body)
			}
		}
	})
}
