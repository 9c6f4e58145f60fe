//go:build unix

package procchaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// The broker sinks under SIGKILL: the built binaries (a scheduler, sinkWorkers workers)
// deliver a poller of sinkPartitions keys to a real broker while the fake API changes under
// them, and every time an event of a key reaches the broker for the first time, the worker
// that holds that key's lease is killed and replaced (the key then waits out its claim, lease
// TTL + 2 s, before a worker takes it up again). Most kills land after the
// broker confirmed an event and before the engine acked it in its outbox: the next holder of
// the key delivers it again. Once the API stops and every outbox has drained, the broker must
// hold every committed event (the union of the keys' replay logs): exactly once for NATS
// (Nats-Msg-Id within the duplicate window) and PostgreSQL (ON CONFLICT (id)), in commit order
// per ordering key; at least once for RabbitMQ, which keeps no memory of message ids.

const (
	sinkWorkers     = 3
	sinkPartitions  = 8
	sinkIdentities  = 30
	sinkChangeEvery = 50 * time.Millisecond // 20 changes a second
	// sinkKillGap is how long a key is left alone after a kill: its lease lapses first
	// anyway, and the kills spread over the keys.
	sinkKillGap = time.Second
	// sinkStale drops an arrival the killer reads this late: its cycle has likely acked.
	sinkStale = 250 * time.Millisecond
	// sinkAfterKill is when the outbox is read after a kill: the killed worker's last write
	// (an ack still in its socket's buffer) may reach Redis after the kill, and no holder can
	// take the key before its lease lapses.
	sinkAfterKill = 100 * time.Millisecond
	// sinkSettled is how long the replay logs must stay unchanged, every outbox empty, for
	// the run to count as quiet.
	sinkSettled = time.Second
)

// sinkOptions configures runSinkChaos.
type sinkOptions struct {
	Target sinkTarget
	// Dir holds the config, the redis-server's data and logs/ (every process's output).
	Dir string
	// BinDir holds the built binaries (BuildBinaries).
	BinDir string
	// Kills is how many SIGKILLs of a delivering worker the run makes before it quiesces.
	Kills int
	// KillFor bounds the phase of kills: fewer than Kills by then fails the run.
	KillFor time.Duration
	// Quiesce bounds the wait, once the API stops, for every outbox to drain.
	Quiesce time.Duration
	// WorkerConcurrency is each worker's --concurrency (cycles at once); default 1: a kill
	// then takes down the one cycle it aims at, and no other key waits out its claim (lease
	// TTL + 2 s) without a kill to show for it (100 kills took 49 s at 1, 76 s at 2 and
	// more than 100 s at 4).
	WorkerConcurrency int
	// Logf receives the run's progress; nil for none.
	Logf func(format string, args ...any)
}

// sinkReport is what a run measured and what its check found.
type sinkReport struct {
	Sink string
	// Kills counts the SIGKILLs of the worker that held the lease of a key whose event had
	// just reached the broker; KillsBetweenConfirmAndAck those after which the key's outbox
	// still held an event the broker already had (it is delivered again).
	Kills, KillsBetweenConfirmAndAck int
	// Committed counts the distinct event ids of the keys' replay logs; LogRepeats the log
	// entries beyond one per id.
	Committed, LogRepeats int
	// Stored counts the messages (rows) the broker holds, Distinct their distinct event ids,
	// Duplicates the difference.
	Stored, Distinct, Duplicates int
	// Missing counts committed events the broker lacks, Unknown stored ids no log holds,
	// Mislabelled stored events whose message id, poller or partition differs from the
	// event's.
	Missing, Unknown, Mislabelled int
	// OrderChecked says whether the broker's order was compared with the commit order per
	// ordering key; OutOfOrder counts the stored events that came before an event committed
	// earlier.
	OrderChecked bool
	OutOfOrder   int
	// Missed counts the arrivals the killer took up whose key no live worker held by then
	// (its cycle had acked and ended).
	Missed int
	// Back are the times from a kill to the next arrival of the killed key's events: the
	// key's recovery (its lease and claim lapse, a worker takes it up again).
	Back []time.Duration
	// Respawns counts processes that exited on their own and were started again.
	Respawns int
	// LogProblems counts the processes' warning and error lines; LogSamples holds a few.
	LogProblems int
	LogSamples  []string
	// KillPhase, QuiescePhase and Took are the durations of the phases and the whole run.
	KillPhase, QuiescePhase, Took time.Duration
	// Problems are the violated expectations, one line each.
	Problems []string
	// Logs are the paths of the processes' outputs.
	Logs []string
}

