package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// failoverConfig is one poller on a 1 s schedule whose requests may hang for a minute (the
// API hanging mid-request when its worker dies), with a stdout sink.
func failoverConfig(redisURL, apiURL string, leaseTTL time.Duration) string {
	return fmt.Sprintf(`redis: %s
prefix: wk
pollers:
  - name: orders
    request: {url: %s/items, timeout: 60s}
    items: data
    version: version
    cursor: {strategy: timestamp, field: updated_at, param: updated_since, limitParam: limit, limit: 20, hasMore: has_more, tieBreaker: after_id}
    schedule: {min: 1s, max: 1s}
    leaseTTL: %s
    delivery:
      stdout: {}
`, redisURL, apiURL, leaseTTL)
}

// durationEnv reads a duration from the environment (def when unset).
func durationEnv(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return d
	}
	return def
}

// failover is the world of TestFailoverTimes: one scheduler, two workers, one key.
type failover struct {
	t       *testing.T
	bins    string
	common  []string
	srv     *fakeapi.Server
	st      *redisstore.Store
	rdb     redis.UniversalClient
	mu      sync.Mutex
	workers map[string]*proc // by instance id
	n       int
}

func (f *failover) startWorker() {
	f.n++
	id := "worker-" + strconv.Itoa(f.n)
	p := start(f.t, filepath.Join(f.bins, "watukuy-worker"), append(f.common, "--instance-id", id, "--drain-timeout", "10s")...)
	f.mu.Lock()
	f.workers[id] = p
	f.mu.Unlock()
}

// hang makes the next request hang and waits until one hangs; it returns the instance
// holding the key's lease, whose cycle sent it.
func (f *failover) hang(ctx context.Context) (string, *proc) {
	f.t.Helper()
	armed := time.Now()
	f.srv.Inject(fakeapi.Fault{Path: "/items", Delay: time.Hour})
	for ctx.Err() == nil {
		for _, r := range f.srv.Requests() {
			if r.Path == "/items" && r.Status == 0 && r.Wall.After(armed) {
				snap, err := f.st.Inspect(ctx, watukuytype.Key{Poller: "orders"})
				if err != nil {
					f.t.Fatal(err)
				}
				f.mu.Lock()
				p := f.workers[snap.LeaseOwner]
				f.mu.Unlock()
				if p == nil {
					f.t.Fatalf("the hanging request's cycle is held by %q, no worker of the test", snap.LeaseOwner)
				}
				return snap.LeaseOwner, p
			}
		}
		time.Sleep(10 * time.Millisecond) // polling real processes: there is no signal to wait on
	}
	f.diagnose()
	f.t.Fatalf("no request hung: %v", ctx.Err())
	return "", nil
}

// diagnose logs the key's lease, due entry and asynq task, for a failed wait.
func (f *failover) diagnose() {
	ctx := context.Background()
	snap, err := f.st.Inspect(ctx, watukuytype.Key{Poller: "orders"})
	f.t.Logf("key: owner %q epoch %d expires %v (now %v) state %v err %v", snap.LeaseOwner, snap.LeaseEpoch, snap.LeaseExpires, snap.Now, snap.State, err)
	score, err := f.rdb.ZScore(ctx, f.st.DueKey("orders"), "orders|").Result()
	f.t.Logf("due entry: %v (%v)", time.UnixMilli(int64(score)), err)
	ins := asynq.NewInspectorFromRedisClient(f.rdb)
	for _, state := range []string{"active", "pending", "retry", "archived", "scheduled"} {
		var tasks []*asynq.TaskInfo
		switch state {
		case "active":
			tasks, _ = ins.ListActiveTasks(queue.DefaultQueue)
		case "pending":
			tasks, _ = ins.ListPendingTasks(queue.DefaultQueue)
		case "retry":
			tasks, _ = ins.ListRetryTasks(queue.DefaultQueue)
		case "archived":
			tasks, _ = ins.ListArchivedTasks(queue.DefaultQueue)
		case "scheduled":
			tasks, _ = ins.ListScheduledTasks(queue.DefaultQueue)
		}
		for _, ti := range tasks {
			f.t.Logf("asynq %s task %s (retried %d, last error %q)", state, ti.ID, ti.Retried, ti.LastErr)
		}
	}
}

// nextRequest waits for the first request to /items that arrives after since.
func (f *failover) nextRequest(ctx context.Context, since time.Time) time.Time {
	f.t.Helper()
	for ctx.Err() == nil {
		for _, r := range f.srv.Requests() {
			if r.Path == "/items" && r.Wall.After(since) {
				return r.Wall
			}
		}
		time.Sleep(10 * time.Millisecond) // polling real processes: there is no signal to wait on
	}
	f.t.Fatalf("no request after %v: %v", since, ctx.Err())
	return time.Time{}
}

