//go:build unix

package procchaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Recovery in seconds: the processes against a Redis that loses its data (TestRecoveryFlush)
// or goes away (TestRecoveryOutage). WATUKUY_RECOVERY_LOGS=1 prints every process's log.
//
// recoveryRun is a small process-level harness: one redis-server (AOF, appendfsync always) on
// a port and data dir of its own, the orders fake API changing under load, a webhook receiver
// that verifies and records every delivery, and the built binaries (scheduler, worker, run),
// each logging to a file of its own and serving its metrics on a port of its own.
type recoveryRun struct {
	t     *testing.T
	dir   string
	bins  string
	redis *redisServer
	api   *fakeapi.API
	srv   *fakeapi.Server
	hook  *httptest.Server
	rec   *chaos.Recorder
	cfg   string

	procs   []*recoveryProc
	stop    chan struct{} // ends the API's changes
	mutated sync.WaitGroup
	badSig  atomic.Int64
	// hookDown makes the receiver answer 503 to every delivery (a receiver that is down).
	hookDown atomic.Bool
}

type recoveryProc struct {
	*osProc
	kind    string
	log     string // path of its output
	metrics string // host:port of its /metrics
}

// recoveryLeaseTTL is the lease TTL of the processes' poller; a claim holds its key for
// recoveryClaim (a cycle that Redis cut comes back when it lapses).
const (
	recoveryLeaseTTL = 2 * time.Second
	recoveryClaim    = recoveryLeaseTTL + core.ClaimGrace
	// recoveryGoal is the bound on the time back to polling.
	recoveryGoal = 5 * time.Second
)

// newRecoveryRun starts redis-server, the API, the receiver and the given processes
// ("scheduler", "worker", "run") on a poller scheduled from lo to hi.
func newRecoveryRun(t *testing.T, lo, hi time.Duration, kinds ...string) *recoveryRun {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(redistest.RequireEnv) != "" {
			t.Fatalf("redis-server not found and %s is set: %v", redistest.RequireEnv, err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
	r := &recoveryRun{t: t, dir: t.TempDir(), bins: t.TempDir(), rec: chaos.NewRecorder(), stop: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := BuildBinaries(ctx, r.bins); err != nil {
		t.Fatal(err)
	}
	if r.redis, err = newRedisServer(bin, r.dir, "redis", ""); err != nil {
		t.Fatal(err)
	}
	if err := r.redis.start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.redis.kill(); _ = r.redis.c.Close() })

	r.api = fakeapi.New()
	r.api.SetNow(time.Now().UTC())
	for i := range processIDs {
		r.api.Put("ord-"+strconv.Itoa(i), map[string]any{"total": i})
	}
	r.srv = fakeapi.NewServer(r.api, fakeapi.ServerOptions{TieBreaker: true})
	t.Cleanup(r.srv.Close)
	r.hook = httptest.NewServer(http.HandlerFunc(r.receive))
	t.Cleanup(r.hook.Close)
	r.cfg = filepath.Join(r.dir, "watukuy.yaml")
	cfg := OrdersConfigEvery("redis://"+r.redis.addr()+"/0", processPrefix, r.srv.URL, r.hook.URL, recoveryLeaseTTL, lo, hi)
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range r.procs {
			p.kill()
		}
		if t.Failed() || os.Getenv("WATUKUY_RECOVERY_LOGS") != "" {
			for _, p := range r.procs {
				b, _ := os.ReadFile(p.log)
				t.Logf("--- %s output (last 6000 bytes, without the debug lines):\n%s", p.name, lastOf(withoutDebug(string(b)), 6000))
			}
		}
	})
	for i, kind := range kinds {
		r.start(fmt.Sprintf("%s-%d", kind, i+1), kind)
	}
	r.mutated.Add(1)
	go r.mutate()
	t.Cleanup(r.stopChanges)
	return r
}

