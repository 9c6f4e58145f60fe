// Package watukuy turns third-party HTTP APIs without webhooks into reliable change streams.
//
// An Engine polls each registered Poller on an adaptive schedule, detects created, updated
// and deleted items, commits the new cursor together with the change events in one atomic,
// fenced Redis write, and delivers the events to the poller's Handler at least once, with
// deterministic ids and in order per ordering key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	eng, _ := watukuy.New(watukuy.Options{Redis: rdb})
//	_ = eng.Register(watukuytype.Poller{Name: "orders", Fetch: fetchOrders, Handler: onEvent})
//	report, _ := eng.Tick(ctx, 50*time.Second)
//
// Tick runs in one process; package pool runs the same pollers as a scheduler and any number
// of workers. The engine's vocabulary (Poller, Event, KeyInfo, the errors, …) lives in
// package watukuytype, and package httppoll builds a Poller's Fetch for an HTTP API.
// Design: docs/design.md in the repository.
package watukuy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/watukuytype"
)

// Options configures an Engine.
type Options struct {
	// Redis is a go-redis client: *redis.Client or *redis.ClusterClient. Required.
	Redis redis.UniversalClient
	// InstanceID names this process in leases; default host-pid-random.
	InstanceID string
	// Logger receives structured logs; the zero value is silent.
	Logger zerolog.Logger
	// Prefix starts every Redis key; default "wk".
	Prefix string
	// TickConcurrency is how many cycles Tick runs at once; default 4.
	TickConcurrency int
	// ClaimTimeout, when set, is how long Tick's claims hold a key before its cycle's lease
	// keeper holds it on; default (0) the key's lease TTL plus 2s, so a key whose cycle died
	// is claimed again as soon as its lease lapses.
	ClaimTimeout time.Duration
	// WaitReplicas, when > 0, makes every commit and outbox read wait (Redis WAIT, up to
	// WaitTimeout, default 1s) until that many replicas have it before its events are
	// delivered. With replicas and failover (Sentinel, Cluster) set it to 1 or more: Redis
	// replicates asynchronously, and a failover that loses a commit whose events were already
	// delivered leaves the consumer ahead of watukuy's state (a later delete can be missed).
	// A cycle whose commit the replicas do not confirm in time delivers nothing and ends with
	// lastError REPLICATION; the events wait in the outbox.
	WaitReplicas int
	WaitTimeout  time.Duration
	// Hooks observe cycles, requests, deliveries, parking, circuits, throttles and lost
	// leases (the metrics use them).
	Hooks watukuytype.Hooks
	// Budgets are request budgets every worker shares (token buckets in Redis, on its
	// clock), which pollers name in Poller.Budget: each request takes a token first, the
	// live lane before reconcile and backfill, and a 429 on any key pauses the whole budget.
	Budgets []watukuytype.Budget
	// TracerProvider, when set, traces every cycle with OpenTelemetry: a root span
	// watukuy.cycle with children begin, fetch (and the HTTP client span of each request of
	// the HTTP helpers), commit, drain (with a handler span per attempt) and end; docs/deployment.md
	// "Traces (OpenTelemetry)" lists the attributes. A handler's context carries its
	// attempt's span, so the webhook sink sends it as traceparent. nil (the default): no
	// spans and no cost. Only the OpenTelemetry API is linked; the program brings the SDK.
	TracerProvider trace.TracerProvider
}

// Engine runs pollers against Redis.
type Engine struct {
	core  *core.Engine
	store *redisstore.Store
	rdb   redis.UniversalClient
}

// New returns an engine on opts.Redis.
func New(opts Options) (*Engine, error) { return newEngine(opts, seams{}) }

// seams are what this package's tests replace: leases and throttle windows run on the Redis
// server's clock (TIME), never on one of the caller's, except under a test's clock (which the
// local clock leases are kept by follows too); wrapStore injects faults into the store, wait
// freezes an instance between pages. watukuytest moves miniredis' own clock instead.
type seams struct {
	clock     func() time.Time
	wrapStore func(core.Store) core.Store
	wait      func(ctx context.Context, d time.Duration) error
	rand      func() float64 // the jitter's random numbers
}

