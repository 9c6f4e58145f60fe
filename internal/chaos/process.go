//go:build unix

package chaos

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/jcs"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// ProcessOptions configures a process-level chaos run.
type ProcessOptions struct {
	Seed uint64 // every random choice (mutations, fault timeline) derives from it
	// Duration is how long faults are injected; then the run quiesces and is checked. The
	// first fault of every kind is injected even when that takes longer (about 20 s).
	Duration time.Duration
	Workers  int       // default 3
	BinDir   string    // directory with watukuy-worker and watukuy-scheduler; "" = build them into a temp dir
	Dir      string    // scratch directory (redis data, config, process logs); "" = os.MkdirTemp (removed after a clean run)
	Log      io.Writer // progress lines (kills, restarts, stalls), may be nil
	// RedisReadTimeout is the processes' Redis read timeout (read_timeout in their redis://
	// URL); 0 leaves go-redis' default (5 s). With the default, longer than the run's 2 s
	// lease, a cycle whose replies are held loses its lease before go-redis re-sends its
	// script, and the re-send lands after the lease expired; a timeout well under the lease
	// (e.g. 1 s) has re-sends land while the lease holds, as with production's 30 s lease.
	RedisReadTimeout time.Duration
}

// ProcessReport is Check's Report plus what was done.
type ProcessReport struct {
	Report
	Kills         int // worker SIGKILLs (HolderKills and the hot key's included)
	Stops         int // SIGSTOP past the lease TTL, then SIGCONT
	RedisRestarts int // kill -9 of the primary redis-server and its restart from its AOF
	// HolderKills counts the SIGKILLs of the worker running the orders key's cycle while its
	// request was held at the API (a fetch in flight). Recoveries holds, for each, the time
	// from the SIGKILL to the key's next request at the API, by any worker (R1: at most
	// RecoveryGoal, the lease TTL + 5 s); a kill the key did not recover from within 22 s is
	// left out of it and reported under R1.
	HolderKills int
	Recoveries  []time.Duration
	// Failovers counts primary failovers that lost writes: the replication link cut, the
	// processes writing to the primary alone (until the key's next grant, then 100–800 ms),
	// the primary killed with -9, its replica promoted and the clients moved to it (then a
	// fresh replica synced).
	Failovers int
	// LostGrants counts the lease grants the failovers lost: their epochs were granted again,
	// to other tokens. TokenRefusals counts the cycles the processes logged as fenced off by
	// the token alone (their epoch was the current one: granted again after a failover).
	LostGrants    int
	TokenRefusals int
	ProxyFaults   int // connections dropped, or stalled (both directions), by the proxy
	// ReplyStalls counts the proxy holding every reply of Redis back for longer than the
	// processes' read timeout (requests still executed): their scripts ran, the replies were
	// lost, and go-redis re-sent them.
	ReplyStalls int
	// ResentScripts counts the scripts Redis ran twice during the reply stalls: the same
	// arguments from another connection, a read timeout later (MONITOR on the primary).
	// ResentFenced is how many of those were watukuy's fenced scripts (they check the lease's
	// epoch and token first; commit, end and the other writes that must not apply twice also
	// carry a write id).
	ResentScripts int
	ResentFenced  int
	Changes       int // ground-truth changes the API made
	Throttles     int // 429 answers (Retry-After: 1) the API sent
	// StaleRedeliveries counts deliveries the receiver dropped as a consumer that needs strict
	// order does: late duplicates from a frozen worker, older than what it already applied.
	StaleRedeliveries int
	// Respawns counts processes that exited on their own (not killed by the harness) and were
	// started again.
	Respawns int
	// HotParkKills counts the SIGKILLs of the hot key's worker as Redis answered its park of
	// the poison event (aimed between park and ack; the log tells whether the ack was still
	// to come: entries left in the outbox), HotCommitKills those as Redis answered its
	// commit of a burst while the key was held (the burst waits in the outbox), and
	// ParkedRetried the parked rows the operator retried with `watukuy parked retry`.
	HotParkKills, HotCommitKills, ParkedRetried int
	// Converged reports whether the delivered final state reached the API's before the bounded
	// quiesce wait ended (when false, G3 shows what is missing).
	Converged bool
}

// RecoveryText renders the recovery times: "4.03 s", or p50 and max of several.
func (r ProcessReport) RecoveryText() string {
	d := slices.Clone(r.Recoveries)
	slices.Sort(d)
	switch len(d) {
	case 0:
		return "none measured"
	case 1:
		return fmt.Sprintf("%.2f s", d[0].Seconds())
	}
	return fmt.Sprintf("p50 %.2f s, max %.2f s", d[(len(d)-1)/2].Seconds(), d[len(d)-1].Seconds())
}

// processKey is the one key the process run polls.
var processKey = watukuytype.Key{Poller: "orders"}

const (
	processLeaseTTL    = 2 * time.Second
	processStopFor     = 5 * time.Second // 2.5 × the lease TTL
	processRetryAfter  = time.Second
	processQuiesceMax  = 90 * time.Second
	processQuiesceIdle = 30 * time.Second // no new event delivered for this long while not converged: give up
	processSecret      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	processPrefix      = "wk"
	processIDs         = 40
)

// RunProcesses runs the built binaries as real processes — one scheduler and o.Workers
// workers — against a private primary redis-server and its replica (both AOF, appendfsync
// always; the replica replicates through a second Proxy, the replication link), the
// processes reaching the primary through a TCP Proxy, the fake API changing under them and a
// webhook receiver that verifies every signature. For o.Duration it injects faults on a
// timeline drawn from o.Seed (one of every kind first, then random draws):
//
//   - SIGKILL of a worker (a new one is started);
//   - SIGSTOP of a worker past the lease TTL, then SIGCONT;
//   - kill -9 of the primary redis-server and its restart from its AOF;
//   - a failover that loses acknowledged writes: the replication link is cut; the processes
//     write to the primary alone until the key's next lease grant (up to 3 s; its holder is
//     SIGSTOPped right after that cycle's first commit) and for 100–800 ms more; the primary
//     is killed with -9, the replica promoted (REPLICAOF NO ONE) and the processes' proxy
//     retargeted to it, as Sentinel would move the clients; then a fresh replica (empty data
//     dir) is synced through the link, so a later failover or restart works the same. The
//     lost grant's epoch is granted again, to another token, and then the frozen holder is
//     SIGCONTed: its writes carry the repeated epoch and only the token refuses them. Lost
//     commits are fetched again (cursor and events are lost together);
//   - the proxy dropping every connection, or stalling both directions for 1–3 s;
//   - the proxy holding every reply back for 0.25–1.25 s longer than the processes' read
//     timeout (go-redis' default, 5 s, unless o.RedisReadTimeout), requests still executed,
//     starting as a cycle reads a page's rows (its commit follows): scripts run, their
//     replies are lost and the clients re-send them (fenced scripts carry a write id and must
//     apply once); MONITOR on the primary counts the re-sent scripts;
//   - 429s with Retry-After;
//   - the hot key's stages (process_hot.go): a burst of one ordering key with a poison event
//     whose worker is killed between park and ack, a burst while the key is held whose
//     committer is killed right after the commit, the operator's `watukuy parked retry` (the
//     CLI binary) while a worker is killed. The fp key's items (no version) change all along.
//
// Then it stops the faults and the changes, waits (bounded) until the delivered state equals
// the API's, stops every process with SIGTERM and checks the guarantees.
//
// Commits, fenced writes and lease grants happen inside the processes and are not observed:
// G5, G7 and G9 come out "not measured", and G1 is measured for the hot key's bursts only. An error is returned only for infrastructure
// failures (build, redis-server, a replica that does not sync); violated guarantees are in
// the report.
func RunProcesses(ctx context.Context, o ProcessOptions) (ProcessReport, error) {
	if o.Workers <= 0 {
		o.Workers = 3
	}
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	r := &processRun{o: o, start: time.Now(), rec: NewRecorder(), quiesce: make(chan struct{})}
	defer r.cleanup()
	err := r.setup(ctx)
	var rep ProcessReport
	if err == nil {
		rep, err = r.run(ctx)
	}
	if err != nil {
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
		return ProcessReport{}, err
	}
	return rep, nil
}

// processRun is the state of one RunProcesses.
type processRun struct {
	o     ProcessOptions
	start time.Time
	rec   *Recorder

	dir, binDir          string
	removeDir, removeBin bool
	cfgPath              string

	redisBin  string
	failoverN int // failovers begun (r.mu), numbers their MONITOR logs
	// primary is the redis-server the processes reach (through proxy), replica its replica
	// (through link); a failover swaps them for the replica and a fresh server. Only the
	// fault timeline changes them, before the quiesce. servers is every one started.
	primary, replica *redisServer
	servers          []*redisServer
	primaryAddr      atomic.Value  // string: where direct dials
	direct           *redis.Client // the harness's own connection to the primary, not through the proxy
	ins              *asynq.Inspector
	store            *redisstore.Store
	proxy            *netproxy.Proxy // the processes' way to the primary
	link             *netproxy.Proxy // the replica's way to the primary (the replication link)
	readTimeout      time.Duration   // the processes' Redis read timeout (go-redis' default)
	api              *fakeapi.API
	srv              *fakeapi.Server
	hotAPI, fpAPI    *fakeapi.API // the hot and fp pollers' APIs (process_hot.go)
	hotSrv, fpSrv    *fakeapi.Server
	hook             *httptest.Server
	redisURL         string // the processes' (and the CLI's) Redis URL, through proxy

	hot hotState // the hot key's fault stages (r.mu) and poison (r.recvMu)

	badSig   atomic.Int64
	recvMu   sync.Mutex
	whatOf   map[string]string // event id -> the change it named (first delivery)
	newest   map[string]string // identity -> newest seq delivered
	stale    int               // stale redeliveries dropped
	quiesce  chan struct{}     // closed when faults and changes stop
	bg       sync.WaitGroup
	finished atomic.Bool // set when the processes are being stopped for good

	mu        sync.Mutex
	workers   []*osProc
	scheduler *osProc
	nextID    int
	stopped   map[*osProc]bool
	stoppedAt map[*osProc]time.Time
	killed    map[string]time.Time // SIGKILLed workers by name
	rep       ProcessReport
	failed    bool // keep the scratch directory
	logMu     sync.Mutex
}