// Lines renders the report for a test log.
func (r sinkReport) Lines() []string {
	order := "not checked (at least once: order among re-sends is the consumer's)"
	if r.OrderChecked {
		order = fmt.Sprintf("%d stored events out of commit order", r.OutOfOrder)
	}
	return []string{
		fmt.Sprintf("%s sink: %d kills of the delivering worker, %d between the broker's confirm and the outbox ack; %d arrivals whose cycle had ended; a killed key's next arrival after %s; %d respawns",
			r.Sink, r.Kills, r.KillsBetweenConfirmAndAck, r.Missed, spread(r.Back), r.Respawns),
		fmt.Sprintf("%s sink: committed %d (log repeats %d); stored %d, distinct %d, duplicates %d; missing %d, unknown %d, mislabelled %d; order: %s",
			r.Sink, r.Committed, r.LogRepeats, r.Stored, r.Distinct, r.Duplicates, r.Missing, r.Unknown, r.Mislabelled, order),
		fmt.Sprintf("%s sink: kill phase %s, quiesce %s, whole run %s; %d warning and error lines in the processes' logs",
			r.Sink, r.KillPhase.Round(time.Millisecond), r.QuiescePhase.Round(time.Millisecond), r.Took.Round(time.Millisecond), r.LogProblems),
	}
}

// spread renders p50 and max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none measured"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %s, max %s", s[(len(s)-1)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func (r *sinkReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// sinkTarget is the broker a run delivers to: its sink's config, and what the run reads back
// from it.
type sinkTarget interface {
	// Kind names the sink ("nats", "amqp", "postgres").
	Kind() string
	// Delivery is the poller's sink entry under delivery:, one YAML line.
	Delivery() string
	// Prepare creates what the operator creates before the processes start.
	Prepare(ctx context.Context) error
	// Watch calls arrived for every event as it reaches the broker, until ctx ends; it
	// returns nil then.
	Watch(ctx context.Context, arrived func(sinkArrival)) error
	// Stored reads everything the broker holds, in its order.
	Stored(ctx context.Context) ([]storedEvent, error)
	// ExactlyOnce says the broker stores a re-sent event once, in commit order per
	// ordering key.
	ExactlyOnce() bool
	// Remove deletes what the run and the sink created at the broker.
	Remove(ctx context.Context) error
}

// sinkArrival is one event seen at the broker.
type sinkArrival struct {
	Key watukuytype.Key
	ID  string
	At  time.Time
}

// storedEvent is one message (row) the broker holds: the id it is stored under (Nats-Msg-Id,
// message_id, the id column) and the envelope's fields.
type storedEvent struct {
	MessageID                       string
	ID, Poller, Partition, Identity string
}

// committedEvent is one entry of a key's replay log, in commit order.
type committedEvent struct {
	Key         watukuytype.Key
	ID          string
	OrderingKey string
}

// envelopeFields are the envelope's fields a run reads.
type envelopeFields struct {
	ID        string `json:"id"`
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	Identity  string `json:"identity"`
}

func parseEnvelope(b []byte) (envelopeFields, error) {
	var e envelopeFields
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("envelope %.80q: %w", b, err)
	}
	return e, nil
}

// sinkRun is one run's state.
type sinkRun struct {
	o       sinkOptions
	rep     sinkReport
	keys    []watukuytype.Key
	cfg     string
	redis   *redisServer
	rdb     *redis.Client
	store   *redisstore.Store
	api     *fakeapi.API
	srv     *fakeapi.Server
	stop    chan struct{} // ends the API's changes
	mutated sync.WaitGroup

	// seen holds the event ids the broker has (its watcher's arrivals).
	seenMu sync.Mutex
	seen   map[string]bool

	between atomic.Int64
	checks  sync.WaitGroup

	mu       sync.Mutex
	finished bool
	nextID   int
	workers  map[string]*osProc // live workers by instance id
	procs    []*osProc          // every process started
	respawns []string
}

// runSinkChaos runs the processes against o.Target, kills, quiesces and checks. The error is
// the harness's (a setup that failed, too few kills, outboxes that never drained); a broken
// guarantee is a line of the report's Problems.
func runSinkChaos(ctx context.Context, o sinkOptions) (sinkReport, error) {
	start := time.Now()
	r := &sinkRun{o: o, rep: sinkReport{Sink: o.Target.Kind()}, seen: map[string]bool{}, workers: map[string]*osProc{},
		stop: make(chan struct{})}
	if r.o.WorkerConcurrency == 0 {
		r.o.WorkerConcurrency = 1
	}
	for i := range sinkPartitions {
		r.keys = append(r.keys, watukuytype.Key{Poller: processKey.Poller, Partition: "p" + strconv.Itoa(i)})
	}
	defer r.cleanup() // after a panic too: no process outlives the run
	err := r.run(ctx)
	r.cleanup()
	r.rep.Took = time.Since(start)
	r.scanLogs()
	return r.rep, err
}

func (r *sinkRun) logf(format string, args ...any) {
	if r.o.Logf != nil {
		r.o.Logf(format, args...)
	}
}

func (r *sinkRun) run(ctx context.Context) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	if err := r.killPhase(ctx); err != nil {
		return err
	}
	if err := r.quiesce(ctx); err != nil {
		return err
	}
	return r.check(ctx)
}