// newEngine is New with the tests' seams.
func newEngine(opts Options, sm seams) (*Engine, error) {
	if opts.Redis == nil {
		return nil, &watukuytype.ConfigError{Field: "redis", Msg: "a go-redis client is required"}
	}
	if opts.InstanceID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		opts.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	st, err := redisstore.New(opts.Redis, redisstore.Options{Prefix: opts.Prefix, Clock: sm.clock, WaitReplicas: opts.WaitReplicas, WaitTimeout: opts.WaitTimeout})
	if err != nil {
		return nil, err
	}
	var s core.Store = st
	if sm.wrapStore != nil {
		s = sm.wrapStore(s)
	}
	ce, err := core.NewEngine(core.Options{Store: s, InstanceID: opts.InstanceID, Logger: opts.Logger,
		TickConcurrency: opts.TickConcurrency, ClaimTimeout: opts.ClaimTimeout, Hooks: opts.Hooks, Clock: sm.clock, Wait: sm.wait, Rand: sm.rand,
		Budgets: opts.Budgets, TracerProvider: opts.TracerProvider})
	if err != nil {
		return nil, err
	}
	return &Engine{core: ce, store: st, rdb: opts.Redis}, nil
}

// Redis returns the go-redis client the engine runs on (Options.Redis), for what shares it:
// the distributed pool runs asynq, its health checks and its monitoring on it.
func (e *Engine) Redis() redis.UniversalClient { return e.rdb }

// Prefix is the prefix of the engine's Redis keys (Options.Prefix, default "wk"): it names
// the deployment, e.g. in the asynq task IDs of its pool, and in a Redis ACL's key patterns.
func (e *Engine) Prefix() string { return e.store.Prefix() }

// Register adds a poller. An invalid definition is a *ConfigError naming poller and field.
func (e *Engine) Register(p watukuytype.Poller) error { return e.core.Register(p) }

// Replace swaps the shared budgets and every registered poller for budgets and pollers at once
// (a config reload): everything is checked first, and an invalid definition, a name given
// twice or a budget a poller names and budgets lacks is a *ConfigError that changes nothing.
// Running cycles finish with the definition they started with; each key's next cycle uses the
// new one. New pollers' keys are written to the registry and due set at the next Setup or
// Tick; keys of pollers left out stay registered (inspect shows them) and this engine no
// longer runs or claims them.
func (e *Engine) Replace(budgets []watukuytype.Budget, pollers ...watukuytype.Poller) error {
	return e.core.Replace(budgets, pollers...)
}

// Tick claims due keys and runs their cycles for at most maxDuration, then returns; at most
// once a minute it also runs the due-set repair sweep (RepairDue).
func (e *Engine) Tick(ctx context.Context, maxDuration time.Duration) (watukuytype.TickReport, error) {
	return e.core.Tick(ctx, maxDuration)
}

// Setup writes every registered key to the registry and the due set, so that schedulers
// find them; Tick does it by itself, a worker calls it once at start.
func (e *Engine) Setup(ctx context.Context) error { return e.core.Setup(ctx) }

// RunCycle runs one cycle of a key now; most programs use Tick.
func (e *Engine) RunCycle(ctx context.Context, key watukuytype.Key) watukuytype.CycleReport {
	return e.core.RunCycle(ctx, key)
}

// RunCycles runs the cycles of keys one after another (the worker's task handler): as
// RunCycle each, with each key's Begin sent along with the previous key's End, a round trip
// less per key. It stops when ctx ends; keys it did not run come back when their claims lapse.
func (e *Engine) RunCycles(ctx context.Context, keys []watukuytype.Key) []watukuytype.CycleReport {
	return e.core.RunCycles(ctx, keys)
}

// Trigger makes a key due now; an open circuit gets its probe.
func (e *Engine) Trigger(ctx context.Context, key watukuytype.Key) error {
	return e.core.Trigger(ctx, key)
}

// Pause stops a key's requests and deliveries until Resume.
func (e *Engine) Pause(ctx context.Context, key watukuytype.Key) error {
	return e.core.Pause(ctx, key)
}

// Resume lifts a pause; the key is due at once.
func (e *Engine) Resume(ctx context.Context, key watukuytype.Key) error {
	return e.core.Resume(ctx, key)
}

// RepairDue gives every registered key that is not deleted and lacks a due entry (it would
// never run again) one, and returns those keys; each is logged at warn level and reported to
// Hooks.OnDueRepaired. Schedulers run it every minute and Tick at most once a minute.
func (e *Engine) RepairDue(ctx context.Context) ([]watukuytype.Key, error) {
	return e.core.RepairDue(ctx)
}

// Inspect reports a key's status, cursor, lease, schedule and counters.
func (e *Engine) Inspect(ctx context.Context, key watukuytype.Key) (watukuytype.KeyInfo, error) {
	return e.core.Inspect(ctx, key)
}