func (r *processRun) logf(format string, a ...any) {
	if r.o.Log == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	now := time.Now()
	fmt.Fprintf(r.o.Log, "[%6.2fs %s] %s\n", now.Sub(r.start).Seconds(), now.Format("15:04:05.000"), fmt.Sprintf(format, a...))
}

func (r *processRun) setup(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("chaos: redis-server not found: %w", err)
	}
	r.dir = r.o.Dir
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "watukuy-chaos-"); err != nil {
			return err
		}
		r.removeDir = true
	}
	for _, d := range []string{"redis", "logs"} { // a reused Dir must not replay an old AOF
		if err := os.RemoveAll(filepath.Join(r.dir, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return err
		}
	}
	r.binDir = r.o.BinDir
	if r.binDir == "" {
		if r.binDir, err = os.MkdirTemp("", "watukuy-bin-"); err != nil {
			return err
		}
		r.removeBin = true
		if err := BuildBinaries(ctx, r.binDir); err != nil {
			return err
		}
		r.logf("built watukuy, watukuy-worker and watukuy-scheduler into %s", r.binDir)
	}
	for _, name := range []string{"watukuy", "watukuy-worker", "watukuy-scheduler"} {
		if _, err := os.Stat(filepath.Join(r.binDir, name)); err != nil {
			return fmt.Errorf("chaos: binary %s: %w", name, err)
		}
	}

	r.redisBin = bin
	if r.primary, err = r.newServer(""); err != nil {
		return err
	}
	if err := r.primary.start(ctx); err != nil {
		return err
	}
	r.primaryAddr.Store(r.primary.addr())
	// The harness follows the primary through a failover: it dials whichever is current.
	r.direct = redis.NewClient(&redis.Options{Addr: r.primary.addr(), Dialer: r.dialPrimary, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 4})
	if r.store, err = redisstore.New(r.direct, redisstore.Options{Prefix: processPrefix}); err != nil {
		return err
	}
	r.ins = asynq.NewInspectorFromRedisClient(r.direct)
	if r.link, err = netproxy.New(r.primary.addr()); err != nil {
		return err
	}
	if r.replica, err = r.newServer(r.link.Addr()); err != nil {
		return err
	}
	if err := r.replica.start(ctx); err != nil {
		return err
	}
	if r.proxy, err = netproxy.New(r.primary.addr()); err != nil {
		return err
	}
	if _, err := r.waitSynced(ctx); err != nil {
		return err
	}
	r.logf("%s on %s: the primary (AOF, appendfsync always), proxy on %s; %s on %s: its replica (same persistence) through the link proxy on %s, synced; scratch dir %s",
		r.primary.name, r.primary.addr(), r.proxy.Addr(), r.replica.name, r.replica.addr(), r.link.Addr(), r.dir)

	r.api = fakeapi.New()
	r.api.SetNow(time.Now().UTC())
	r.srv = fakeapi.NewServer(r.api, fakeapi.ServerOptions{TieBreaker: true})
	r.hotAPI, r.fpAPI = fakeapi.New(), fakeapi.New()
	r.hotAPI.SetNow(time.Now().UTC())
	r.fpAPI.SetNow(time.Now().UTC())
	r.hotSrv = fakeapi.NewServer(r.hotAPI, fakeapi.ServerOptions{TieBreaker: true})
	r.fpSrv = fakeapi.NewServer(r.fpAPI, fakeapi.ServerOptions{})
	r.hook = httptest.NewServer(http.HandlerFunc(r.receive))

	r.cfgPath = filepath.Join(r.dir, "watukuy.yaml")
	redisURL := "redis://" + r.proxy.Addr() + "/0"
	if r.o.RedisReadTimeout > 0 {
		redisURL += "?read_timeout=" + r.o.RedisReadTimeout.String()
	}
	r.readTimeout = clientReadTimeout(redisURL)
	r.redisURL = redisURL
	cfg := ProcessConfig(redisURL, processPrefix, r.srv.URL, r.hotSrv.URL, r.fpSrv.URL, r.hook.URL, processLeaseTTL)
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}

	r.stopped = map[*osProc]bool{}
	r.stoppedAt = map[*osProc]time.Time{}
	r.killed = map[string]time.Time{}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scheduler, err = r.startLocked("scheduler"); err != nil {
		return err
	}
	for range r.o.Workers {
		w, err := r.startLocked("worker")
		if err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// verifiedEvent reads a webhook delivery, checks its signature and decodes its event; on
// failure it has answered the request (a bad signature counted in badSig and, with logf,
// logged) and ok is false.
func verifiedEvent(w http.ResponseWriter, req *http.Request, badSig *atomic.Int64, logf func(string, ...any)) (ev watukuytype.Event, ok bool) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return ev, false
	}
	if err := sink.Verify([]string{processSecret}, req.Header, body, time.Now(), 5*time.Minute); err != nil {
		badSig.Add(1)
		if logf != nil {
			logf("G2: bad signature on webhook %s: %v", req.Header.Get(sink.HeaderID), err)
		}
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return ev, false
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return ev, false
	}
	return ev, true
}

// receive is the webhook endpoint: verify, record, 204.
func (r *processRun) receive(w http.ResponseWriter, req *http.Request) {
	ev, ok := verifiedEvent(w, req, &r.badSig, r.logf)
	if !ok {
		return
	}
	if r.refusePoison(ev) {
		http.Error(w, "poison: the consumer rejects this event", http.StatusInternalServerError)
		return
	}
	now := time.Now()
	if r.staleRedelivery(ev, req.Header.Get(sink.HeaderTimestamp), now) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	r.rec.Delivered(Delivery{Instance: "webhook", Event: ev, At: now})
	w.WriteHeader(http.StatusNoContent)
}

// staleLate is how long after its signature a delivery must arrive to come from a frozen
// sender: a webhook is signed right before it is sent, and a stop lasts 5 s.
const staleLate = 2 * time.Second

// staleRedelivery reports (and counts) a delivery the receiver drops as the README tells
// consumers to: a handler call that a frozen instance finishes after losing its lease still
// arrives ("no one can unsend it"), and consumers that need strict order drop a redelivery
// older than what they already applied. Dropped is only a delivery that is all of: late (signed
// at least staleLate before it arrived: its sender was frozen), a duplicate (its id was
// delivered before, with the same change), and stale (its seq is older than the newest one
// delivered for its identity). Anything else is recorded, so a first delivery out of order
// still counts against G4, and an old event sent again without a freeze against G3.
func (r *processRun) staleRedelivery(ev watukuytype.Event, signed string, now time.Time) bool {
	what := ev.Poller + "|" + ev.Partition + "|" + string(ev.Type) + "|" + ev.Identity + "|" + ev.Version + "|"
	if c, err := jcs.Append(nil, ev.Item); err == nil {
		h := sha256.Sum256(c)
		what += hex.EncodeToString(h[:8])
	} else {
		what += string(ev.Item)
	}
	r.recvMu.Lock()
	defer r.recvMu.Unlock()
	if r.whatOf == nil {
		r.whatOf, r.newest = map[string]string{}, map[string]string{}
	}
	secs, err := strconv.ParseInt(signed, 10, 64)
	late := err == nil && now.Sub(time.Unix(secs, 0)) >= staleLate+time.Second // the header has whole seconds
	newest, seen := r.newest[ev.Identity], r.whatOf[ev.ID]
	if late && seen == what && newest != "" && seqLess(ev.Seq, newest) {
		r.stale++
		r.logf("stale redelivery dropped: %s (%s %s v%s, seq %s) signed %s ago, after seq %s of its identity was delivered",
			ev.ID, ev.Type, ev.Identity, ev.Version, ev.Seq, now.Sub(time.Unix(secs, 0)).Round(time.Second), newest)
		return true
	}
	if seen == "" {
		r.whatOf[ev.ID] = what
	}
	if newest == "" || seqLess(newest, ev.Seq) {
		r.newest[ev.Identity] = ev.Seq
	}
	return false
}

