//go:build unix

package procchaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/redisstore"
)

func (r *processRun) setup(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("chaos: redis-server not found: %w", err)
	}
	r.files.dir = r.o.Dir
	if r.files.dir == "" {
		if r.files.dir, err = os.MkdirTemp("", "watukuy-chaos-"); err != nil {
			return err
		}
		r.files.removeDir = true
	}
	for _, d := range []string{"redis", "logs"} { // a reused Dir must not replay an old AOF
		if err := os.RemoveAll(filepath.Join(r.files.dir, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(r.files.dir, d), 0o755); err != nil {
			return err
		}
	}
	r.files.binDir = r.o.BinDir
	if r.files.binDir == "" {
		if r.files.binDir, err = os.MkdirTemp("", "watukuy-bin-"); err != nil {
			return err
		}
		r.files.removeBin = true
		if err := BuildBinaries(ctx, r.files.binDir); err != nil {
			return err
		}
		r.logf("built watukuy, watukuy-worker and watukuy-scheduler into %s", r.files.binDir)
	}
	for _, name := range []string{"watukuy", "watukuy-worker", "watukuy-scheduler"} {
		if _, err := os.Stat(filepath.Join(r.files.binDir, name)); err != nil {
			return fmt.Errorf("chaos: binary %s: %w", name, err)
		}
	}

	r.db.bin = bin
	if r.db.primary, err = r.newServer(""); err != nil {
		return err
	}
	if err := r.db.primary.start(ctx); err != nil {
		return err
	}
	r.db.primaryAddr.Store(r.db.primary.addr())
	// The harness follows the primary through a failover: it dials whichever is current.
	r.db.direct = redis.NewClient(&redis.Options{Addr: r.db.primary.addr(), Dialer: r.dialPrimary, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 4})
	if r.db.store, err = redisstore.New(r.db.direct, redisstore.Options{Prefix: processPrefix}); err != nil {
		return err
	}
	r.db.ins = asynq.NewInspectorFromRedisClient(r.db.direct)
	if r.db.link, err = netproxy.New(r.db.primary.addr()); err != nil {
		return err
	}
	if r.db.replica, err = r.newServer(r.db.link.Addr()); err != nil {
		return err
	}
	if err := r.db.replica.start(ctx); err != nil {
		return err
	}
	if r.db.proxy, err = netproxy.New(r.db.primary.addr()); err != nil {
		return err
	}
	if _, err := r.waitSynced(ctx); err != nil {
		return err
	}
	r.logf("%s on %s: the primary (AOF, appendfsync always), proxy on %s; %s on %s: its replica (same persistence) through the link proxy on %s, synced; scratch dir %s",
		r.db.primary.name, r.db.primary.addr(), r.db.proxy.Addr(), r.db.replica.name, r.db.replica.addr(), r.db.link.Addr(), r.files.dir)

	r.apis.orders = fakeapi.New()
	r.apis.orders.SetNow(time.Now().UTC())
	r.apis.ordersSrv = fakeapi.NewServer(r.apis.orders, fakeapi.ServerOptions{TieBreaker: true})
	r.apis.hot, r.apis.fp = fakeapi.New(), fakeapi.New()
	r.apis.hot.SetNow(time.Now().UTC())
	r.apis.fp.SetNow(time.Now().UTC())
	r.apis.hotSrv = fakeapi.NewServer(r.apis.hot, fakeapi.ServerOptions{TieBreaker: true})
	r.apis.fpSrv = fakeapi.NewServer(r.apis.fp, fakeapi.ServerOptions{})
	r.recv.hook = httptest.NewServer(http.HandlerFunc(r.receive))

	r.files.cfgPath = filepath.Join(r.files.dir, "watukuy.yaml")
	redisURL := "redis://" + r.db.proxy.Addr() + "/0"
	if r.o.RedisReadTimeout > 0 {
		redisURL += "?read_timeout=" + r.o.RedisReadTimeout.String()
	}
	r.db.readTimeout = clientReadTimeout(redisURL)
	r.db.url = redisURL
	cfg := RunConfig(redisURL, processPrefix, r.apis.ordersSrv.URL, r.apis.hotSrv.URL, r.apis.fpSrv.URL, r.recv.hook.URL, processLeaseTTL)
	if err := os.WriteFile(r.files.cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}

	r.procs.stopped = map[*osProc]bool{}
	r.procs.stoppedAt = map[*osProc]time.Time{}
	r.procs.killed = map[string]time.Time{}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs.scheduler, err = r.startLocked("scheduler"); err != nil {
		return err
	}
	for range r.o.Workers {
		w, err := r.startLocked("worker")
		if err != nil {
			return err
		}
		r.procs.workers = append(r.procs.workers, w)
	}
	return nil
}