// setup starts redis-server, the API and its changes, the broker's watcher's prerequisites
// and the processes.
func (r *sinkRun) setup(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("chaos: redis-server not found: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(r.o.Dir, "logs"), 0o755); err != nil {
		return err
	}
	if r.redis, err = newRedisServer(bin, r.o.Dir, "redis", ""); err != nil {
		return err
	}
	if err := r.redis.start(ctx); err != nil {
		return err
	}
	r.rdb = redis.NewClient(&redis.Options{Addr: r.redis.addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, PoolSize: 8})
	if r.store, err = redisstore.New(r.rdb, redisstore.Options{Prefix: processPrefix}); err != nil {
		return err
	}
	if err := r.o.Target.Prepare(ctx); err != nil {
		return fmt.Errorf("chaos: prepare the %s broker: %w", r.o.Target.Kind(), err)
	}

	r.api = fakeapi.New()
	r.api.SetNow(time.Now().UTC())
	for i := range sinkIdentities {
		r.api.Put("ord-"+strconv.Itoa(i), map[string]any{"total": i})
	}
	r.srv = fakeapi.NewServer(r.api, fakeapi.ServerOptions{TieBreaker: true})
	r.cfg = filepath.Join(r.o.Dir, "watukuy.yaml")
	if err := os.WriteFile(r.cfg, []byte(r.config()), 0o600); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.startLocked("scheduler"); err != nil {
		return err
	}
	for range sinkWorkers {
		if _, err := r.startLocked("worker"); err != nil {
			return err
		}
	}
	r.mutated.Add(1)
	go r.mutate()
	r.logf("%s sink: redis-server on %s, the API on %s, a scheduler and %d workers (--concurrency %d) polling %d partitions; scratch dir %s",
		r.rep.Sink, r.redis.addr(), r.srv.URL, sinkWorkers, r.o.WorkerConcurrency, sinkPartitions, r.o.Dir)
	return nil
}

// config is the processes' config: one timestamp poller of sinkPartitions partitions, each
// polling the same API (its partition in the query, so the run sees which polled), a 2 s lease,
// a replay log that keeps every committed event, delivery to the target's sink.
func (r *sinkRun) config() string {
	parts := make([]string, len(r.keys))
	for i, k := range r.keys {
		parts[i] = k.Partition
	}
	return fmt.Sprintf(`redis: redis://%s/0
prefix: %s
pollers:
  - name: %s
    partitions: [%s]
    request: {url: %s/items, query: {p: "${partition}"}, timeout: 5s}
    items: data
    version: version
    cursor: {strategy: timestamp, field: updated_at, param: updated_since, limitParam: limit, limit: 20, hasMore: has_more, tieBreaker: after_id}
    schedule: {min: 100ms, max: 500ms}
    leaseTTL: %s
    log: {retention: 1h}
    delivery:
      %s
      concurrency: 4
`, r.redis.addr(), processPrefix, processKey.Poller, strings.Join(parts, ", "), r.srv.URL, processLeaseTTL, r.o.Target.Delivery())
}

// startLocked starts a scheduler or a worker (r.mu held) and watches for its exit on its own:
// that is reported, and the process started again while the run lasts.
func (r *sinkRun) startLocked(kind string) (*osProc, error) {
	r.nextID++
	id := fmt.Sprintf("%s-%d", kind, r.nextID)
	args := []string{"--config", r.cfg, "--redis", "redis://" + r.redis.addr() + "/0", "--listen", "off",
		"--log-format", "json", "--instance-id", id}
	if kind == "worker" {
		args = append(args, "--concurrency", strconv.Itoa(r.o.WorkerConcurrency), "--drain-timeout", "2s")
	}
	logPath := filepath.Join(r.o.Dir, "logs", id+".log")
	p, err := startProc(id, filepath.Join(r.o.BinDir, "watukuy-"+kind), args, logPath, nil)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	r.rep.Logs = append(r.rep.Logs, logPath)
	if kind == "worker" {
		r.workers[id] = p
	}
	go func() {
		<-p.done
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.workers, id)
		if p.expect.Load() || r.finished {
			return
		}
		r.respawns = append(r.respawns, fmt.Sprintf("%s exited on its own: %v (see %s)", id, p.err, logPath))
		if _, err := r.startLocked(kind); err != nil {
			r.respawns = append(r.respawns, fmt.Sprintf("start a %s after %s exited: %v", kind, id, err))
		}
	}()
	return p, nil
}

// mutate changes the API every sinkChangeEvery until stop: updates of sinkIdentities items.
func (r *sinkRun) mutate() {
	defer r.mutated.Done()
	rng := rand.New(rand.NewPCG(7, 20260301))
	t := time.NewTicker(sinkChangeEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.api.SetNow(time.Now().UTC())
		r.api.Put("ord-"+strconv.Itoa(rng.IntN(sinkIdentities)), map[string]any{"total": rng.IntN(1000)})
	}
}

func (r *sinkRun) stopChanges() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.mutated.Wait()
}