func (r *processRun) run(ctx context.Context) (ProcessReport, error) {
	rngFaults := rand.New(rand.NewPCG(r.o.Seed, 0x5eed_fa17))
	rngChanges := rand.New(rand.NewPCG(r.o.Seed, 0x5eed_c4a9))
	rngOthers := rand.New(rand.NewPCG(r.o.Seed, 0x5eed_07e2)) // the hot and fp keys' own, so the orders key's changes stay as they were

	mutated := make(chan struct{})
	r.bg.Add(1)
	go func() { defer r.bg.Done(); defer close(mutated); r.mutate(rngChanges, rngOthers) }()

	deadline := time.Now().Add(r.o.Duration)
	if err := r.faults(ctx, rngFaults, deadline); err != nil {
		close(r.quiesce)
		return ProcessReport{}, err
	}

	// Quiesce: no more faults nor changes; every process runs.
	close(r.quiesce)
	<-mutated // the API's final state is fixed from here on
	r.proxy.Stall(0)
	r.proxy.StallReplies(0)
	r.mu.Lock()
	for p := range r.stopped {
		r.contLocked(p)
	}
	r.mu.Unlock()
	// The operator retries whatever is still parked, the receiver accepting every event.
	r.recvMu.Lock()
	r.hot.poisonID = ""
	r.recvMu.Unlock()
	if n, err := r.retryParked(ctx); err != nil || n > 0 {
		r.logf("quiesce: the operator retried %d parked row(s) of %s (%v)", n, hotKey, err)
	}
	truth, err := r.truth(ctx)
	if err != nil {
		return ProcessReport{}, err
	}
	r.logf("quiesce: faults and changes stopped, every process running; waiting for the delivered state to reach the API's")
	converged, err := r.waitConverged(ctx, truth)
	if err != nil {
		return ProcessReport{}, err
	}
	if !converged {
		r.diagnose(ctx)
		r.logMismatches()
	}
	r.shutdown()
	r.bg.Wait()
	tokenRefusals := r.tokenRefusals()

	// Ground truth of the politeness check: every request the API received.
	r.rec.MarkMeasured("throttles")
	throttles := 0
	for _, o := range []struct {
		key watukuytype.Key
		srv *fakeapi.Server
	}{{hotKey, r.hotSrv}, {fpKey, r.fpSrv}} {
		for _, q := range o.srv.Requests() {
			r.rec.Fetched(Fetch{Instance: "api", Key: o.key, At: q.Wall})
		}
	}
	for _, q := range r.srv.Requests() {
		if q.Path == "/items" || q.Path == "/list" {
			r.rec.Fetched(Fetch{Instance: "api", Key: processKey, At: q.Wall})
		}
		if q.Status == http.StatusTooManyRequests {
			throttles++
			r.rec.Throttled(Throttle{Key: processKey, From: q.Wall, To: q.Wall.Add(processRetryAfter)})
		}
	}
	r.logDuplicates()
	report := Check(truth, r.rec)
	r.checkHot(&report)
	for range r.badSig.Load() {
		report.Violations["G2"] = append(report.Violations["G2"], Violation{Key: processKey, Detail: "bad signature"})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Report = report
	r.rep.Changes = len(r.api.Changes()) + len(r.hotAPI.Changes()) + len(r.fpAPI.Changes())
	r.rep.HotParkKills, r.rep.HotCommitKills, r.rep.ParkedRetried = r.hot.parkKills, r.hot.commitKills, r.hot.retries
	r.rep.Throttles = throttles
	r.recvMu.Lock()
	r.rep.StaleRedeliveries = r.stale
	r.recvMu.Unlock()
	r.rep.Converged = converged
	r.rep.TokenRefusals = tokenRefusals
	if report.Failed() || !converged {
		r.failed = true
	}
	return r.rep, nil
}

// mutate changes the API until quiesce: creates, updates and deletes over processIDs
// identities, many in one second (the API clock follows the wall clock to the second).
func (r *processRun) mutate(rng, others *rand.Rand) {
	t := time.NewTicker(20 * time.Millisecond) // the pace of the API's changes
	defer t.Stop()
	for {
		select {
		case <-r.quiesce:
			return
		case <-t.C:
		}
		r.mutateOthers(others)
		r.api.SetNow(time.Now().UTC())
		id := "ord-" + strconv.Itoa(rng.IntN(processIDs))
		if rng.IntN(6) == 0 {
			r.api.Delete(id)
		} else {
			r.api.Put(id, map[string]any{"total": rng.IntN(1000)})
		}
	}
}

type faultKind int

const (
	faultKill      faultKind = iota // a random worker outside the orders key's cycle
	faultKillFetch                  // the worker of the orders key's cycle, its request held at the API
	faultStop
	faultRedis
	faultDrop
	faultStall
	faultThrottle
	faultFailover
	faultReplyStall
	faultHot // the hot key's next stage (process_hot.go): poison burst, held burst, operator retry
)

// faults runs the seeded timeline: first one fault of every kind (in a seeded order), all of
// them even past deadline, then faults drawn at random until deadline, each after a gap of
// 0.3–1.5 s.
func (r *processRun) faults(ctx context.Context, rng *rand.Rand, deadline time.Time) error {
	// The hot key's three stages follow each other whatever the order of their draws.
	plan := []faultKind{faultKill, faultKillFetch, faultStop, faultRedis, faultDrop, faultStall, faultThrottle, faultFailover, faultReplyStall,
		faultHot, faultHot, faultHot}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	// Weights of the random draws after the plan.
	draw := []faultKind{faultKill, faultKillFetch, faultStop, faultRedis, faultDrop, faultDrop, faultStall, faultStall, faultThrottle,
		faultFailover, faultReplyStall, faultHot}
	for i := 0; ; i++ {
		gap := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
		if !r.sleep(ctx, gap) {
			return ctx.Err()
		}
		if i >= len(plan) && !time.Now().Before(deadline) {
			return nil
		}
		k := draw[rng.IntN(len(draw))]
		if i < len(plan) {
			k = plan[i]
		}
		if err := r.inject(ctx, k, rng, deadline); err != nil {
			return err
		}
	}
}

// sleep waits d unless ctx ends (false).
func (r *processRun) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// inFlight waits up to max for a cycle of the key in flight (a live lease) and returns its
// holder and epoch; ok is false when none showed up.
func (r *processRun) inFlight(ctx context.Context, max time.Duration) (owner string, epoch int64, ok bool) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		snap, err := r.store.Inspect(ictx, processKey)
		cancel()
		if err == nil && snap.LeaseOwner != "" && snap.LeaseExpires.After(snap.Now) {
			return snap.LeaseOwner, snap.LeaseEpoch, true
		}
		time.Sleep(5 * time.Millisecond) // polling another process's state: there is no signal to wait on
	}
	return "", 0, false
}

// cycleTaskActive reports whether the asynq task of the key's cycle is active, i.e. some
// worker has dequeued it (it may not hold the lease yet, or any more).
func (r *processRun) cycleTaskActive() bool {
	ti, err := r.ins.GetTaskInfo(queue.DefaultQueue, queue.TaskID(processPrefix, processKey))
	return err == nil && ti.State == asynq.TaskStateActive
}

// killTarget picks the worker to SIGKILL outside the key's cycle and says how it was chosen:
// it waits (up to 2 s) until no worker has the cycle's asynq task, then picks a random worker
// that is neither stopped nor the lease holder. (faultKillFetch kills the cycle's own worker,
// during its request: killFetch.)
func (r *processRun) killTarget(ctx context.Context, pick uint64) (int, string) {
	deadline := time.Now().Add(2 * time.Second)
	for r.cycleTaskActive() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond) // polling another process's state: there is no signal to wait on
	}
	owner := ""
	ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if snap, err := r.store.Inspect(ictx, processKey); err == nil && snap.LeaseExpires.After(snap.Now) {
		owner = snap.LeaseOwner
	}
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	var cands []int
	for i, w := range r.workers {
		if !r.stopped[w] && w.name != owner {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return -1, ""
	}
	return cands[pick%uint64(len(cands))], "a random worker outside the key's cycle"
}

// killWorker SIGKILLs the worker killTarget picks (pick is drawn by the caller, so the
// timeline stays seeded) and starts a new one; how, when set, says why in the log.
func (r *processRun) killWorker(ctx context.Context, pick uint64, how string) error {
	i, target := r.killTarget(ctx, pick)
	if i < 0 {
		r.logf("SIGKILL skipped: no worker to kill")
		return nil
	}
	if how == "" {
		how = target
	}
	r.mu.Lock()
	p := r.workers[i]
	r.mu.Unlock()
	p.kill()
	if err := r.replaceWorker(i, p); err != nil {
		return err
	}
	r.mu.Lock()
	np := r.workers[i]
	r.mu.Unlock()
	r.logf("SIGKILL %s (pid %d, %s); started %s (pid %d)", p.name, p.pid(), how, np.name, np.pid())
	return nil
}

// replaceWorker starts a new worker in slot i for p, which the harness SIGKILLed (and waited
// for), and counts the kill.
func (r *processRun) replaceWorker(i int, p *osProc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.stopped, p)
	delete(r.stoppedAt, p)
	r.killed[p.name] = time.Now()
	np, err := r.startLocked("worker")
	if err != nil {
		return err
	}
	r.workers[i] = np
	r.rep.Kills++
	return nil
}

// The mid-fetch kill (killFetch): RecoveryGoal bounds the time from the SIGKILL of the key's
// cycle's worker to the key's next request (R1); recoveryWait is how long the run waits for
// that request; killFetchAimWait bounds the wait for a request to hold; fetchHold is how long
// the API holds it, past the poller's request timeout (5 s), so it is outstanding when its
// worker dies.
const (
	RecoveryGoal     = processLeaseTTL + 5*time.Second
	recoveryWait     = RecoveryGoal + 15*time.Second
	killFetchAimWait = 8 * time.Second
	fetchHold        = time.Minute
)