// Stop refuses new cycles and waits for running ones. With drain each stops at its next step
// (a request in flight is given up, a delivery in flight finishes) and releases its lease
// with the key due at once, so another instance takes it over in seconds; those still
// running after timeout are cancelled. Without drain they are cancelled at once and their
// leases lapse by themselves. Undelivered events stay in the outbox (G1).
func (e *Engine) Stop(drain bool, timeout time.Duration) error { return e.core.Stop(drain, timeout) }

// Stopped reports whether Stop was called. A stopped engine runs no cycle, and the operations
// that act (Pause, Trigger, Backfill, partitions add, a parked retry, ...) return
// watukuytype.ErrEngineStopped; reads (Inspect, ...) still answer.
func (e *Engine) Stopped() bool { return e.core.Stopped() }

// Parked gives access to a key's parked rows.
func (e *Engine) Parked() Parked { return Parked{e: e.core} }

// Parked lists, retries and discards parked (poison and invalid) rows.
type Parked struct{ e *core.Engine }

// List returns every parked row of a key in id order (poison events before invalid items);
// kind is "poison", "invalid" or "" for all.
func (p Parked) List(ctx context.Context, key watukuytype.Key, kind string) ([]watukuytype.ParkedInfo, error) {
	return p.e.ListParked(ctx, key, kind)
}

// Counts counts the parked rows of each key, in one round trip.
func (p Parked) Counts(ctx context.Context, keys []watukuytype.Key) ([]int64, error) {
	return p.e.ParkedCounts(ctx, keys)
}

// Page returns up to limit (at most 1,000) of a key's parked rows of kind in id order, after
// the id after ("" from the first), and the id the next page starts after ("" at the end).
func (p Parked) Page(ctx context.Context, key watukuytype.Key, kind, after string, limit int) ([]watukuytype.ParkedInfo, string, error) {
	return p.e.ListParkedPage(ctx, key, kind, after, limit)
}

// Retry returns parked rows to work, keeping the original order of held events.
func (p Parked) Retry(ctx context.Context, key watukuytype.Key, ids ...string) (int, error) {
	return p.e.RetryParked(ctx, key, ids)
}

// Discard drops parked rows; events their ordering keys held go back to delivery.
func (p Parked) Discard(ctx context.Context, key watukuytype.Key, ids ...string) (int, error) {
	return p.e.DiscardParked(ctx, key, ids)
}

// InspectAll reports every known key of poller ("" for all pollers), reading the registry a
// page at a time; at many keys, InspectPage reads one page.
func (e *Engine) InspectAll(ctx context.Context, poller string) ([]watukuytype.KeyInfo, error) {
	return e.core.InspectAll(ctx, poller)
}

// InspectPage reports up to limit (at most 1,000) known keys of poller ("" for all pollers) in
// poller then partition order, after the cursor after ("" from the first), and returns the
// cursor of the next page ("" at the end). Its cost does not depend on the number of keys.
func (e *Engine) InspectPage(ctx context.Context, poller, after string, limit int) ([]watukuytype.KeyInfo, string, error) {
	return e.core.InspectPage(ctx, poller, after, limit)
}

// Budgets shows every bucket of the known pollers' budgets: its keys, the tokens it holds
// now and any pause in force.
func (e *Engine) Budgets(ctx context.Context) ([]watukuytype.BudgetInfo, error) {
	return e.core.Budgets(ctx)
}

// PollerKeys counts each known poller's scheduled keys (registered and not deleted), by name.
func (e *Engine) PollerKeys(ctx context.Context) (map[string]int64, error) {
	return e.core.PollerKeys(ctx)
}

// KeysPage lists up to limit (at most 1,000) known keys of poller ("" for all) after the
// cursor after ("" from the first), sorted, and the cursor of the next page ("" at the end).
func (e *Engine) KeysPage(ctx context.Context, poller, after string, limit int) ([]watukuytype.Key, string, error) {
	return e.core.KeysPage(ctx, poller, after, limit)
}