// killPhase watches the broker and kills the worker delivering each arrival's key, until
// o.Kills kills or o.KillFor.
func (r *sinkRun) killPhase(ctx context.Context) error {
	start := time.Now()
	defer func() { r.rep.KillPhase = time.Since(start) }()
	arrivals := make(chan sinkArrival, 4096)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		watched <- r.o.Target.Watch(wctx, func(a sinkArrival) {
			r.seenMu.Lock()
			fresh := !r.seen[a.ID]
			r.seen[a.ID] = true
			r.seenMu.Unlock()
			if !fresh {
				// A re-send (RabbitMQ's watch queue sees them): aimed at, kills would hit the
				// same unacked batch again and again, the key making no progress.
				return
			}
			select {
			case arrivals <- a:
			default: // the killer is behind: it would skip this one as stale
			}
		})
	}()
	defer func() {
		stopWatch()
		<-watched
		r.checks.Wait()
		r.rep.KillsBetweenConfirmAndAck = int(r.between.Load())
	}()

	deadline := time.NewTimer(r.o.KillFor)
	defer deadline.Stop()
	lastKill := map[watukuytype.Key]time.Time{}
	backSeen := map[watukuytype.Key]bool{} // the killed key's next arrival is measured
	for r.rep.Kills < r.o.Kills {
		var a sinkArrival
		select {
		case a = <-arrivals:
		case err := <-watched:
			watched <- err // for the deferred wait
			return fmt.Errorf("chaos: watching the %s broker stopped after %d kills: %w", r.rep.Sink, r.rep.Kills, err)
		case <-deadline.C:
			return fmt.Errorf("chaos: %d kills of %d within %s (%d arrivals seen at the broker)", r.rep.Kills, r.o.Kills, r.o.KillFor, r.seenCount())
		case <-ctx.Done():
			return ctx.Err()
		}
		if k, ok := lastKill[a.Key]; ok && !backSeen[a.Key] && a.At.Sub(k) > sinkKillGap {
			backSeen[a.Key] = true
			r.rep.Back = append(r.rep.Back, a.At.Sub(k))
		}
		if time.Since(a.At) > sinkStale || time.Since(lastKill[a.Key]) < sinkKillGap {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		snap, err := r.store.Inspect(ictx, a.Key)
		cancel()
		if err != nil {
			return fmt.Errorf("chaos: inspect %s: %w", a.Key, err)
		}
		r.mu.Lock()
		w := r.workers[snap.LeaseOwner]
		r.mu.Unlock()
		if w == nil {
			r.rep.Missed++ // its cycle ended, or its holder is dead already
			continue
		}
		w.kill()
		lastKill[a.Key] = time.Now()
		backSeen[a.Key] = false
		r.rep.Kills++
		r.mu.Lock()
		_, err = r.startLocked("worker")
		r.mu.Unlock()
		if err != nil {
			return err
		}
		r.checks.Add(1)
		go r.checkOutbox(ctx, a.Key)
	}
	return nil
}

// checkOutbox counts a kill between the broker's confirm and the outbox ack: the killed
// holder's key's outbox still holds an event the broker has.
func (r *sinkRun) checkOutbox(ctx context.Context, key watukuytype.Key) {
	defer r.checks.Done()
	time.Sleep(sinkAfterKill)
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	msgs, err := r.rdb.XRange(ictx, r.store.Key(key, "outbox"), "-", "+").Result()
	if err != nil {
		r.logf("%s sink: read the outbox of %s after a kill: %v", r.rep.Sink, key, err)
		return
	}
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	for _, m := range msgs {
		if id, _ := m.Values["id"].(string); r.seen[id] {
			r.between.Add(1)
			return
		}
	}
}

func (r *sinkRun) seenCount() int {
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	return len(r.seen)
}

// quiesce stops the API's changes and waits until every partition polled since, every outbox
// is empty, nothing is parked, held or waiting, and the replay logs stopped growing; then it
// stops the processes with SIGTERM.
func (r *sinkRun) quiesce(ctx context.Context) error {
	r.stopChanges()
	stoppedAt := time.Now()
	defer func() { r.rep.QuiescePhase = time.Since(stoppedAt) }()
	deadline := stoppedAt.Add(r.o.Quiesce)
	var quietSince time.Time
	lastLog := int64(-1)
	for {
		why, logLen, err := r.busy(ctx, stoppedAt)
		switch {
		case err != nil:
			why = err.Error()
		case why == "" && logLen == lastLog:
			if quietSince.IsZero() {
				quietSince = time.Now()
			}
			if time.Since(quietSince) >= sinkSettled {
				r.logf("%s sink: quiet %s after the API stopped (%d log entries)", r.rep.Sink, time.Since(stoppedAt).Round(time.Millisecond), logLen)
				r.shutdown()
				return nil
			}
		default:
			quietSince = time.Time{}
		}
		lastLog = logLen
		if time.Now().After(deadline) {
			diag, _ := r.diagnose(ctx)
			return fmt.Errorf("chaos: not quiet %s after the API stopped: %s\n%s", r.o.Quiesce, why, diag)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // the processes' progress has no signal to wait on
		}
	}
}