// start runs one process of kind.
func (r *recoveryRun) start(name, kind string) {
	port, err := freeLoopbackPort()
	if err != nil {
		r.t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--config", r.cfg, "--listen", listen, "--log-format", "json", "--instance-id", name}
	bin := filepath.Join(r.bins, "watukuy-"+kind)
	switch kind {
	case "run":
		bin = filepath.Join(r.bins, "watukuy")
		args = append([]string{"run"}, args...)
	case "worker", "scheduler":
	default:
		r.t.Fatalf("unknown process kind %q", kind)
	}
	if kind != "scheduler" {
		args = append(args, "--concurrency", "4", "--drain-timeout", "2s")
	}
	logPath := filepath.Join(r.dir, "logs", name+".log")
	p, err := startProc(name, bin, args, logPath, []string{"HOOK_SECRET=" + processSecret})
	if err != nil {
		r.t.Fatal(err)
	}
	r.procs = append(r.procs, &recoveryProc{osProc: p, kind: kind, log: logPath, metrics: listen})
}

// receive is the webhook endpoint: verify, record, 204 (503 while hookDown).
func (r *recoveryRun) receive(w http.ResponseWriter, req *http.Request) {
	if r.hookDown.Load() {
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
		return
	}
	ev, ok := verifiedEvent(w, req, &r.badSig, nil)
	if !ok {
		return
	}
	r.rec.Delivered(chaos.Delivery{Instance: "webhook", Event: ev, At: time.Now()})
	w.WriteHeader(http.StatusNoContent)
}

// mutate changes the API every 20 ms until stopChanges: creates, updates and deletes over
// processIDs identities.
func (r *recoveryRun) mutate() {
	defer r.mutated.Done()
	rng := rand.New(rand.NewPCG(11, 20260101))
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.api.SetNow(time.Now().UTC())
		id := "ord-" + strconv.Itoa(rng.IntN(processIDs))
		if rng.IntN(6) == 0 {
			r.api.Delete(id)
		} else {
			r.api.Put(id, map[string]any{"total": rng.IntN(1000)})
		}
	}
}

func (r *recoveryRun) stopChanges() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.mutated.Wait()
}

// firstRequest waits (up to limit) for the first request to the API that arrived after since
// and matches, and returns when it arrived.
func (r *recoveryRun) firstRequest(since time.Time, limit time.Duration, match func(fakeapi.Request) bool) (time.Time, bool) {
	deadline := time.Now().Add(limit)
	for {
		for _, q := range r.srv.Requests() {
			if q.Wall.After(since) && match(q) {
				return q.Wall, true
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(10 * time.Millisecond) // requests of real processes: there is no signal to wait on
	}
}

// waitPolling waits until the processes poll (a request of the live lane with a cursor).
func (r *recoveryRun) waitPolling(limit time.Duration) {
	r.t.Helper()
	if _, ok := r.firstRequest(time.Time{}, limit, func(q fakeapi.Request) bool {
		return q.Path == "/items" && q.Query.Get("updated_since") != ""
	}); !ok {
		r.t.Fatalf("the processes did not poll within %s", limit)
	}
}

// firstClaim waits (up to limit) for a scheduler to claim the key after since, and returns
// how long after since that was (-1: no claim). A claim pushes the key's due time
// recoveryClaim ahead; the cycles write theirs at most the schedule's max (500 ms) ahead.
func (r *recoveryRun) firstClaim(since time.Time, limit time.Duration) time.Duration {
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		score, err := r.redis.c.ZScore(ctx, processPrefix+":{global}:due:"+processKey.Poller, processKey.String()).Result()
		now, terr := r.redis.c.Time(ctx).Result()
		if err == nil && terr == nil && score > float64(now.Add(recoveryClaim*2/3).UnixMilli()) {
			return time.Since(since)
		}
		time.Sleep(10 * time.Millisecond) // a claim by another process: there is no signal to wait on
	}
	return -1
}

// alive fails the test for every process that exited.
func (r *recoveryRun) alive() {
	r.t.Helper()
	for _, p := range r.procs {
		if p.exited() {
			r.t.Errorf("%s exited on its own: %v", p.name, p.err)
		}
	}
}

// lines returns the lines of p's log that contain s.
func (p *recoveryProc) lines(s string) []string {
	f, err := os.Open(p.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// cpu is the CPU time p used so far (Linux /proc, 100 ticks a second; 0 elsewhere).
func (p *recoveryProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid()))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after the command name
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return time.Duration(u+k) * 10 * time.Millisecond
}

// problems counts p's warning and error lines so far.
func (p *recoveryProc) problems() int {
	return len(p.lines(`"level":"warn"`)) + len(p.lines(`"level":"error"`))
}

// metric reads one unlabelled sample from p's /metrics (-1 when absent or unreadable).
func (p *recoveryProc) metric(name string) float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}