// Each calls fn with each key an operation acts on, in partition order: the named partitions
// of poller, or with none named (nil) every partition of poller that is not deleted, read from
// the registry a page at a time. It returns how many keys fn did. It stops at fn's first
// error; when keys before it were done, the error is a *StoppedError that says how many. The
// operator commands and the admin API act on keys through it.
func (e *Engine) Each(ctx context.Context, poller string, partitions []string, fn func(watukuytype.Key) error) (int, error) {
	done := 0
	do := func(k watukuytype.Key) error {
		if err := fn(k); err != nil {
			if done > 0 {
				return &watukuytype.StoppedError{Key: k, Done: done, Err: err}
			}
			return err
		}
		done++
		return nil
	}
	if partitions != nil {
		for _, p := range partitions {
			if err := do(watukuytype.Key{Poller: poller, Partition: p}); err != nil {
				return done, err
			}
		}
		return done, nil
	}
	return done, e.core.EachActiveKey(ctx, poller, do)
}

// Backfill runs the live lane's logic again from an older cursor, in a lane of its own with
// lower priority than live; see BackfillRequest. snapshotDiff pollers refuse (*ConfigError).
func (e *Engine) Backfill(ctx context.Context, key watukuytype.Key, req watukuytype.BackfillRequest) (watukuytype.BackfillProgress, error) {
	return e.core.Backfill(ctx, key, req)
}

// Replay copies logged events committed in [from, to] (to zero: up to now) back into the
// outbox with their original ids and lane "replay"; it returns how many. Without
// log.retention it fails with *ReplayUnavailableError.
func (e *Engine) Replay(ctx context.Context, key watukuytype.Key, from, to time.Time) (int, error) {
	return e.core.Replay(ctx, key, from, to)
}

// ResetCursor rewinds the live lane to cursor ("" for the beginning); clearSnapshot makes
// every item count as new again: re-emitted as created, each with the same id as when its
// content was first emitted (G2), so a consumer that dedupes by id drops them.
func (e *Engine) ResetCursor(ctx context.Context, key watukuytype.Key, cursor string, clearSnapshot bool) error {
	return e.core.ResetCursor(ctx, key, cursor, clearSnapshot)
}

// Partitions adds, removes and deletes partitions at run time.
func (e *Engine) Partitions() Partitions { return Partitions{e: e.core} }

// Partitions manages a poller's partitions.
type Partitions struct{ e *core.Engine }

// Add registers a new partition; workers running the poller pick it up at once.
func (p Partitions) Add(ctx context.Context, key watukuytype.Key) error {
	return p.e.AddPartition(ctx, key)
}

// Remove pauses a partition and keeps its state; Resume brings it back from its last cursor.
func (p Partitions) Remove(ctx context.Context, key watukuytype.Key) error {
	return p.e.RemovePartition(ctx, key)
}

// Delete removes a partition with its state and snapshot.
func (p Partitions) Delete(ctx context.Context, key watukuytype.Key) error {
	return p.e.DeletePartition(ctx, key)
}

// Layout reads the Redis data layout.
func (e *Engine) Layout(ctx context.Context) (watukuytype.Layout, error) { return e.core.Layout(ctx) }

// Migrate upgrades the Redis data layout in place and records it; it is idempotent.
func (e *Engine) Migrate(ctx context.Context) (watukuytype.Migration, error) {
	return e.core.Migrate(ctx)
}

// Probe fetches the first page of p for partition and reports what the engine would see:
// identities, versions, fingerprints, invalid items and the next cursor. It writes nothing,
// and its requests take no budget tokens (Engine.Probe takes them).
func Probe(ctx context.Context, p watukuytype.Poller, partition string) (watukuytype.ProbeResult, error) {
	return core.Probe(ctx, p, partition)
}

// Probe is the package's Probe whose requests take their tokens from the budget p names,
// shared with the workers, waiting for each: a probe does not push a shared API over its
// limit. A poller without a budget is probed as the package's Probe does.
func (e *Engine) Probe(ctx context.Context, p watukuytype.Poller, partition string) (watukuytype.ProbeResult, error) {
	return e.core.Probe(ctx, p, partition)
}

// ProbeListing is the package's ProbeListing whose requests take their tokens from the
// budget p names, as Engine.Probe.
func (e *Engine) ProbeListing(ctx context.Context, p watukuytype.Poller, partition string, maxPages int) ([]watukuytype.ListingEstimate, error) {
	return e.core.ProbeListing(ctx, p, partition, maxPages)
}

// ProbeListing reads p's complete listings (a SnapshotDiff live lane, a Reconcile lane) for
// partition, up to maxPages pages each, and estimates how many pages and cycles each takes. It
// writes nothing; a poller with no listing gives nil.
func ProbeListing(ctx context.Context, p watukuytype.Poller, partition string, maxPages int) ([]watukuytype.ListingEstimate, error) {
	return core.ProbeListing(ctx, p, partition, maxPages)
}