// busy says why the run is not quiet yet ("" when it is) and the replay logs' total length.
func (r *sinkRun) busy(ctx context.Context, since time.Time) (string, int64, error) {
	polled := map[string]bool{}
	for _, q := range r.srv.Requests() {
		if q.Wall.After(since) {
			polled[q.Query.Get("p")] = true
		}
	}
	for _, k := range r.keys {
		if !polled[k.Partition] {
			return fmt.Sprintf("partition %s has not polled since the API stopped", k.Partition), -1, nil
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	snaps, err := r.store.InspectMany(ictx, r.keys)
	if err != nil {
		return "", -1, err
	}
	for i, s := range snaps {
		if s.OutboxLen > 0 || s.Parked > 0 || s.Held > 0 || s.Waiting > 0 {
			return fmt.Sprintf("%s: outbox %d, parked %d, held %d, waiting %d", r.keys[i], s.OutboxLen, s.Parked, s.Held, s.Waiting), -1, nil
		}
	}
	var total int64
	for _, k := range r.keys {
		n, err := r.rdb.XLen(ictx, r.store.Key(k, "log")).Result()
		if err != nil {
			return "", -1, err
		}
		total += n
	}
	return "", total, nil
}

// diagnose describes every key's delivery state: why the run did not quiesce.
func (r *sinkRun) diagnose(ctx context.Context) (string, error) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	snaps, err := r.store.InspectMany(ictx, r.keys)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, s := range snaps {
		fmt.Fprintf(&b, "  %s: outbox %d (oldest %s old), parked %d, held %d, waiting %d, lease %q", r.keys[i], s.OutboxLen,
			s.OutboxOldestAge.Round(time.Millisecond), s.Parked, s.Held, s.Waiting, s.LeaseOwner)
		if v := s.State[statehash.Blocked]; v != "" {
			fmt.Fprintf(&b, ", blocked %s", v)
		}
		if v := s.State[statehash.LastError]; v != "" {
			fmt.Fprintf(&b, ", lastError %s", v)
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// shutdown sends SIGTERM to every live process and waits (20 s each, then SIGKILL): an exit
// with an error, or none in time, is a problem.
func (r *sinkRun) shutdown() {
	r.mu.Lock()
	r.finished = true
	live := slices.DeleteFunc(slices.Clone(r.procs), (*osProc).exited)
	r.mu.Unlock()
	var mu sync.Mutex
	stopAll(live, 20*time.Second, func(p *osProc, err error, killed bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case killed:
			r.rep.problem("%s did not exit within 20s of SIGTERM", p.name)
		case err != nil:
			r.rep.problem("%s exited with %v after SIGTERM", p.name, err)
		}
	})
}

// check reads the committed events and the broker's, and compares them.
func (r *sinkRun) check(ctx context.Context) error {
	r.mu.Lock()
	r.rep.Respawns = len(r.respawns)
	for _, s := range r.respawns {
		r.rep.problem("%s", s)
	}
	r.mu.Unlock()
	snaps, err := r.store.InspectMany(ctx, r.keys)
	if err != nil {
		return fmt.Errorf("chaos: inspect the keys after the shutdown: %w", err)
	}
	for _, s := range snaps {
		if s.OutboxLen > 0 || s.Parked > 0 {
			diag, _ := r.diagnose(ctx)
			r.rep.problem("an outbox holds events, or some are parked, after the shutdown:\n%s", diag)
			break
		}
	}
	committed, err := r.committed(ctx)
	if err != nil {
		return err
	}
	stored, err := r.o.Target.Stored(ctx)
	if err != nil {
		return fmt.Errorf("chaos: read what the %s broker holds: %w", r.rep.Sink, err)
	}
	checkSink(&r.rep, committed, stored, r.o.Target.ExactlyOnce())
	if r.rep.Kills < r.o.Kills {
		r.rep.problem("%d kills, want at least %d", r.rep.Kills, r.o.Kills)
	}
	if r.rep.KillsBetweenConfirmAndAck == 0 {
		r.rep.problem("no kill landed between the broker's confirm and the outbox ack (%d kills): the run did not exercise a re-send", r.rep.Kills)
	}
	return nil
}

// committed reads every key's replay log, all of it, in commit order.
func (r *sinkRun) committed(ctx context.Context) ([]committedEvent, error) {
	var out []committedEvent
	from, to := time.UnixMilli(0), time.Now().Add(time.Hour)
	for _, k := range r.keys {
		after := ""
		for {
			es, err := r.store.ReadLog(ctx, k, from, to, after, 1000)
			if err != nil {
				return nil, fmt.Errorf("chaos: read the replay log of %s: %w", k, err)
			}
			for _, e := range es {
				out = append(out, committedEvent{Key: k, ID: e.ID, OrderingKey: e.OrderingKey})
			}
			if len(es) < 1000 {
				break
			}
			after = es[len(es)-1].StreamID
		}
	}
	return out, nil
}

// checkSink compares the committed events with the broker's (in its order): nothing missing,
// nothing unknown, each stored under its own id, poller and partition; with exact, no
// duplicate and, per ordering key, the commit order.
func checkSink(rep *sinkReport, committed []committedEvent, stored []storedEvent, exact bool) {
	type pos struct {
		c   committedEvent
		seq int // position in its key's log
	}
	at := make(map[string]pos, len(committed))
	n := map[watukuytype.Key]int{}
	for _, c := range committed {
		if _, dup := at[c.ID]; dup {
			rep.LogRepeats++
			continue
		}
		at[c.ID] = pos{c, n[c.Key]}
		n[c.Key]++
	}
	rep.Committed = len(at)
	rep.Stored = len(stored)
	count := make(map[string]int, len(stored))
	var unknown, mislabelled, disorder []string
	type group struct {
		key watukuytype.Key
		ok  string
	}
	last := map[group]pos{}
	for _, s := range stored {
		count[s.ID]++
		p, ok := at[s.ID]
		if !ok {
			if count[s.ID] == 1 {
				unknown = append(unknown, s.ID)
			}
			continue
		}
		if s.MessageID != s.ID || s.Poller != p.c.Key.Poller || s.Partition != p.c.Key.Partition {
			mislabelled = append(mislabelled, fmt.Sprintf("%s stored as message %s of %s|%s, committed in %s", s.ID, s.MessageID, s.Poller, s.Partition, p.c.Key))
		}
		if !exact || count[s.ID] > 1 {
			continue
		}
		g := group{p.c.Key, p.c.OrderingKey}
		if prev, seen := last[g]; seen && prev.seq > p.seq {
			disorder = append(disorder, fmt.Sprintf("%s (log entry %d of %s) stored after %s (entry %d), ordering key %s",
				s.ID, p.seq, p.c.Key, prev.c.ID, prev.seq, p.c.OrderingKey))
		}
		last[g] = p
	}
	rep.Distinct = len(count)
	rep.Duplicates = rep.Stored - rep.Distinct
	var missing []string
	listed := map[string]bool{}
	for _, c := range committed {
		if count[c.ID] == 0 && !listed[c.ID] {
			listed[c.ID] = true
			missing = append(missing, c.ID)
		}
	}
	rep.Missing, rep.Unknown, rep.Mislabelled = len(missing), len(unknown), len(mislabelled)
	rep.OrderChecked = exact
	rep.OutOfOrder = len(disorder)
	if len(missing) > 0 {
		rep.problem("%d of %d committed events are not at the broker, e.g. %s", len(missing), rep.Committed, examples(missing))
	}
	if len(unknown) > 0 {
		rep.problem("%d event ids at the broker are in no replay log, e.g. %s", len(unknown), examples(unknown))
	}
	if len(mislabelled) > 0 {
		rep.problem("%d stored events carry another id, poller or partition than committed, e.g. %s", len(mislabelled), examples(mislabelled))
	}
	if exact && rep.Duplicates > 0 {
		var dups []string
		for id, c := range count {
			if c > 1 {
				dups = append(dups, fmt.Sprintf("%s ×%d", id, c))
			}
		}
		slices.Sort(dups)
		rep.problem("the broker holds %d duplicates (%d messages, %d distinct ids), e.g. %s", rep.Duplicates, rep.Stored, rep.Distinct, examples(dups))
	}
	if len(disorder) > 0 {
		rep.problem("%d stored events are out of commit order, e.g. %s", len(disorder), examples(disorder))
	}
	if rep.Committed == 0 {
		rep.problem("nothing was committed")
	}
}

// examples renders the first three of xs.
func examples(xs []string) string {
	if len(xs) > 3 {
		return strings.Join(xs[:3], "; ") + fmt.Sprintf("; … (%d more)", len(xs)-3)
	}
	return strings.Join(xs, "; ")
}

// scanLogs counts the warning and error lines of every process's log and keeps a few distinct
// messages: a sink's failures show there.
func (r *sinkRun) scanLogs() {
	seen := map[string]bool{}
	for _, path := range r.rep.Logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, `"level":"warn"`) && !strings.Contains(l, `"level":"error"`) {
				continue
			}
			r.rep.LogProblems++
			var f struct {
				Message string `json:"message"`
				Error   string `json:"error"`
			}
			_ = json.Unmarshal([]byte(l), &f)
			msg := f.Message
			if f.Error != "" {
				msg += ": " + f.Error
			}
			if len(r.rep.LogSamples) < 8 && !seen[msg] {
				seen[msg] = true
				r.rep.LogSamples = append(r.rep.LogSamples, filepath.Base(path)+": "+msg)
			}
		}
	}
}

