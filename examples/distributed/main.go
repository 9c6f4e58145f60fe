// Command distributed runs a poller defined in Go on watukuy's distributed pool (package
// pool): a Scheduler moves due keys into asynq tasks, and Workers, as many as you start, run
// their cycles. The poller has its own Fetch, against a small demo API in this file whose items
// change every second, and a Handler that prints each event with the worker that delivered
// it.
//
// Everything in one process (the demo API, one scheduler and two workers, each worker on an
// engine of its own as it would be in a process of its own):
//
//	go run ./examples/distributed -redis redis://127.0.0.1:6379/0
//
// Or one process per role, on the same Redis:
//
//	go run ./examples/distributed -role api -api 127.0.0.1:8088
//	go run ./examples/distributed -role scheduler -admin 127.0.0.1:9091
//	go run ./examples/distributed -role worker -api http://127.0.0.1:8088 -name w1 -admin 127.0.0.1:9090
//	go run ./examples/distributed -role worker -api http://127.0.0.1:8088 -name w2
//
// -admin serves /healthz, /readyz, /metrics and asynqmon at /monitoring/ next to a route of
// the program's own.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/pool"
	"github.com/watukuy/watukuy/watukuytype"
)

// tenants are the poller's partitions: one key, and so one task per cycle, each.
var tenants = []string{"eu", "us", "apac"}

