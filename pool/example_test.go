package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/pool"
	"github.com/watukuy/watukuy/watukuytype"
)

// A worker process of the distributed pool: it registers its Go-defined pollers and runs
// their cycles from the tasks the schedulers enqueue, until SIGTERM, when it hands its keys
// back to the other workers. Start as many as the APIs need, on the same Redis.
func ExampleProcess_Worker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	reg := prometheus.NewRegistry()
	m := pool.NewMetrics(reg) // the watukuy_* series the alert rules and the dashboard read
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Logger: log, Hooks: m.Hooks(watukuytype.Hooks{})})
	if err != nil {
		panic(err)
	}
	err = eng.Register(watukuytype.Poller{
		Name:       "orders",
		Partitions: []string{"t_1", "t_2"},
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: []json.RawMessage{}, Next: req.Cursor}, nil // call the API here
		},
		Handler: func(ctx context.Context, ev watukuytype.Event) error {
			fmt.Println(ev.Type, ev.Partition, ev.Identity)
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	p := pool.New(eng, pool.Options{Logger: log, Registry: reg, Metrics: m, UI: true})
	w := p.Worker(pool.WorkerOptions{Concurrency: 10})

	// /healthz, /readyz, /metrics and asynqmon at /monitoring/, next to the program's routes.
	mux := http.NewServeMux()
	mux.Handle("/", p.Handler())
	go func() { _ = http.ListenAndServe("127.0.0.1:9090", mux) }()

	if err := w.Run(ctx); err != nil { // Start, then Shutdown(true) when ctx ends
		panic(err)
	}
}

// A scheduler process of the distributed pool: it needs no pollers, only the Redis the
// workers register theirs in. One or two of them serve any number of workers.
func ExampleProcess_Scheduler() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Logger: log})
	if err != nil {
		panic(err)
	}
	// The admin API (/api/) and the status page (/status) take these tokens; a read-only one
	// can look but not act.
	admin, err := admintoken.NewSet(
		admintoken.Token{ID: "ops", Secret: os.Getenv("OPS_TOKEN")},
		admintoken.Token{ID: "dashboards", Secret: os.Getenv("DASHBOARD_TOKEN"), ReadOnly: true})
	if err != nil {
		panic(err)
	}
	p := pool.New(eng, pool.Options{Logger: log, Registry: prometheus.NewRegistry(), Admin: admin})
	if _, err := p.Serve(ctx, "127.0.0.1:9091"); err != nil { // or mount p.Handler() in a server of your own
		panic(err)
	}
	if err := p.Scheduler(pool.SchedulerOptions{}).Run(ctx); err != nil {
		panic(err)
	}
}