// killFetch SIGKILLs the worker running the orders key's cycle while its request is
// outstanding at the API, and measures the key's recovery: the time from the SIGKILL to the
// key's next request at the API, by any worker (R1: at most RecoveryGoal). It waits (up to
// processStopFor) until no worker is SIGSTOPped, so that only the lease's holder sends
// requests (a cycle confirms its lease before each request; a worker frozen by a stop or a
// failover resumes fenced), lets a queued 429 be answered, then has the API hold the key's
// next /items request (a Fault with a Delay) and, after hold (drawn within a lease TTL, so
// that kills land anywhere in the lease keeper's renewal period), kills the lease's holder,
// who sent it. The timeline waits for the key's next request (up to recoveryWait), so no
// other fault adds to the time: the dead worker's lease lapses, the key's claim, held on by
// each renewal, ends a lease TTL and core.ClaimGrace after the last one, and the scheduler
// enqueues a new task for the key whose task is active with nobody holding its lease.
func (r *processRun) killFetch(ctx context.Context, hold time.Duration) error {
	for until := time.Now().Add(processStopFor + time.Second); time.Now().Before(until); {
		r.mu.Lock()
		stopped := len(r.stopped)
		r.mu.Unlock()
		if stopped == 0 && r.srv.PendingFaults() == 0 {
			break
		}
		if !r.sleep(ctx, 10*time.Millisecond) { // polling other processes: there is no signal to wait on
			return ctx.Err()
		}
	}
	from := len(r.srv.Requests())
	r.srv.Inject(fakeapi.Fault{Path: "/items", Delay: fetchHold})
	held := -1
	var heldAt time.Time
	for deadline := time.Now().Add(killFetchAimWait); held < 0; {
		reqs := r.srv.Requests()
		for i := from; i < len(reqs) && held < 0; i++ {
			if reqs[i].Held && reqs[i].Status == 0 {
				held, heldAt = i, reqs[i].Wall
			}
		}
		if held >= 0 {
			break
		}
		if time.Now().After(deadline) {
			r.srv.ClearFaults() // only the hold is queued: nothing else injects meanwhile
			r.logf("SIGKILL mid-fetch skipped: no request of %s to hold within %s", processKey.Poller, killFetchAimWait)
			return nil
		}
		if !r.sleep(ctx, 5*time.Millisecond) { // polling the API's request log: there is no signal to wait on
			return ctx.Err()
		}
	}
	if !r.sleep(ctx, time.Until(heldAt.Add(hold))) {
		return ctx.Err()
	}
	if q := r.srv.Requests()[held]; q.Status != 0 {
		r.logf("SIGKILL mid-fetch skipped: the held request was answered %d before the kill", q.Status)
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	snap, err := r.store.Inspect(ictx, processKey)
	cancel()
	r.mu.Lock()
	i := -1
	for j, w := range r.workers {
		if err == nil && w.name == snap.LeaseOwner && snap.LeaseExpires.After(snap.Now) && !r.stopped[w] {
			i = j
		}
	}
	if i < 0 {
		r.mu.Unlock()
		r.logf("SIGKILL mid-fetch skipped: the held request's cycle has no live lease of a running worker (owner %q, %v)", snap.LeaseOwner, err)
		return nil
	}
	p := r.workers[i]
	r.mu.Unlock()
	killed := time.Now()
	p.kill()
	if err := r.replaceWorker(i, p); err != nil {
		return err
	}
	r.mu.Lock()
	r.rep.HolderKills++
	np := r.workers[i]
	r.mu.Unlock()
	r.logf("SIGKILL %s (pid %d, the holder of the key's cycle, epoch %d, its request to /items held at the API for %s); started %s (pid %d)",
		p.name, p.pid(), snap.LeaseEpoch, killed.Sub(heldAt).Round(time.Millisecond), np.name, np.pid())
	rc := Recovery{Instance: p.name, Key: processKey, Killed: killed, Waited: recoveryWait, Goal: RecoveryGoal}
	for deadline := killed.Add(recoveryWait); rc.Next.IsZero() && time.Now().Before(deadline); {
		if !r.sleep(ctx, 10*time.Millisecond) { // polling the API's request log: there is no signal to wait on
			return ctx.Err()
		}
		reqs := r.srv.Requests()
		for _, q := range reqs[held+1:] {
			if q.Path == "/items" && q.Wall.After(killed) {
				rc.Next = q.Wall
				break
			}
		}
	}
	r.rec.Recovered(rc)
	took, ok := rc.Took()
	if !ok {
		r.logf("recovery: no request of %s within %s of the SIGKILL of %s (goal %s)", processKey.Poller, recoveryWait, p.name, RecoveryGoal)
		return nil
	}
	r.mu.Lock()
	r.rep.Recoveries = append(r.rep.Recoveries, took)
	r.mu.Unlock()
	who := ""
	ictx, cancel = context.WithTimeout(ctx, time.Second)
	if snap, err := r.store.Inspect(ictx, processKey); err == nil && snap.LeaseOwner != "" {
		who = fmt.Sprintf(" (epoch %d held by %s)", snap.LeaseEpoch, snap.LeaseOwner)
	}
	cancel()
	r.logf("recovery: %s requested again %s after the SIGKILL of %s%s; goal %s", processKey.Poller, took.Round(time.Millisecond), p.name, who, RecoveryGoal)
	return nil
}

// aimWait is how long a fault waits for a cycle in flight before it fires anyway: a fault
// between two cycles tests little. replyStallAimWait is the reply stall's, for a cycle whose
// holder is not SIGSTOPped (a stop lasts 5 s; a key whose cycle died comes back a lease TTL
// and core.ClaimGrace after its last renewal, about 4 s).
const (
	aimWait           = time.Second
	replyStallAimWait = 4 * time.Second
)

// inFlightRunning is inFlight for a cycle whose holder is not SIGSTOPped.
func (r *processRun) inFlightRunning(ctx context.Context, max time.Duration) (owner string, epoch int64, ok bool) {
	deadline := time.Now().Add(max)
	for {
		owner, epoch, ok = r.inFlight(ctx, time.Until(deadline))
		if !ok {
			return owner, epoch, ok
		}
		r.mu.Lock()
		stopped := false
		for p := range r.stopped {
			stopped = stopped || p.name == owner
		}
		r.mu.Unlock()
		if !stopped {
			return owner, epoch, true
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state: there is no signal to wait on
	}
}

func (r *processRun) inject(ctx context.Context, k faultKind, rng *rand.Rand, deadline time.Time) error {
	if k == faultFailover {
		if err := r.prepareFailover(ctx); err != nil {
			return err
		}
	}
	// Every fault but the kills is aimed at a cycle in flight (see killTarget and killFetch for
	// the kills). The reply stall waits longer, for a cycle whose holder runs (not SIGSTOPped):
	// the scripts it sends next are the ones whose replies get lost.
	at := ""
	var owner string
	if k != faultKill && k != faultKillFetch && k != faultThrottle && k != faultHot {
		var epoch int64
		var ok bool
		if k == faultReplyStall {
			owner, epoch, ok = r.inFlightRunning(ctx, replyStallAimWait)
		} else {
			owner, epoch, ok = r.inFlight(ctx, aimWait)
		}
		if ok {
			at = fmt.Sprintf(" (mid-cycle: epoch %d held by %s)", epoch, owner)
		} else {
			at = " (between cycles)"
		}
	}
	switch k {
	case faultKill:
		return r.killWorker(ctx, rng.Uint64(), "")
	case faultKillFetch:
		return r.killFetch(ctx, time.Duration(rng.Int64N(int64(processLeaseTTL))))
	case faultHot:
		return r.hotFault(ctx, rng)
	case faultStop:
		r.mu.Lock()
		var p *osProc
		var cands []*osProc
		for _, w := range r.workers {
			if r.stopped[w] {
				continue
			}
			cands = append(cands, w)
			if w.name == owner {
				p = w // the cycle's holder: its writes after waking must be fenced
			}
		}
		pick := rng.IntN(max(len(cands), 1)) // drawn either way, so the timeline stays seeded
		if p == nil && len(cands) > 0 {
			p = cands[pick]
		}
		if p == nil {
			r.mu.Unlock()
			return nil
		}
		if err := p.signal(syscall.SIGSTOP); err != nil {
			r.mu.Unlock()
			r.logf("SIGSTOP %s: %v", p.name, err)
			return nil
		}
		r.stopped[p] = true
		r.stoppedAt[p] = time.Now()
		r.rep.Stops++
		r.mu.Unlock()
		r.logf("SIGSTOP %s (pid %d) for %s%s", p.name, p.pid(), processStopFor, at)
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			t := time.NewTimer(processStopFor)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.quiesce:
			}
			r.mu.Lock()
			r.contLocked(p)
			r.mu.Unlock()
		}()
	case faultRedis:
		down := 100*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))
		r.primary.kill()
		r.logf("kill -9 redis-server %s (the primary)%s; down for %s", r.primary.name, at, down.Round(time.Millisecond))
		r.sleep(ctx, down)
		if err := r.primary.start(ctx); err != nil {
			return err
		}
		r.mu.Lock()
		r.rep.RedisRestarts++
		r.mu.Unlock()
		r.logf("redis-server %s restarted (AOF replayed); %s resyncs with it", r.primary.name, r.replica.name)
	case faultFailover:
		return r.failover(ctx, rng, at)
	case faultReplyStall:
		return r.replyStall(ctx, rng, at)
	case faultDrop:
		n := r.proxy.DropAll()
		r.mu.Lock()
		r.rep.ProxyFaults++
		r.mu.Unlock()
		r.logf("proxy: dropped %d connections%s", n, at)
	case faultStall:
		d := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		r.proxy.Stall(d)
		r.mu.Lock()
		r.rep.ProxyFaults++
		r.mu.Unlock()
		r.logf("proxy: stalled for %s%s", d.Round(time.Millisecond), at)
		if !r.sleep(ctx, d) {
			return ctx.Err()
		}
	case faultThrottle:
		r.srv.Inject(fakeapi.Fault{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(int(processRetryAfter / time.Second))})
		r.logf("api: the next request is answered 429, Retry-After: 1")
	}
	return nil
}