func main() {
	role := flag.String("role", "all", "all, api, scheduler or worker")
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL")
	api := flag.String("api", "", "api: address to serve the demo API on (default 127.0.0.1:8088); worker: its base URL")
	name := flag.String("name", "", "worker: its name in leases and in the printed events (default host-pid)")
	adminAddr := flag.String("admin", "", "scheduler, worker: address of /healthz, /readyz, /metrics and /monitoring/ (default none)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly, NoColor: plain(os.Stderr)}).With().Timestamp().Logger().Level(zerolog.InfoLevel)
	if err := run(ctx, *role, *redisURL, *api, *name, *adminAddr, os.Stdout, log); err != nil {
		fmt.Fprintln(os.Stderr, "distributed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, role, redisURL, api, name, adminAddr string, out io.Writer, log zerolog.Logger) error {
	if role == "api" {
		if api == "" {
			api = "127.0.0.1:8088"
		}
		return serveDemoAPI(ctx, api, log)
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("-redis: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	switch role {
	case "all":
		return runAll(ctx, rdb, out, log)
	case "scheduler":
		s, err := newScheduler(rdb, log)
		if err != nil {
			return err
		}
		return withAdmin(ctx, adminAddr, s.proc.Handler(), log, s.Run)
	case "worker":
		if api == "" {
			return errors.New("-api: a worker needs the demo API's base URL")
		}
		if name == "" {
			host, _ := os.Hostname()
			name = fmt.Sprintf("%s-%d", host, os.Getpid())
		}
		w, err := newWorker(rdb, name, api, out, log)
		if err != nil {
			return err
		}
		err = withAdmin(ctx, adminAddr, w.proc.Handler(), log, w.Run)
		fmt.Fprintf(out, "%s ran %d cycles\n", name, w.cycles.Load())
		return err
	}
	return fmt.Errorf("-role %q: want all, api, scheduler or worker", role)
}

// runAll runs the demo API, one scheduler and two workers in this process until ctx ends.
func runAll(ctx context.Context, rdb redis.UniversalClient, out io.Writer, log zerolog.Logger) error {
	api := newDemoAPI()
	srv := &http.Server{Handler: api.handler(), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	go api.changeEvery(ctx, time.Second)
	apiURL := "http://" + ln.Addr().String()
	fmt.Fprint(out, banner(apiURL))

	s, err := newScheduler(rdb, log)
	if err != nil {
		return err
	}
	workers := make([]*worker, 2)
	for i := range workers {
		if workers[i], err = newWorker(rdb, fmt.Sprintf("w%d", i+1), apiURL, out, log); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1+len(workers))
	go func() { errc <- s.Run(ctx) }()
	for _, w := range workers {
		go func() { errc <- w.Run(ctx) }()
	}
	var errs []error
	for range 1 + len(workers) {
		if err := <-errc; err != nil {
			errs = append(errs, err)
			cancel() // one that cannot run stops the others
		}
	}
	for _, w := range workers {
		fmt.Fprintf(out, "%s ran %d cycles\n", w.name, w.cycles.Load())
	}
	return errors.Join(errs...)
}

// banner says where the demo API's change feeds are, one line per tenant.
func banner(apiURL string) string {
	var b strings.Builder
	b.WriteString("demo API change feeds:\n")
	for _, t := range tenants {
		fmt.Fprintf(&b, "  %s\n", feedURL(apiURL, t))
	}
	b.WriteString("events (Ctrl-C stops):\n")
	return b.String()
}

// feedURL is the change feed of tenant on the demo API at apiURL.
func feedURL(apiURL, tenant string) string {
	return apiURL + "/tenants/" + url.PathEscape(tenant) + "/changes"
}

// scheduler is the pool's scheduler with the process it runs in (its endpoints).
type scheduler struct {
	*pool.Scheduler
	proc *pool.Process
}

// newScheduler returns the pool's scheduler, on an engine of its own that needs no pollers:
// it claims the keys the workers registered.
func newScheduler(rdb redis.UniversalClient, log zerolog.Logger) (*scheduler, error) {
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Logger: log})
	if err != nil {
		return nil, err
	}
	proc := pool.New(eng, pool.Options{Logger: log, Registry: prometheus.NewRegistry(), UI: true})
	return &scheduler{Scheduler: proc.Scheduler(pool.SchedulerOptions{}), proc: proc}, nil
}

// worker is one worker of the pool with the process it runs in (its endpoints).
type worker struct {
	*pool.Worker
	proc   *pool.Process
	name   string
	cycles atomic.Int64 // cycles that fetched, for the summary
}

// newWorker returns a worker named name running the items poller against the demo API at
// apiURL, on an engine of its own.
func newWorker(rdb redis.UniversalClient, name, apiURL string, out io.Writer, log zerolog.Logger) (*worker, error) {
	w := &worker{name: name}
	log = log.With().Str("worker", name).Logger()
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, InstanceID: name, Logger: log,
		Hooks: watukuytype.Hooks{OnCycle: func(r watukuytype.CycleReport, _ time.Duration) {
			if r.Pages > 0 {
				w.cycles.Add(1)
			}
		}}})
	if err != nil {
		return nil, err
	}
	if err := eng.Register(itemsPoller(apiURL, printEvents(out, name))); err != nil {
		return nil, err
	}
	w.proc = pool.New(eng, pool.Options{Logger: log, Registry: prometheus.NewRegistry(), UI: true})
	w.Worker = w.proc.Worker(pool.WorkerOptions{Concurrency: 2})
	return w, nil
}

// itemsPoller follows the demo API's change feed of every tenant: the cursor is the feed's
// sequence number, committed with the events of the page it ends.
func itemsPoller(apiURL string, h watukuytype.Handler) watukuytype.Poller {
	return watukuytype.Poller{
		Name:       "items",
		Partitions: tenants,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			after := req.Cursor
			if after == "" {
				after = "0"
			}
			u := fmt.Sprintf("%s?after=%s&limit=10", feedURL(apiURL, req.Key.Partition), url.QueryEscape(after))
			r, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return watukuytype.Page{}, err
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				return watukuytype.Page{}, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return watukuytype.Page{}, fmt.Errorf("GET %s: %s", u, resp.Status)
			}
			var body feedPage
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				return watukuytype.Page{}, fmt.Errorf("GET %s: %w", u, err)
			}
			return watukuytype.Page{Items: body.Items, Next: body.Next, HasMore: body.HasMore}, nil
		},
		Version:  watukuytype.Field("version"),
		Handler:  h,
		Schedule: watukuytype.Schedule{Min: 300 * time.Millisecond, Max: 300 * time.Millisecond, Fixed: true},
	}
}

// printEvents is the poller's handler: one line per event, naming the worker that delivered
// it.
func printEvents(out io.Writer, worker string) watukuytype.Handler {
	var mu sync.Mutex
	return func(ctx context.Context, ev watukuytype.Event) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := fmt.Fprintf(out, "%s %s %s/%s v%s\n", worker, ev.Type, ev.Partition, ev.Identity, ev.Version)
		return err
	}
}