// shutdown sends SIGTERM to every process and waits for each (20 s).
func (r *recoveryRun) shutdown() {
	for _, p := range r.procs {
		p.expect.Store(true)
		_ = p.signal(syscall.SIGTERM)
	}
	for _, p := range r.procs {
		select {
		case <-p.done:
			if p.err != nil {
				r.t.Errorf("%s exited with %v after SIGTERM", p.name, p.err)
			}
		case <-time.After(20 * time.Second):
			r.t.Errorf("%s did not exit within 20s of SIGTERM", p.name)
		}
	}
}

// waitConverged waits (up to limit) until the last delivered version of every identity is the
// API's final state.
func (r *recoveryRun) waitConverged(truth map[watukuytype.Key]chaos.Truth, limit time.Duration) bool {
	want := chaos.ExpectedStates(truth)
	deadline := time.Now().Add(limit)
	for {
		if deliveredState(r.rec.Deliveries(), truth, want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond) // deliveries of real processes: there is no signal to wait on
	}
}

// check runs the process chaos checks on what the receiver recorded: every guarantee they
// measure holds, every delivery was signed, and something was delivered.
func (r *recoveryRun) check(truth map[watukuytype.Key]chaos.Truth) {
	rep := chaos.Check(truth, r.rec)
	for _, l := range rep.Lines() {
		r.t.Log(l)
	}
	if rep.Failed() {
		r.t.Errorf("guarantees violated (lines above)")
	}
	if n := r.badSig.Load(); n > 0 {
		r.t.Errorf("%d deliveries failed signature verification", n)
	}
	if rep.Deliveries == 0 {
		r.t.Errorf("nothing was delivered")
	}
}