// replyStall holds every reply of Redis back (the proxy's StallReplies) for 0.25–1.25 s longer
// than the processes' read timeout, requests still reaching Redis: a script sent in the first
// 0.25–1.25 s runs, its client gives up on the reply and re-sends it (go-redis retries a read
// timeout), unless the cycle's lease keeper has cancelled the cycle by then. The stall starts
// as MONITOR on the primary shows the cycle reading the rows of a page it fetched (LoadRows):
// the page's commit, a fenced script with a write id, follows within a millisecond, so its
// reply is held (or, when the stall wins the race, the rows' reply is). MONITOR also records
// which scripts ran twice (logs/monitor-<n>.log).
func (r *processRun) replyStall(ctx context.Context, rng *rand.Rand, at string) error {
	d := r.readTimeout + 250*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
	r.mu.Lock()
	r.rep.ReplyStalls++
	n := r.rep.ReplyStalls
	r.mu.Unlock()
	how := ""
	mon, err := monitorScripts(r.primary.addr(), filepath.Join(r.dir, "logs", fmt.Sprintf("monitor-%d.log", n)))
	if err != nil {
		r.logf("MONITOR on %s: %v (re-sent scripts not counted)", r.primary.name, err)
		r.proxy.StallReplies(d)
	} else {
		fired := make(chan struct{})
		rows := `"hmget" ` + strconv.Quote(processPrefix+":{"+processKey.String()+"}:items")
		mon.arm(func(cmd string) bool { return strings.HasPrefix(cmd, rows) }, func() {
			// Let the rows' reply pass (Redis writes it with this MONITOR line); the commit
			// goes out some 0.3 ms after it.
			for t0 := time.Now(); time.Since(t0) < rowsReplyPass; {
			}
			r.proxy.StallReplies(d)
			close(fired)
		})
		t := time.NewTimer(2 * time.Second)
		select {
		case <-fired:
			how = ", started as the cycle read the rows of a page (its commit follows)"
		case <-t.C:
			if mon.disarm() {
				r.proxy.StallReplies(d)
				how = ", started with no page read within 2s"
			} else {
				<-fired
				how = ", started as the cycle read the rows of a page (its commit follows)"
			}
		case <-ctx.Done():
			mon.disarm()
			t.Stop()
			_, _, _ = mon.stop(0)
			return ctx.Err()
		}
		t.Stop()
	}
	started := time.Now()
	r.logf("proxy: replies held for %s%s, requests still executed (the processes' read timeout is %s: their scripts run, the replies are lost, go-redis re-sends them)%s",
		d.Round(time.Millisecond), how, r.readTimeout, at)
	if !r.sleep(ctx, time.Until(started.Add(d))) {
		if mon != nil {
			_, _, _ = mon.stop(0)
		}
		return ctx.Err()
	}
	r.logf("proxy: replies flow again")
	if mon == nil {
		return nil
	}
	name := r.primary.name
	// A re-send goes out a read timeout after its first send, and within a retry backoff (at
	// most 512 ms) of that: each has reached Redis a second after the stall.
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		time.Sleep(time.Second)
		resent, fenced, byName := mon.stop(r.readTimeout - 250*time.Millisecond)
		r.mu.Lock()
		r.rep.ResentScripts += resent
		r.rep.ResentFenced += fenced
		r.mu.Unlock()
		r.logf("MONITOR on %s during reply stall %d (logs/monitor-%d.log): %d scripts ran twice (the same arguments from another connection, a read timeout later), %d of them fenced: %s",
			name, n, n, resent, fenced, countsText(byName))
	}()
	return nil
}

// rowsReplyPass is how long the reply stall waits after MONITOR showed a page's rows being
// read, for their reply to pass the proxy before the stall: a busy wait, since a timer's
// delay is not that precise.
const rowsReplyPass = 150 * time.Microsecond

// failoverGrantWait bounds how long a failover waits, the replication link cut, for the next
// lease grant of the key (cycles start about once a second).
const failoverGrantWait = 3 * time.Second

// replSyncTimeout bounds the waits for a replica (synced, promoted); a replica that takes
// longer is an infrastructure failure.
const replSyncTimeout = 15 * time.Second

// prepareFailover readies a failover before it is aimed: the replica has everything the
// primary had (so the failover loses only the writes of its own window), and no 429 can be
// answered in that window nor has one been in the last Retry-After. A Retry-After window
// saved in a lost write is lost with it, and the next owner's request inside that window
// would be a G8 violation no Redis-backed scheduler can prevent; the fault is about fencing
// and re-fetching, not about that.
func (r *processRun) prepareFailover(ctx context.Context) error {
	if _, err := r.waitSynced(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for ctx.Err() == nil {
		quiet := r.srv.PendingFaults() == 0
		if quiet {
			for _, q := range r.srv.Requests() {
				if q.Status == http.StatusTooManyRequests && time.Since(q.Wall) <= processRetryAfter+100*time.Millisecond {
					quiet = false
				}
			}
		}
		if quiet {
			return nil
		}
		if time.Now().After(deadline) {
			r.logf("failover: a 429 is still pending or recent after 5s; failing over anyway")
			return nil
		}
		time.Sleep(20 * time.Millisecond) // the API's request log has no signal to wait on
	}
	return ctx.Err()
}

// failover fails the primary over to its replica and loses the writes of a random window, as
// a Sentinel failover after a network partition does: cut the replication link, wait (up to
// failoverGrantWait) for the key's next lease grant, which lands on the primary alone, let
// the processes write to the primary alone for 100–800 ms more, kill -9 the primary, promote
// the replica, move the processes' proxy to it, then start a fresh replica of the new
// primary and wait until it is synced. The lost grant makes its epoch repeat on the new
// primary, with another token; the cycle that held it is frozen (loseGrant) and resumes once
// the epoch was granted again (thawLostHolder): its writes must be fenced off by the token.
func (r *processRun) failover(ctx context.Context, rng *rand.Rand, at string) error {
	window := 100*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond)))
	old, next := r.primary, r.replica
	r.link.Cut()
	cutEpoch := r.leaseEpoch(ctx)
	r.logf("failover: replication link to %s cut%s; lease epoch %d; the processes write to %s alone from now on",
		next.name, at, cutEpoch, old.name)
	r.mu.Lock()
	r.failoverN++
	n := r.failoverN
	r.mu.Unlock()
	// MONITOR on the old primary finds the lost grant and records the writes the failover
	// loses, until the kill ends it.
	var frozen *osProc
	lostEpoch := int64(-1)
	mon, err := monitorScripts(old.addr(), filepath.Join(r.dir, "logs", fmt.Sprintf("monitor-failover-%d.log", n)))
	if err != nil {
		r.logf("failover: MONITOR on %s: %v (the lost grant's holder is not frozen)", old.name, err)
	} else {
		frozen, lostEpoch = r.loseGrant(ctx, mon, old, cutEpoch)
	}
	r.logf("failover: %s more of writes on %s alone", window.Round(time.Millisecond), old.name)
	if !r.sleep(ctx, window) {
		if mon != nil {
			_, _, _ = mon.stop(0)
		}
		return ctx.Err()
	}
	lost := int64(-1)
	if p, err := infoFields(ctx, old.c, "replication"); err == nil {
		if q, err := infoFields(ctx, next.c, "replication"); err == nil {
			lost = atoi64(p["master_repl_offset"]) - atoi64(q["master_repl_offset"])
		}
	}
	oldEpoch := r.leaseEpoch(ctx) // direct still dials the old primary
	old.kill()
	if mon != nil {
		_, _, _ = mon.stop(0)
	}
	r.logf("failover: kill -9 redis-server %s (the primary); %d bytes of its replication stream, writes acknowledged to the processes, never reached %s (logs/monitor-failover-%d.log)",
		old.name, lost, next.name, n)
	start := time.Now()
	if err := next.promote(ctx); err != nil {
		return err
	}
	r.logf("failover: REPLICAOF NO ONE on %s: role:master after %s", next.name, time.Since(start).Round(time.Millisecond))
	r.primaryAddr.Store(next.addr())
	switch newEpoch := r.leaseEpoch(ctx); {
	case oldEpoch < 0 || newEpoch < 0:
	case oldEpoch > newEpoch:
		repeat := fmt.Sprintf("epoch %d", oldEpoch)
		if oldEpoch > newEpoch+1 {
			repeat = fmt.Sprintf("epochs %d to %d", newEpoch+1, oldEpoch)
		}
		r.logf("failover: the key's lease epoch was %d on %s and is %d on %s: the next grants repeat %s (another token each)",
			oldEpoch, old.name, newEpoch, next.name, repeat)
		r.mu.Lock()
		r.rep.LostGrants += int(oldEpoch - newEpoch)
		r.mu.Unlock()
	default:
		r.logf("failover: the key's lease epoch is %d on both (no grant was lost)", newEpoch)
	}
	r.proxy.Retarget(next.addr())
	r.primary, r.replica = next, nil
	r.logf("failover: proxy retargeted to %s (%s), every connection dropped: the processes reconnect to the new primary, as Sentinel would move them",
		next.name, next.addr())
	if frozen != nil {
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			r.thawLostHolder(frozen, lostEpoch)
		}()
	}

	r.link.Retarget(next.addr())
	r.link.Restore()
	fresh, err := r.newServer(r.link.Addr())
	if err != nil {
		return err
	}
	if err := fresh.start(ctx); err != nil {
		return err
	}
	r.replica = fresh
	r.logf("failover: started %s on %s (empty data dir) as a replica of %s through the link proxy", fresh.name, fresh.addr(), next.name)
	start = time.Now()
	off, err := r.waitSynced(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.rep.Failovers++
	r.mu.Unlock()
	r.logf("failover: %s synced with %s (offset %d, its AOF rewritten) after %s", fresh.name, next.name, off, time.Since(start).Round(time.Millisecond))
	return nil
}