// shutdown sends SIGTERM to every process and waits for each (20 s, then SIGKILL).
func (r *processRun) shutdown() {
	r.finished.Store(true)
	r.mu.Lock()
	procs := append([]*osProc{r.procs.scheduler}, r.procs.workers...)
	for p := range r.procs.stopped {
		r.contLocked(p)
	}
	r.mu.Unlock()
	stopAll(procs, 20*time.Second, func(p *osProc, err error, killed bool) {
		switch {
		case killed:
			r.logf("%s did not exit within 20s of SIGTERM: SIGKILL", p.name)
		case err != nil:
			r.logf("%s exited with %v after SIGTERM", p.name, err)
		}
	})
	r.logf("SIGTERM: every process stopped")
}

// cleanup stops whatever still runs and removes what the run created (the scratch directory
// only after a clean run).
func (r *processRun) cleanup() {
	r.finished.Store(true)
	r.mu.Lock()
	procs := append([]*osProc(nil), r.procs.workers...)
	if r.procs.scheduler != nil {
		procs = append(procs, r.procs.scheduler)
	}
	failed := r.failed
	r.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	select {
	case <-r.quiesce:
	default:
		close(r.quiesce)
	}
	r.bg.Wait()
	if r.recv.hook != nil {
		r.recv.hook.Close()
	}
	for _, s := range []*fakeapi.Server{r.apis.ordersSrv, r.apis.hotSrv, r.apis.fpSrv} {
		if s != nil {
			s.Close()
		}
	}
	if r.db.proxy != nil {
		_ = r.db.proxy.Close()
	}
	if r.db.link != nil {
		_ = r.db.link.Close()
	}
	if r.db.direct != nil {
		_ = r.db.direct.Close()
	}
	for _, s := range r.db.servers {
		s.kill()
		_ = s.c.Close()
	}
	if r.files.removeBin {
		_ = os.RemoveAll(r.files.binDir)
	}
	if r.files.removeDir {
		if failed {
			r.logf("kept the scratch directory for inspection: %s (logs/ has every process's output)", r.files.dir)
		} else {
			_ = os.RemoveAll(r.files.dir)
		}
	}
}

// BuildBinaries compiles watukuy, watukuy-worker and watukuy-scheduler into dir with the
// Makefile's build target (for tests that run the real processes), so they are built as an
// operator builds them.
func BuildBinaries(ctx context.Context, dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "build", "BIN="+dir)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: make build: %w\n%s", err, out)
	}
	return nil
}

// moduleRoot finds the module's directory: up from this source file, else up from the
// working directory, to the go.mod of github.com/watukuy/watukuy.
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if strings.TrimSpace(line) == "module github.com/watukuy/watukuy" {
						return d, nil
					}
				}
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return "", errors.New("chaos: cannot find the module root (go.mod of github.com/watukuy/watukuy) to build the binaries; set BinDir")
}

// OrdersConfig is the config file of the process-level tests: one timestamp poller over the
// fake API's /items with a reconcile lane over /list (pages of 10, 2 a cycle: a listing goes on
// over several cycles, with the faults between them), delivering to a signed webhook whose
// secret comes from ${HOOK_SECRET}.
func OrdersConfig(redisURL, prefix, apiURL, hookURL string, leaseTTL time.Duration) string {
	return OrdersConfigEvery(redisURL, prefix, apiURL, hookURL, leaseTTL, 100*time.Millisecond, 500*time.Millisecond)
}

// OrdersConfigEvery is OrdersConfig with the poller's schedule from lo to hi.
func OrdersConfigEvery(redisURL, prefix, apiURL, hookURL string, leaseTTL, lo, hi time.Duration) string {
	return fmt.Sprintf(`redis: %s
prefix: %s
pollers:
  - name: orders
    request: {url: %s/items, timeout: 5s}
    items: data
    version: version
    cursor: {strategy: timestamp, field: updated_at, param: updated_since, limitParam: limit, limit: 20, hasMore: has_more, tieBreaker: after_id}
    schedule: {min: %s, max: %s}
    reconcile: {every: 1s, url: %s/list, param: page, sizeParam: per_page, size: 10, hasMore: has_more, maxPages: 2}
    leaseTTL: %s
    delivery:
      webhook: {url: %s/hook, secret: "${HOOK_SECRET}", timeout: 5s}
      concurrency: 4
`, redisURL, prefix, apiURL, lo, hi, apiURL, leaseTTL, hookURL)
}