// withAdmin runs fn until it returns; with addr it also serves the process's admin handler
// (health, readiness, the registry's metrics, asynqmon) in the program's own mux, next to a
// route of its own.
func withAdmin(ctx context.Context, addr string, admin http.Handler, log zerolog.Logger, fn func(context.Context) error) error {
	if addr == "" {
		return fn(ctx)
	}
	mux := http.NewServeMux()
	mux.Handle("/", admin) // its routes are absolute: /healthz, /readyz, /metrics, /monitoring/
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "distributed example") })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("addr", addr).Msg("admin server")
		}
	}()
	defer srv.Close()
	log.Info().Str("addr", addr).Msg("serving /healthz /readyz /metrics /monitoring/ /version")
	return fn(ctx)
}

// The demo API: per tenant, a change feed of items. Every change of an item gives it the
// next sequence number and version; GET /tenants/{tenant}/changes?after=N&limit=M answers
// the items changed after sequence N, oldest change first, in their current state.

// item is one item of the demo API.
type item struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version int    `json:"version"`
	Seq     int    `json:"seq"`
}

// feedPage is one answer of the change feed.
type feedPage struct {
	Items   []json.RawMessage `json:"items"`
	Next    string            `json:"next"`
	HasMore bool              `json:"has_more"`
}

// demoAPI is the in-memory demo API.
type demoAPI struct {
	mu    sync.Mutex
	seq   int
	items map[string]map[string]*item // tenant, id
}

// newDemoAPI returns the demo API with three items per tenant.
func newDemoAPI() *demoAPI {
	a := &demoAPI{items: map[string]map[string]*item{}}
	for _, t := range tenants {
		a.items[t] = map[string]*item{}
		for i := 1; i <= 3; i++ {
			a.change(t, fmt.Sprintf("item-%d", i))
		}
	}
	return a
}

// change changes (or creates) an item of tenant and returns its new version.
func (a *demoAPI) change(tenant, id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	it := a.items[tenant][id]
	if it == nil {
		it = &item{ID: id}
		a.items[tenant][id] = it
	}
	a.seq++
	it.Version++
	it.Seq = a.seq
	it.Name = fmt.Sprintf("%s of %s, version %d", id, tenant, it.Version)
	return it.Version
}

// changeEvery changes a random item every d until ctx ends.
func (a *demoAPI) changeEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.change(tenants[rand.IntN(len(tenants))], fmt.Sprintf("item-%d", 1+rand.IntN(4)))
		}
	}
}

// handler serves the change feed.
func (a *demoAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /tenants/{tenant}/changes", a.changes)
	return mux
}

func (a *demoAPI) changes(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	after, err1 := strconv.Atoi(r.URL.Query().Get("after"))
	limit, err2 := strconv.Atoi(r.URL.Query().Get("limit"))
	if err1 != nil || err2 != nil || limit <= 0 {
		http.Error(w, "want /tenants/{tenant}/changes?after=N&limit=M", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	items, known := a.items[tenant]
	var changed []item
	for _, it := range items {
		if it.Seq > after {
			changed = append(changed, *it)
		}
	}
	a.mu.Unlock()
	if !known {
		http.NotFound(w, r)
		return
	}
	slices.SortFunc(changed, func(x, y item) int { return x.Seq - y.Seq })
	page := feedPage{Items: []json.RawMessage{}, Next: strconv.Itoa(after)}
	if len(changed) > limit {
		changed, page.HasMore = changed[:limit], true
	}
	for _, it := range changed {
		raw, _ := json.Marshal(it)
		page.Items = append(page.Items, raw)
		page.Next = strconv.Itoa(it.Seq)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// serveDemoAPI serves the demo API on addr, its items changing every second, until ctx ends.
func serveDemoAPI(ctx context.Context, addr string, log zerolog.Logger) error {
	api := newDemoAPI()
	go api.changeEvery(ctx, time.Second)
	srv := &http.Server{Addr: addr, Handler: api.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info().Str("url", "http://"+addr).Msg("demo API serving")
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// plain says whether logs to f go without ANSI colours: f is no terminal (a file, a pipe), or
// NO_COLOR is set (no-color.org).
func plain(f *os.File) bool {
	return os.Getenv("NO_COLOR") != "" || !isatty.IsTerminal(f.Fd()) && !isatty.IsCygwinTerminal(f.Fd())
}