// loseGrant waits (up to failoverGrantWait) for the key's next lease grant, which lands on
// the old primary alone, then (up to a second) for that cycle's first commit, and SIGSTOPs
// the holder right after it, mid-cycle: it resumes once the new primary has granted the
// same epoch again (thawLostHolder). It returns the frozen worker (nil when none) and the
// lost epoch (-1 when no grant came).
func (r *processRun) loseGrant(ctx context.Context, mon *scriptMonitor, old *redisServer, cutEpoch int64) (*osProc, int64) {
	type grant struct {
		owner, token string
		epoch        int64
	}
	granted := make(chan grant, 1)
	var armBegin func()
	armBegin = func() {
		mon.arm(isBegin, func() {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			snap, err := r.store.Inspect(ictx, processKey)
			cancel()
			if err != nil || snap.LeaseEpoch <= cutEpoch || snap.LeaseOwner == "" || !snap.LeaseExpires.After(snap.Now) {
				armBegin() // a Begin that granted nothing (not due, or leased)
				return
			}
			granted <- grant{owner: snap.LeaseOwner, token: r.leaseToken(ctx), epoch: snap.LeaseEpoch}
		})
	}
	armBegin()
	var g grant
	t := time.NewTimer(failoverGrantWait)
	defer t.Stop()
	select {
	case g = <-granted:
	case <-t.C:
		if mon.disarm() {
			r.logf("failover: no new grant within %s", failoverGrantWait)
			return nil, -1
		}
		g = <-granted
	case <-ctx.Done():
		if mon.disarm() {
			return nil, -1
		}
		g = <-granted
	}
	r.logf("failover: epoch %d (token %.6s) granted to %s on %s alone: a grant the failover loses", g.epoch, g.token, g.owner, old.name)

	committed := make(chan *osProc, 1)
	token := strconv.Quote(g.token)
	mon.arm(func(cmd string) bool {
		return strings.Contains(cmd, token) && scriptOf(cmd).name == "commit_poll"
	}, func() { committed <- r.freeze(g.owner) })
	var p *osProc
	t.Reset(time.Second)
	select {
	case p = <-committed:
	case <-t.C:
		if mon.disarm() {
			r.logf("failover: the cycle of epoch %d committed nothing within 1s; %s not frozen", g.epoch, g.owner)
			return nil, g.epoch
		}
		p = <-committed
	case <-ctx.Done():
		if mon.disarm() {
			return nil, g.epoch
		}
		p = <-committed
	}
	if p == nil {
		r.logf("failover: %s committed a page with epoch %d, but it is gone or already stopped", g.owner, g.epoch)
		return nil, g.epoch
	}
	r.logf("failover: %s committed a page with epoch %d on %s alone: SIGSTOP %s (pid %d) mid-cycle, until the new primary grants epoch %d again",
		g.owner, g.epoch, old.name, p.name, p.pid(), g.epoch)
	return p, g.epoch
}

// freeze SIGSTOPs the worker named owner (not already stopped) and returns it, or nil.
func (r *processRun) freeze(owner string) *osProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.workers {
		if w.name != owner || r.stopped[w] {
			continue
		}
		if err := w.signal(syscall.SIGSTOP); err != nil {
			return nil
		}
		r.stopped[w] = true
		r.stoppedAt[w] = time.Now()
		return w
	}
	return nil
}

// thawLostHolder waits (up to thawWait) until the key's lease epoch on the new primary has
// reached epoch, then SIGCONTs p: its writes carry that epoch and the token of a grant the
// failover lost.
func (r *processRun) thawLostHolder(p *osProc, epoch int64) {
	const thawWait = 8 * time.Second
	deadline := time.Now().Add(thawWait)
	for time.Now().Before(deadline) && !r.finished.Load() {
		select {
		case <-r.quiesce:
			deadline = time.Time{}
			continue
		case <-time.After(20 * time.Millisecond): // polling another process's state: there is no signal to wait on
		}
		if r.leaseEpoch(context.Background()) >= epoch {
			owner := ""
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if snap, err := r.store.Inspect(ctx, processKey); err == nil {
				owner = snap.LeaseOwner
			}
			cancel()
			r.logf("failover: the new primary granted epoch %d again (to %s, token %.6s): %s resumes with that epoch and the lost grant's token, and must be refused by the token",
				epoch, owner, r.leaseToken(context.Background()), p.name)
			break
		}
	}
	r.mu.Lock()
	r.contLocked(p)
	r.mu.Unlock()
}

// staleEpoch is the fence's refusal as the processes log it.
var staleEpoch = regexp.MustCompile(`LEASE_LOST epoch (\d+) is stale \(current (\d+)\)`)

// tokenRefusals counts the log lines of the workers that show a write refused by the lease
// token alone: "epoch N is stale (current N)", the epoch granted again after a failover.
func (r *processRun) tokenRefusals() int {
	logs, _ := filepath.Glob(filepath.Join(r.dir, "logs", "worker-*.log"))
	n := 0
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m := staleEpoch.FindStringSubmatch(line); m != nil && m[1] == m[2] {
				n++
				r.logf("%s: %s", filepath.Base(path), strings.TrimSpace(ansi.ReplaceAllString(line, "")))
			}
		}
	}
	return n
}

// ansi matches the colour codes of the processes' console logs.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// leaseToken reads the key's lease token on the primary direct dials ("" when it cannot).
func (r *processRun) leaseToken(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return r.direct.HGet(ctx, processPrefix+":{"+processKey.String()+"}:lease", "token").Val()
}

// leaseEpoch reads the key's lease epoch on the primary direct dials (-1 when it cannot).
func (r *processRun) leaseEpoch(ctx context.Context) int64 {
	for range 2 { // the first try may take a pooled connection to a killed server
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		snap, err := r.store.Inspect(ictx, processKey)
		cancel()
		if err == nil {
			return snap.LeaseEpoch
		}
	}
	return -1
}

// waitSynced waits until the replica has applied everything the primary had when called (its
// link up, its offset at the primary's master_repl_offset) and has its AOF written (no
// rewrite in progress or scheduled: after a full sync a replica rewrites its AOF, and a kill
// before that would lose the synced data on restart). It returns the offset reached.
func (r *processRun) waitSynced(ctx context.Context) (int64, error) {
	p, err := infoFields(ctx, r.primary.c, "replication")
	if err != nil {
		return 0, fmt.Errorf("chaos: %s: %w", r.primary.name, err)
	}
	want := atoi64(p["master_repl_offset"])
	deadline := time.Now().Add(replSyncTimeout)
	var last string
	for {
		repl, err := infoFields(ctx, r.replica.c, "replication")
		var pers map[string]string
		if err == nil {
			pers, err = infoFields(ctx, r.replica.c, "persistence")
		}
		if err == nil {
			got := atoi64(repl["master_repl_offset"])
			if repl["master_link_status"] == "up" && got >= want && pers["loading"] == "0" &&
				pers["aof_enabled"] == "1" && pers["aof_rewrite_in_progress"] == "0" && pers["aof_rewrite_scheduled"] == "0" {
				return got, nil
			}
			last = fmt.Sprintf("link %s, offset %d of %d, loading %s, AOF rewrite in progress %s, scheduled %s",
				repl["master_link_status"], got, want, pers["loading"], pers["aof_rewrite_in_progress"], pers["aof_rewrite_scheduled"])
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("chaos: replica %s not synced with %s after %s: %s (see logs/%s.log)",
				r.replica.name, r.primary.name, replSyncTimeout, last, r.replica.name)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond): // a server's replication state has no signal to wait on
		}
	}
}

// dialPrimary is the harness client's dialer: it connects to the current primary.
func (r *processRun) dialPrimary(ctx context.Context, network, _ string) (net.Conn, error) {
	d := net.Dialer{Timeout: time.Second}
	return d.DialContext(ctx, network, r.primaryAddr.Load().(string))
}

// newServer makes (not starts) a redis-server with its own port, data dir and log, a replica
// of replicaOf ("host:port") unless that is "".
func (r *processRun) newServer(replicaOf string) (*redisServer, error) {
	s, err := newRedisServer(r.redisBin, r.dir, fmt.Sprintf("redis-%d", len(r.servers)+1), replicaOf)
	if err != nil {
		return nil, err
	}
	r.servers = append(r.servers, s)
	return s, nil
}

// newRedisServer makes (not starts) the redis-server bin named name, on a free loopback port,
// with its data in dir/redis/<name> and its log in dir/logs/<name>.log (dir/logs must exist),
// a replica of replicaOf unless that is "". Every start of it replays its AOF.
func newRedisServer(bin, dir, name, replicaOf string) (*redisServer, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "redis", name)
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	s := &redisServer{name: name, bin: bin, dir: data, port: port, replicaOf: replicaOf,
		log: filepath.Join(dir, "logs", name+".log")}
	s.c = redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 2})
	return s, nil
}

// clientReadTimeout is the read timeout of a go-redis client made from url with the defaults,
// as the processes make theirs.
func clientReadTimeout(url string) time.Duration {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return 5 * time.Second
	}
	c := redis.NewClient(opt)
	defer c.Close()
	return c.Options().ReadTimeout
}