// cleanup kills whatever still runs and closes what the run opened; it may run twice.
func (r *sinkRun) cleanup() {
	r.mu.Lock()
	r.finished = true
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	r.stopChanges()
	if r.srv != nil {
		r.srv.Close()
	}
	if r.rdb != nil {
		_ = r.rdb.Close()
	}
	if r.redis != nil {
		r.redis.kill()
		_ = r.redis.c.Close()
	}
}

// natsTarget is a JetStream stream the sink creates (create: true), named after the test;
// its subjects are "<stream>.<partition>.<type>".
type natsTarget struct{ url, stream string }

func (n *natsTarget) Kind() string      { return "nats" }
func (n *natsTarget) ExactlyOnce() bool { return true }

func (n *natsTarget) Delivery() string {
	return fmt.Sprintf(`nats: {url: %q, subject: "%s.${partition}.${type}", stream: %s, create: true}`, n.url, n.stream, n.stream)
}

func (n *natsTarget) Prepare(context.Context) error { return nil }

func (n *natsTarget) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(n.url, nats.Name("watukuy sink chaos"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", n.url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// Watch reads the stream with an ordered consumer from its start: what the stream stored,
// a re-send it dropped as a duplicate not again. The stream exists once the first delivery
// created it.
func (n *natsTarget) Watch(ctx context.Context, arrived func(sinkArrival)) error {
	nc, js, err := n.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	var st jetstream.Stream
	for {
		if st, err = js.Stream(ctx, n.stream); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("look up stream %s: %w", n.stream, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond): // the sink creates it at its first delivery
		}
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("ordered consumer of stream %s: %w", n.stream, err)
	}
	var bad atomic.Pointer[error]
	cc, err := cons.Consume(func(m jetstream.Msg) {
		e, err := parseEnvelope(m.Data())
		if err != nil {
			bad.CompareAndSwap(nil, &err)
			return
		}
		arrived(sinkArrival{Key: watukuytype.Key{Poller: e.Poller, Partition: e.Partition}, ID: e.ID, At: time.Now()})
	})
	if err != nil {
		return fmt.Errorf("consume stream %s: %w", n.stream, err)
	}
	<-ctx.Done()
	cc.Stop()
	if e := bad.Load(); e != nil {
		return *e
	}
	return nil
}

// Stored reads every message of the stream by sequence; the stream's own count must match.
func (n *natsTarget) Stored(ctx context.Context) ([]storedEvent, error) {
	nc, js, err := n.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	st, err := js.Stream(ctx, n.stream)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", n.stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", n.stream, err)
	}
	var out []storedEvent
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s message %d: %w", n.stream, seq, err)
		}
		e, err := parseEnvelope(m.Data)
		if err != nil {
			return nil, fmt.Errorf("stream %s message %d: %w", n.stream, seq, err)
		}
		out = append(out, storedEvent{MessageID: m.Header.Get(jetstream.MsgIDHeader), ID: e.ID, Poller: e.Poller, Partition: e.Partition, Identity: e.Identity})
	}
	if uint64(len(out)) != info.State.Msgs {
		return nil, fmt.Errorf("stream %s reports %d messages, %d read", n.stream, info.State.Msgs, len(out))
	}
	return out, nil
}