// Recovery in seconds, measured with the real binaries: one scheduler, two workers, one key on
// a 1 s schedule, the API hanging mid-request when the worker holding the key gets a signal.
// The time to the next request must be at most the lease TTL + 5 s after SIGKILL and after
// SIGSTOP past the TTL (the stopped worker, continued, is fenced: it logs its lost lease and
// commits nothing), and at most 5 s after SIGTERM (the stopping worker gives up the request,
// releases its lease and leaves the key due at once). WATUKUY_FAILOVER_TTL sets the lease TTL
// (default 2s; docs/benchmarks.md's table is a run with 30s), WATUKUY_FAILOVER_TRIALS the trials per
// signal (default 5).
func TestFailoverTimes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	ttl := durationEnv(t, "WATUKUY_FAILOVER_TTL", 2*time.Second)
	trials := 5
	if v := os.Getenv("WATUKUY_FAILOVER_TRIALS"); v != "" {
		trials, _ = strconv.Atoi(v)
	}
	f := &failover{t: t, bins: build(t), workers: map[string]*proc{}}
	rb := redistest.Real(t)
	api := fakeapi.New()
	api.SetNow(time.Now().UTC())
	api.PutMany(3, "o", nil)
	f.srv = fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: true})
	defer f.srv.Close()
	st, err := redisstore.New(rb.Client, redisstore.Options{Prefix: "wk"})
	if err != nil {
		t.Fatal(err)
	}
	f.st, f.rdb = st, rb.Client
	cfg := filepath.Join(t.TempDir(), "watukuy.yaml")
	if err := os.WriteFile(cfg, []byte(failoverConfig(rb.URL, f.srv.URL, ttl)), 0o600); err != nil {
		t.Fatal(err)
	}
	f.common = []string{"--config", cfg, "--listen", "off", "--log-format", "json"}
	start(t, filepath.Join(f.bins, "watukuy-scheduler"), f.common...)
	f.startWorker()
	f.startWorker()

	goal := map[string]time.Duration{"SIGKILL": ttl + 5*time.Second, "SIGSTOP": ttl + 5*time.Second, "SIGTERM": 5 * time.Second}
	times := map[string][]time.Duration{}
	signals := []string{"SIGKILL", "SIGSTOP", "SIGTERM"}
	if v := os.Getenv("WATUKUY_FAILOVER_SIGNALS"); v != "" {
		signals = strings.Split(v, ",")
	}
	for _, sig := range signals {
		for i := 0; i < trials; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
			id, p := f.hang(ctx)
			sent := time.Now()
			switch sig {
			case "SIGKILL":
				if err := p.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			case "SIGSTOP":
				if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			case "SIGTERM":
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			next := f.nextRequest(ctx, sent)
			took := next.Sub(sent)
			times[sig] = append(times[sig], took)
			t.Logf("%s of %s mid-request: next request after %v", sig, id, took.Round(time.Millisecond))
			if took > goal[sig] {
				t.Errorf("%s of %s: next request after %v, goal %v", sig, id, took, goal[sig])
			}
			switch sig {
			case "SIGKILL":
				_ = p.cmd.Wait()
			case "SIGSTOP":
				f.fenced(ctx, id, p)
			case "SIGTERM":
				f.exitsZero(id, p)
			}
			f.mu.Lock()
			delete(f.workers, id)
			f.mu.Unlock()
			f.startWorker()
			cancel()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "lease TTL %v, %d trials per signal:\n| signal | p50 | max | goal |\n|---|---|---|---|\n", ttl, trials)
	for _, sig := range signals {
		d := slices.Clone(times[sig])
		slices.Sort(d)
		fmt.Fprintf(&b, "| %s | %.1f s | %.1f s | ≤ %v |\n", sig, d[len(d)/2].Seconds(), d[len(d)-1].Seconds(), goal[sig])
	}
	t.Log(b.String())
}

// fenced continues a SIGSTOPped worker and waits for it to log that its cycle lost its lease:
// it resumed holding a grant another worker took over, and its keeper's renewal was refused.
// Then it stops the worker.
func (f *failover) fenced(ctx context.Context, id string, p *proc) {
	f.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		f.t.Fatal(err)
	}
	for ctx.Err() == nil && !strings.Contains(p.output(), "lease lost: cycle abandoned") {
		time.Sleep(20 * time.Millisecond) // polling a real process's log: there is no signal to wait on
	}
	if ctx.Err() != nil {
		f.t.Errorf("%s, continued after its lease lapsed, never logged its lost lease", id)
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// exitsZero waits for a worker sent SIGTERM to exit with status 0.
func (f *failover) exitsZero(id string, p *proc) {
	f.t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			f.t.Errorf("%s exited with %v after SIGTERM", id, err)
		}
	case <-time.After(15 * time.Second):
		f.t.Errorf("%s did not exit within 15 s of SIGTERM", id)
	}
}