// infoFields is one INFO section as a map of its fields.
func infoFields(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("info %s: %w", section, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// scriptMonitor reads MONITOR on a direct connection to a redis-server and keeps, per
// script call (EVALSHA or EVAL with its arguments), when and from which connections it ran.
type scriptMonitor struct {
	conn    net.Conn
	done    chan struct{}
	runs    map[string][]scriptRun // written by the reader until done
	trigger atomic.Pointer[monitorTrigger]
}

// monitorTrigger runs fire once, on the first command of a client (not a script's) that
// match accepts.
type monitorTrigger struct {
	match func(cmd string) bool
	fire  func()
}

// arm sets the trigger (fire may arm it again); disarm removes it and reports whether it had
// not fired.
func (m *scriptMonitor) arm(match func(cmd string) bool, fire func()) {
	m.trigger.Store(&monitorTrigger{match: match, fire: fire})
}

func (m *scriptMonitor) disarm() bool { return m.trigger.Swap(nil) != nil }

type scriptRun struct {
	at     float64 // server time, seconds
	client string
}

// watukuyScripts maps the SHA1 of each of watukuy's scripts to its name, and tells the fenced
// ones (those that check the lease's epoch and token first).
var watukuyScripts = sync.OnceValue(func() map[string]scriptInfo {
	m := map[string]scriptInfo{}
	for _, name := range luascripts.Names() {
		if src, err := luascripts.Source(name); err == nil {
			m[redis.NewScript(src).Hash()] = scriptInfo{name: name, fenced: strings.Contains(src, "= fence(")}
		}
	}
	return m
})

type scriptInfo struct {
	name   string
	fenced bool
}

// isBegin tells a MONITOR line's command that runs begin.lua (a lease grant, or a skip).
func isBegin(cmd string) bool {
	return (strings.HasPrefix(cmd, `"evalsha" `) || strings.HasPrefix(cmd, `"eval" `)) && scriptOf(cmd).name == "begin"
}

// evalHeader finds a watukuy script's name in the source an EVAL carries (each file starts
// with "-- name.lua:").
var evalHeader = regexp.MustCompile(`-- ([a-z_]+)\.lua:`)

// scriptOf names the script of a MONITOR line's command; other scripts (asynq's) are "asynq".
func scriptOf(cmd string) scriptInfo {
	if sha, _, ok := strings.Cut(strings.TrimPrefix(cmd, `"evalsha" "`), `"`); ok && strings.HasPrefix(cmd, `"evalsha" `) {
		if si, ok := watukuyScripts()[sha]; ok {
			return si
		}
		return scriptInfo{name: "asynq"}
	}
	for _, m := range evalHeader.FindAllStringSubmatch(cmd, -1) {
		if m[1] != "prelude" {
			for _, si := range watukuyScripts() {
				if si.name == m[1] {
					return si
				}
			}
		}
	}
	return scriptInfo{name: "asynq"}
}

// monitorScripts starts MONITOR on addr, copying every line to logPath.
func monitorScripts(addr, logPath string) (*scriptMonitor, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		_, _ = c.Close(), f.Close()
		return nil, err
	}
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		_, _ = c.Close(), f.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	_ = c.SetDeadline(time.Time{})
	m := &scriptMonitor{conn: c, done: make(chan struct{}), runs: map[string][]scriptRun{}}
	go func() {
		defer close(m.done)
		w := bufio.NewWriter(f)
		defer func() { _, _ = w.Flush(), f.Close() }()
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = w.WriteString(line)
			// +1700000000.123456 [0 127.0.0.1:54321] "evalsha" "…" "2" "key" … ("[0 lua]" for
			// the commands a script runs)
			ts, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "+"), " [")
			if !ok {
				continue
			}
			client, cmd, ok := strings.Cut(rest, "] ")
			if !ok || strings.HasSuffix(client, " lua") {
				continue
			}
			if t := m.trigger.Load(); t != nil && t.match(cmd) && m.trigger.CompareAndSwap(t, nil) {
				t.fire()
			}
			if !strings.HasPrefix(cmd, `"evalsha" `) && !strings.HasPrefix(cmd, `"eval" `) {
				continue
			}
			at, _ := strconv.ParseFloat(ts, 64)
			m.runs[cmd] = append(m.runs[cmd], scriptRun{at: at, client: client})
		}
	}()
	return m, nil
}

// stop ends the monitor and counts the script calls that ran twice: the same arguments from
// another connection at least minGap later (a client's re-send after a read timeout); fenced
// is how many of those were watukuy's fenced scripts, and byName counts them per script.
func (m *scriptMonitor) stop(minGap time.Duration) (resent, fenced int, byName map[string]int) {
	_ = m.conn.Close()
	<-m.done
	byName = map[string]int{}
	for cmd, runs := range m.runs {
		again := false
		for i := 1; i < len(runs) && !again; i++ {
			for j := 0; j < i; j++ {
				if runs[i].client != runs[j].client && runs[i].at-runs[j].at >= minGap.Seconds() {
					again = true
					break
				}
			}
		}
		if again {
			si := scriptOf(cmd)
			resent++
			byName[si.name]++
			if si.fenced {
				fenced++
			}
		}
	}
	return resent, fenced, byName
}