// withoutDebug drops the debug lines (one per API request) of a JSON log.
func withoutDebug(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, `"level":"debug"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func lastOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// durations renders p50 and max of ds.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %s, max %s (%v)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), roundAll(ds))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// envDuration reads a duration from the environment (def when unset).
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// The log lines the tests look for (internal/core/watch.go, internal/outage).
const (
	lineDataLoss  = "Redis lost its data"
	lineOutage    = "Redis is unreachable"
	lineRecovered = "Redis answers again"
)

// TestRecoveryFlush: FLUSHALL under load, three times. Every process (a scheduler, two
// workers) notices within seconds, logs the loss once and counts it in
// watukuy_redis_data_loss_total; the workers register the poller again and polling resumes:
// the time from FLUSHALL to the first request of a cycle that started over (no cursor: the
// state went with the data) must be within 5 s.
func TestRecoveryFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs them as processes for about 20 s")
	}
	const flushes = 3
	r := newRecoveryRun(t, time.Second, time.Second, "scheduler", "worker", "worker")
	r.waitPolling(15 * time.Second)
	time.Sleep(1500 * time.Millisecond) // every watcher has seen the data id by now (checks every 1 s)

	var took []time.Duration
	for i := range flushes {
		at := time.Now()
		if err := r.redis.c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		// The first request without a cursor after the flush is the first cycle of the key
		// registered again: the cycles running at the flush still had their cursor.
		back, ok := r.firstRequest(at, 15*time.Second, func(q fakeapi.Request) bool {
			return q.Path == "/items" && q.Query.Get("updated_since") == ""
		})
		if !ok {
			t.Fatalf("flush %d: no poll from scratch within 15s of FLUSHALL", i+1)
		}
		took = append(took, back.Sub(at))
		if d := back.Sub(at); d > recoveryGoal {
			t.Errorf("flush %d: polling resumed %s after FLUSHALL, want <= %s", i+1, d.Round(time.Millisecond), recoveryGoal)
		}
		time.Sleep(2 * time.Second) // every watcher adopts the new data id (1 s) before the next flush
	}
	r.alive()
	t.Logf("FLUSHALL -> first poll from scratch, %d flushes, 1 scheduler + 2 workers, 1 s schedule: %s", flushes, durations(took))

	for _, p := range r.procs {
		if ls := p.lines(lineDataLoss); len(ls) != flushes {
			t.Errorf("%s logged %q %d times, want %d (once per flush):\n%s", p.name, lineDataLoss, len(ls), flushes, strings.Join(ls, "\n"))
		}
		if v := p.metric("watukuy_redis_data_loss_total"); v != flushes {
			t.Errorf("%s: watukuy_redis_data_loss_total = %v, want %d", p.name, v, flushes)
		}
	}
	if ls := r.procs[1].lines(lineDataLoss); len(ls) > 0 {
		t.Logf("the log line: %s", ls[0])
	}
	r.stopChanges()
	r.shutdown()
}

// TestRecoveryOutage: kill -9 of redis-server under load, down for WATUKUY_RECOVERY_OUTAGE
// (default 6 s; the design scenario is 20s), then restarted from its AOF. Every process (a
// scheduler, a worker, a `watukuy run`) stays up, logs the outage once and the recovery once
// (nothing per attempt), and polling resumes within 5 s of Redis answering; no event is lost
// (the delivered state reaches the API's, and the process chaos checks hold).
func TestRecoveryOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs them as processes for about 25 s")
	}
	down := envDuration(t, "WATUKUY_RECOVERY_OUTAGE", 6*time.Second)
	r := newRecoveryRun(t, 100*time.Millisecond, 500*time.Millisecond, "scheduler", "worker", "run")
	r.waitPolling(15 * time.Second)
	time.Sleep(2 * time.Second) // under load for a while

	before := make([]int, len(r.procs))
	cpuBefore := make([]time.Duration, len(r.procs))
	for i, p := range r.procs {
		before[i], cpuBefore[i] = p.problems(), p.cpu()
	}
	killed := time.Now()
	r.redis.kill()
	time.Sleep(down)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.redis.start(ctx); err != nil { // replays the AOF; returns once it answers PING
		t.Fatal(err)
	}
	up := time.Now()
	claimed := make(chan time.Duration, 1)
	go func() { claimed <- r.firstClaim(up, 30*time.Second) }()
	during := make([]int, len(r.procs))
	cpu := make([]time.Duration, len(r.procs))
	for i, p := range r.procs {
		during[i], cpu[i] = p.problems()-before[i], p.cpu()-cpuBefore[i]
	}
	back, ok := r.firstRequest(up, 30*time.Second, func(q fakeapi.Request) bool { return q.Path == "/items" })
	if !ok {
		t.Fatalf("no poll within 30s of redis-server answering again")
	}
	took := back.Sub(up)
	if took > recoveryGoal {
		t.Errorf("polling resumed %s after redis-server answered again, want <= %s", took.Round(time.Millisecond), recoveryGoal)
	}
	// The first poll may come from a task queued before the kill; the schedulers' first claim
	// shows that they are back too (their backoff is capped at 2 s).
	claim := <-claimed
	if claim < 0 || claim > recoveryGoal {
		t.Errorf("the first claim came %s after redis-server answered again (-1: none within 30s), want <= %s", claim.Round(time.Millisecond), recoveryGoal)
	}
	time.Sleep(2 * time.Second) // under load again; every tracker has seen Redis answer (checks every 1 s)
	r.stopChanges()
	truth := map[watukuytype.Key]chaos.Truth{processKey: chaos.TruthOf(r.api)}
	converged := r.waitConverged(truth, 30*time.Second)
	r.alive()
	t.Logf("redis-server killed (-9) for %s (%s until it answered again), restarted from its AOF: first poll %s and first claim %s after it answered; converged: %v",
		down, up.Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond), claim.Round(time.Millisecond), converged)
	if !converged {
		t.Errorf("the delivered state did not reach the API's within 30s")
	}

	for i, p := range r.procs {
		outages, recoveries := p.lines(lineOutage), p.lines(lineRecovered)
		if len(outages) != 1 || len(recoveries) != 1 {
			t.Errorf("%s logged the outage %d times and the recovery %d times, want once each", p.name, len(outages), len(recoveries))
		}
		// Nothing per attempt: the outage line, and in a process that runs cycles the cycles
		// that Redis cut (its worker runs 4 at most, and there is one key).
		most := 3
		if p.kind == "scheduler" {
			most = 1
		}
		if during[i] > most {
			t.Errorf("%s logged %d warnings and errors while Redis was down, want at most %d (no line per attempt)", p.name, during[i], most)
		}
		if len(recoveries) > 0 {
			t.Logf("%s: %d warnings and errors and %s of CPU during the outage; %s", p.name, during[i], cpu[i], recoveries[0])
		}
		if v := p.metric("watukuy_redis_outages_total"); v != 1 {
			t.Errorf("%s: watukuy_redis_outages_total = %v, want 1", p.name, v)
		}
	}
	r.shutdown()
	r.check(truth)
}