func (n *natsTarget) Remove(ctx context.Context) error {
	nc, js, err := n.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := js.DeleteStream(ctx, n.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s: %w", n.stream, err)
	}
	return nil
}

// amqpTarget is a durable topic exchange, declared by the run as an operator would (the sink
// never declares one), with two queues bound "#": store, read at the end, and watch, which
// aims the kills. Routing keys are "<partition>.<type>".
type amqpTarget struct{ url, name string }

func (a *amqpTarget) Kind() string      { return "amqp" }
func (a *amqpTarget) ExactlyOnce() bool { return false }
func (a *amqpTarget) store() string     { return a.name + "_store" }
func (a *amqpTarget) watch() string     { return a.name + "_watch" }

func (a *amqpTarget) Delivery() string {
	return fmt.Sprintf(`amqp: {url: %q, exchange: %s, routingKey: "${partition}.${type}"}`, a.url, a.name)
}

func (a *amqpTarget) channel() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(a.url)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("open a channel: %w", err)
	}
	return conn, ch, nil
}

func (a *amqpTarget) Prepare(context.Context) error {
	conn, ch, err := a.channel()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.ExchangeDeclare(a.name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", a.name, err)
	}
	for _, q := range []string{a.store(), a.watch()} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare queue %s: %w", q, err)
		}
		if err := ch.QueueBind(q, "#", a.name, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s: %w", q, a.name, err)
		}
	}
	return nil
}

// Watch consumes the watch queue: every message the exchange routed, re-sends included.
func (a *amqpTarget) Watch(ctx context.Context, arrived func(sinkArrival)) error {
	conn, ch, err := a.channel()
	if err != nil {
		return err
	}
	defer conn.Close()
	ds, err := ch.ConsumeWithContext(ctx, a.watch(), "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume queue %s: %w", a.watch(), err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-ds:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("queue %s: the consumer was closed", a.watch())
			}
			e, err := parseEnvelope(d.Body)
			if err != nil {
				return err
			}
			arrived(sinkArrival{Key: watukuytype.Key{Poller: e.Poller, Partition: e.Partition}, ID: e.ID, At: time.Now()})
		}
	}
}