// countsText renders counts per name, sorted: "commit_poll 1, renew 2".
func countsText(byName map[string]int) string {
	var names []string
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n+" "+strconv.Itoa(byName[n]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// contLocked sends SIGCONT to a stopped process (r.mu held).
func (r *processRun) contLocked(p *osProc) {
	if !r.stopped[p] {
		return
	}
	delete(r.stopped, p)
	d := time.Since(r.stoppedAt[p])
	delete(r.stoppedAt, p)
	if err := p.signal(syscall.SIGCONT); err == nil {
		if d > processLeaseTTL {
			r.logf("SIGCONT %s (pid %d) after %s, past its lease: whatever it writes now must be fenced", p.name, p.pid(), d.Round(10*time.Millisecond))
		} else {
			r.logf("SIGCONT %s (pid %d) after %s (cut short by the quiesce)", p.name, p.pid(), d.Round(10*time.Millisecond))
		}
	}
}

// waitConverged waits until the last delivered version per identity equals the API's final
// state; it gives up after processQuiesceMax (less when ctx ends sooner), or when no new event
// was delivered for processQuiesceIdle.
func (r *processRun) waitConverged(ctx context.Context, truth map[watukuytype.Key]Truth) (bool, error) {
	want := map[watukuytype.Key]map[string]string{}
	live := 0
	for k, t := range truth {
		want[k] = map[string]string{}
		for id := range t.Final {
			want[k][id], _ = t.want(id)
			live++
		}
	}
	start := time.Now()
	limit := processQuiesceMax
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl)-20*time.Second) // leave time to stop and check
	}
	lastCount, lastChange := -1, time.Now()
	t := time.NewTicker(100 * time.Millisecond) // polling real processes: there is no signal to wait on
	defer t.Stop()
	for {
		ds := r.rec.Deliveries()
		unique := map[string]bool{}
		for _, d := range ds {
			unique[d.Event.ID] = true
		}
		if deliveredState(ds, truth, want) {
			r.logf("converged after %s: %d deliveries, the delivered state equals the APIs' (%d live items)",
				time.Since(start).Round(10*time.Millisecond), len(ds), live)
			return true, nil
		}
		if len(unique) != lastCount { // redeliveries of known events are no progress
			lastCount, lastChange = len(unique), time.Now()
		}
		switch {
		case time.Since(start) > limit:
			r.logf("not converged after %s (%d deliveries, %d distinct events)", limit.Round(time.Second), len(ds), len(unique))
			return false, nil
		case time.Since(lastChange) > processQuiesceIdle:
			r.logf("not converged: no new event delivered for %s (%d deliveries, %d distinct events)", processQuiesceIdle, len(ds), len(unique))
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// deliveredState reports whether the last delivered version per identity of every key of
// truth equals want's.
func deliveredState(ds []Delivery, truth map[watukuytype.Key]Truth, want map[watukuytype.Key]map[string]string) bool {
	order := make([]seen, len(ds))
	for i, d := range ds {
		order[i] = seen{watukuytype.Key{Poller: d.Event.Poller, Partition: d.Event.Partition}, d.Event}
	}
	got := finalStates(order, false, truth)
	for k := range truth {
		if !sameState(got[k], want[k]) {
			return false
		}
	}
	return true
}

// truth is the ground truth of the run's three keys, once the changes have stopped: the fp
// key's by content (its field n, what its fingerprint sees), the hot key's with its ordering
// keys.
func (r *processRun) truth(ctx context.Context) (map[watukuytype.Key]Truth, error) {
	fp, err := TruthByContent(ctx, r.fpAPI, fieldN)
	if err != nil {
		return nil, err
	}
	hot := TruthOf(r.hotAPI)
	hot.OrderingKey = hotOrderingKey
	return map[watukuytype.Key]Truth{processKey: TruthOf(r.api), hotKey: hot, fpKey: fp}, nil
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// diagnose logs why the key did not converge: its lease, outbox and last error, and the
// asynq task of its cycle (an archived task keeps its ID, and the scheduler's enqueue then
// conflicts with it).
func (r *processRun) diagnose(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	owner := ""
	if snap, err := r.store.Inspect(ctx, processKey); err == nil {
		owner = snap.LeaseOwner
		r.logf("diagnosis: lease owner %q epoch %d expires %s (server now %s); outbox %d; parked %d; lastError %s",
			snap.LeaseOwner, snap.LeaseEpoch, snap.LeaseExpires.Format(time.TimeOnly), snap.Now.Format(time.TimeOnly),
			snap.OutboxLen, snap.Parked, snap.State["lastError"])
	}
	r.mu.Lock()
	at, wasKilled := r.killed[owner]
	r.mu.Unlock()
	if wasKilled {
		r.logf("diagnosis: the last lease holder %s was SIGKILLed at %.2fs, mid-cycle", owner, at.Sub(r.start).Seconds())
	}
	if score, err := r.direct.ZScore(ctx, r.store.DueKey(processKey.Poller), processKey.String()).Result(); err == nil {
		r.logf("diagnosis: due at %s", time.UnixMilli(int64(score)).Format(time.TimeOnly))
	}
	id := queue.TaskID(processPrefix, processKey)
	if ti, err := r.ins.GetTaskInfo(queue.DefaultQueue, id); err == nil {
		r.logf("diagnosis: asynq task %s is %s (last error %q); while it exists the scheduler's enqueue of the key conflicts",
			id, ti.State, ti.LastErr)
	} else {
		r.logf("diagnosis: asynq task %s: %v", id, err)
	}
}

// logDuplicates logs the most redelivered events: how often, over what span, in which lane.
func (r *processRun) logDuplicates() {
	type dup struct {
		n           int
		first, last time.Time
		ev          watukuytype.Event
	}
	byID := map[string]*dup{}
	var ids []string
	for _, d := range r.rec.Deliveries() {
		x := byID[d.Event.ID]
		if x == nil {
			x = &dup{first: d.At, ev: d.Event}
			byID[d.Event.ID] = x
			ids = append(ids, d.Event.ID)
		}
		x.n++
		x.last = d.At
	}
	sort.SliceStable(ids, func(i, j int) bool { return byID[ids[i]].n > byID[ids[j]].n })
	for _, id := range ids[:min(3, len(ids))] {
		x := byID[id]
		if x.n < 3 {
			break
		}
		r.logf("delivered %d times: %s (%s %s v%s, lane %s, seq %s) from %.2fs to %.2fs", x.n, id, x.ev.Type, x.ev.Identity,
			x.ev.Version, x.ev.Lane, x.ev.Seq, x.first.Sub(r.start).Seconds(), x.last.Sub(r.start).Seconds())
	}
}

// logMismatches logs, for a few identities whose last delivered version differs from the
// API's, every delivery of that identity and the API's changes to it.
func (r *processRun) logMismatches() {
	final := r.api.Final()
	byIdentity := map[string][]Delivery{}
	for _, d := range r.rec.Deliveries() {
		byIdentity[d.Event.Identity] = append(byIdentity[d.Event.Identity], d)
	}
	var ids []string
	for id := range final {
		ids = append(ids, id)
	}
	for id := range byIdentity {
		if _, ok := final[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	shown := 0
	for _, id := range ids {
		ds := byIdentity[id]
		last := ""
		if n := len(ds); n > 0 && ds[n-1].Event.Type != watukuytype.Deleted {
			last = ds[n-1].Event.Version
		}
		want := ""
		if v, ok := final[id]; ok {
			want = strconv.Itoa(v)
		}
		if last == want || shown >= 3 {
			continue
		}
		shown++
		r.logf("mismatch %s: API has %q, last delivered %q; its deliveries:", id, want, last)
		for _, d := range ds[max(0, len(ds)-8):] {
			r.logf("  %.3fs %s v%s %s seq %s lane %s", d.At.Sub(r.start).Seconds(), d.Event.Type, d.Event.Version, d.Event.ID, d.Event.Seq, d.Event.Lane)
		}
		var changes []string
		for _, c := range r.api.Changes() {
			if c.ID == id {
				what := "v" + strconv.Itoa(c.Version)
				if c.Deleted {
					what = "deleted@" + what
				}
				changes = append(changes, what+" "+c.At.Format(time.TimeOnly))
			}
		}
		r.logf("  API changes: %s", strings.Join(changes[max(0, len(changes)-6):], ", "))
	}
}

// shutdown sends SIGTERM to every process and waits for each (20 s, then SIGKILL).
func (r *processRun) shutdown() {
	r.finished.Store(true)
	r.mu.Lock()
	procs := append([]*osProc{r.scheduler}, r.workers...)
	for p := range r.stopped {
		r.contLocked(p)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		p.expect.Store(true)
		if err := p.signal(syscall.SIGTERM); err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(20 * time.Second)
			defer t.Stop()
			select {
			case <-p.done:
				if p.err != nil {
					r.logf("%s exited with %v after SIGTERM", p.name, p.err)
				}
			case <-t.C:
				r.logf("%s did not exit within 20s of SIGTERM: SIGKILL", p.name)
				p.kill()
			}
		}()
	}
	wg.Wait()
	r.logf("SIGTERM: every process stopped")
}

// cleanup stops whatever still runs and removes what the run created (the scratch directory
// only after a clean run).
func (r *processRun) cleanup() {
	r.finished.Store(true)
	r.mu.Lock()
	procs := append([]*osProc(nil), r.workers...)
	if r.scheduler != nil {
		procs = append(procs, r.scheduler)
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
	if r.hook != nil {
		r.hook.Close()
	}
	for _, s := range []*fakeapi.Server{r.srv, r.hotSrv, r.fpSrv} {
		if s != nil {
			s.Close()
		}
	}
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
	if r.link != nil {
		_ = r.link.Close()
	}
	if r.direct != nil {
		_ = r.direct.Close()
	}
	for _, s := range r.servers {
		s.kill()
		_ = s.c.Close()
	}
	if r.removeBin {
		_ = os.RemoveAll(r.binDir)
	}
	if r.removeDir {
		if failed {
			r.logf("kept the scratch directory for inspection: %s (logs/ has every process's output)", r.dir)
		} else {
			_ = os.RemoveAll(r.dir)
		}
	}
}

// startLocked starts a scheduler or a worker (r.mu held). A process that exits on its own
// (e.g. it started while Redis was down) is started again while the run lasts.
func (r *processRun) startLocked(kind string) (*osProc, error) {
	r.nextID++
	id := fmt.Sprintf("%s-%d", kind, r.nextID)
	args := []string{"--config", r.cfgPath, "--listen", "off", "--log-format", "console", "--instance-id", id}
	bin := filepath.Join(r.binDir, "watukuy-scheduler")
	if kind == "worker" {
		bin = filepath.Join(r.binDir, "watukuy-worker")
		// Deliveries wait for the replica: a failover that loses a commit whose events were
		// delivered would leave the consumer ahead of the promoted replica's state.
		args = append(args, "--concurrency", "4", "--drain-timeout", "2s", "--wait-replicas", "1")
	}
	p, err := startProc(id, bin, args, filepath.Join(r.dir, "logs", id+".log"), []string{"HOOK_SECRET=" + processSecret})
	if err != nil {
		return nil, err
	}
	go func() {
		<-p.done
		if p.expect.Load() || r.finished.Load() {
			return
		}
		r.respawn(kind, p)
	}()
	return p, nil
}

// respawn replaces a process that exited on its own.
func (r *processRun) respawn(kind string, old *osProc) {
	time.Sleep(200 * time.Millisecond) // let the cause (Redis restarting) pass
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished.Load() {
		return
	}
	delete(r.stopped, old)
	delete(r.stoppedAt, old)
	np, err := r.startLocked(kind)
	if err != nil {
		r.logf("respawn %s: %v", old.name, err)
		return
	}
	if old == r.scheduler {
		r.scheduler = np
	}
	for i, w := range r.workers {
		if w == old {
			r.workers[i] = np
		}
	}
	r.rep.Respawns++
	r.logf("%s exited on its own (%v; see logs/%s.log); started %s", old.name, old.err, old.name, np.name)
}

// osProc is one running binary.
type osProc struct {
	name   string
	cmd    *exec.Cmd
	logf   *os.File
	done   chan struct{} // closed when the process has exited; err is then set
	err    error
	expect atomic.Bool // the harness ends it: no respawn
}

func startProc(name, bin string, args []string, logPath string, env []string) (*osProc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("chaos: start %s: %w", bin, err)
	}
	p := &osProc{name: name, cmd: cmd, logf: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *osProc) pid() int { return p.cmd.Process.Pid }

func (p *osProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *osProc) signal(s os.Signal) error {
	if p.exited() {
		return os.ErrProcessDone
	}
	return p.cmd.Process.Signal(s)
}

// kill sends SIGKILL and waits for the exit.
func (p *osProc) kill() {
	p.expect.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// redisServer is a redis-server the run kills and restarts with the same arguments, so the
// AOF in dir replays.
type redisServer struct {
	name, bin, dir, log string
	port                int
	// replicaOf is the "host:port" it replicates from (the link proxy), "" once it is a
	// primary: a promoted replica restarts as a primary.
	replicaOf string
	proc      *osProc
	c         *redis.Client // the harness's direct connection: pings, INFO, REPLICAOF
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start(ctx context.Context) error {
	// Every server has the persistence the run uses (AOF, fsync on every write). The
	// replication settings (as in redistest.Replicas): a diskless full sync that starts as
	// soon as a replica connects, and a replica that notices a stalled link within seconds.
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
		"--repl-timeout", "5", "--loglevel", "notice"}
	if s.replicaOf != "" {
		host, port, err := net.SplitHostPort(s.replicaOf)
		if err != nil {
			return err
		}
		args = append(args, "--replicaof", host, port)
	}
	p, err := startProc(s.name, s.bin, args, s.log, nil)
	if err != nil {
		return err
	}
	s.proc = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: redis-server %s on %s did not answer within 10s: %v (see %s)", s.name, s.addr(), err, s.log)
		}
		select {
		case <-p.done:
			return fmt.Errorf("chaos: redis-server %s exited at start: %v (see %s)", s.name, p.err, s.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// promote turns a replica into a primary (REPLICAOF NO ONE, as Sentinel does) and waits
// until it reports role:master.
func (s *redisServer) promote(ctx context.Context) error {
	if err := s.c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("chaos: REPLICAOF NO ONE on %s: %w", s.name, err)
	}
	s.replicaOf = ""
	deadline := time.Now().Add(replSyncTimeout)
	for {
		info, err := infoFields(ctx, s.c, "replication")
		if err == nil && info["role"] == "master" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s not role:master %s after REPLICAOF NO ONE (role %q, %v)", s.name, replSyncTimeout, info["role"], err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond): // a server's role has no signal to wait on
		}
	}
}

func (s *redisServer) kill() {
	if s.proc != nil {
		s.proc.kill()
	}
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BuildBinaries compiles watukuy, watukuy-worker and watukuy-scheduler into dir (for tests
// that run the real processes).
func BuildBinaries(ctx context.Context, dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	for name, pkg := range map[string]string{"watukuy": "./cmd/cli", "watukuy-worker": "./cmd/worker", "watukuy-scheduler": "./cmd/scheduler"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("chaos: go build %s: %w\n%s", pkg, err, out)
		}
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
// fake API's /items with a reconcile lane over /list, delivering to a signed webhook whose
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
    reconcile: {every: 1s, url: %s/list, param: page, sizeParam: per_page, size: 50, hasMore: has_more}
    leaseTTL: %s
    delivery:
      webhook: {url: %s/hook, secret: "${HOOK_SECRET}", timeout: 5s}
      concurrency: 4
`, redisURL, prefix, apiURL, lo, hi, apiURL, leaseTTL, hookURL)
}