// Stored takes every message of the store queue, as many as the broker counts in it.
func (a *amqpTarget) Stored(ctx context.Context) ([]storedEvent, error) {
	conn, ch, err := a.channel()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	q, err := ch.QueueDeclarePassive(a.store(), true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("queue %s: %w", a.store(), err)
	}
	if q.Messages == 0 {
		return nil, nil
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ds, err := ch.ConsumeWithContext(ctx, a.store(), "", true, true, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume queue %s: %w", a.store(), err)
	}
	out := make([]storedEvent, 0, q.Messages)
	for len(out) < q.Messages {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("queue %s: %d of %d messages read: %w", a.store(), len(out), q.Messages, ctx.Err())
		case d, ok := <-ds:
			if !ok {
				return nil, fmt.Errorf("queue %s: the consumer was closed after %d of %d messages", a.store(), len(out), q.Messages)
			}
			e, err := parseEnvelope(d.Body)
			if err != nil {
				return nil, err
			}
			out = append(out, storedEvent{MessageID: d.MessageId, ID: e.ID, Poller: e.Poller, Partition: e.Partition, Identity: e.Identity})
		}
	}
	return out, nil
}

func (a *amqpTarget) Remove(context.Context) error {
	conn, ch, err := a.channel()
	if err != nil {
		return err
	}
	defer conn.Close()
	var errs []error
	for _, q := range []string{a.store(), a.watch()} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
		}
	}
	if err := ch.ExchangeDelete(a.name, false, false); err != nil {
		errs = append(errs, fmt.Errorf("delete exchange %s: %w", a.name, err))
	}
	return errors.Join(errs...)
}

// pgTarget is the table <schema>.events the sink creates (create: true) in a schema named
// after the test.
type pgTarget struct{ url, schema string }

func (p *pgTarget) Kind() string                  { return "postgres" }
func (p *pgTarget) ExactlyOnce() bool             { return true }
func (p *pgTarget) Prepare(context.Context) error { return nil }
func (p *pgTarget) table() string                 { return pgx.Identifier{p.schema, "events"}.Sanitize() }

func (p *pgTarget) Delivery() string {
	return fmt.Sprintf(`postgres: {url: %q, table: %s.events, create: true}`, p.url, p.schema)
}

// Watch adds a trigger to the table, once the first delivery created it, that notifies every
// row inserted at its commit, and listens: polling (every 20 ms) saw most rows only after
// their cycle had acked and ended, and aimed 64 kills in 100 s. The rows inserted before the
// trigger are read once.
func (p *pgTarget) Watch(ctx context.Context, arrived func(sinkArrival)) error {
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	for {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", p.table()).Scan(&exists); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("look up %s: %w", p.table(), err)
		}
		if exists {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond): // the sink creates it at its first delivery
		}
	}
	fn := pgx.Identifier{p.schema, "watch"}.Sanitize()
	channel := pgx.Identifier{p.schema}.Sanitize()
	for _, q := range []string{
		"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify(" + quoteLiteral(p.schema) +
			", json_build_object('id', NEW.id, 'poller', NEW.poller, 'partition', NEW.partition)::text); RETURN NULL; END $$",
		"CREATE TRIGGER watch AFTER INSERT ON " + p.table() + " FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
		"LISTEN " + channel,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: %s: %w", p.table(), q, err)
		}
	}
	rows, err := conn.Query(ctx, "SELECT id, poller, partition FROM "+p.table())
	if err != nil {
		return fmt.Errorf("read %s: %w", p.table(), err)
	}
	var before []sinkArrival
	for rows.Next() {
		var a sinkArrival
		if err := rows.Scan(&a.ID, &a.Key.Poller, &a.Key.Partition); err != nil {
			rows.Close()
			return fmt.Errorf("read %s: %w", p.table(), err)
		}
		a.At = time.Now()
		before = append(before, a)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", p.table(), err)
	}
	for _, a := range before {
		arrived(a)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for a row of %s: %w", p.table(), err)
		}
		e, err := parseEnvelope([]byte(n.Payload))
		if err != nil {
			return err
		}
		arrived(sinkArrival{Key: watukuytype.Key{Poller: e.Poller, Partition: e.Partition}, ID: e.ID, At: time.Now()})
	}
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Stored reads every row in insertion order (inserted_at: deliveries of one ordering key are
// one after another, each its own transaction), and checks count(*) and count(DISTINCT id)
// against them.
func (p *pgTarget) Stored(ctx context.Context) ([]storedEvent, error) {
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var total, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM "+p.table()).Scan(&total, &distinct); err != nil {
		return nil, fmt.Errorf("count %s: %w", p.table(), err)
	}
	rows, err := conn.Query(ctx, "SELECT id, envelope->>'id', envelope->>'poller', envelope->>'partition', envelope->>'identity' FROM "+
		p.table()+" ORDER BY inserted_at, id")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.table(), err)
	}
	var out []storedEvent
	ids := map[string]bool{}
	for rows.Next() {
		var s storedEvent
		if err := rows.Scan(&s.MessageID, &s.ID, &s.Poller, &s.Partition, &s.Identity); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read %s: %w", p.table(), err)
		}
		ids[s.MessageID] = true
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", p.table(), err)
	}
	if total != len(out) || distinct != len(ids) {
		return nil, fmt.Errorf("%s: count(*) %d and count(DISTINCT id) %d, but %d rows with %d ids read", p.table(), total, distinct, len(out), len(ids))
	}
	return out, nil
}

func (p *pgTarget) Remove(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{p.schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", p.schema, err)
	}
	return nil
}
