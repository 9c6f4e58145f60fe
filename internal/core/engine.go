package core

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/watukuy/watukuy/watukuytype"
)

// Options configures an Engine.
type Options struct {
	// Store is the database (internal/redisstore in production).
	Store Store
	// InstanceID names this process in leases and consumer groups; required.
	InstanceID string
	// Logger receives structured logs; the zero value logs nothing.
	Logger zerolog.Logger
	// TickConcurrency is how many cycles Tick runs at once; default 4.
	TickConcurrency int
	// ClaimTimeout, when set, is how long Tick's claims hold a key before its cycle's lease
	// keeper holds it on; default (0) the key's lease TTL plus ClaimGrace, so a key whose
	// cycle died is claimed again as soon as its lease lapses.
	ClaimTimeout time.Duration
	// Rand returns uniform numbers in [0,1) for jitter; default math/rand/v2.
	Rand func() float64
	// Hooks observe cycles, requests, deliveries and failures.
	Hooks watukuytype.Hooks
	// Clock is the local clock leases are kept by (validity counted from when a confirming
	// call was sent); default time.Now. Tests that move the store's server clock pass the
	// same fake clock here, so a simulated pause ages the lease on both sides.
	Clock func() time.Time
	// Wait sits out a pause between two pages (the API's rate limit); default a timer. Tests
	// hold an instance there, frozen at a known point of its cycle.
	Wait func(ctx context.Context, d time.Duration) error
	// Budgets are the request budgets every worker shares, which pollers name in
	// Poller.Budget.
	Budgets []watukuytype.Budget
	// TracerProvider makes a span tree of every cycle (trace.go); nil (or the API's no-op
	// provider): no spans, and no attribute is built.
	TracerProvider trace.TracerProvider
}

// Engine runs the cycles of registered pollers.
type Engine struct {
	store   Store
	owner   string
	log     zerolog.Logger
	rand    func() float64
	tickN   int
	claimTO time.Duration
	hooks   watukuytype.Hooks
	clock   func() time.Time
	wait    func(ctx context.Context, d time.Duration) error
	tracer  trace.Tracer // nil: tracing is off

	mu         sync.Mutex
	pollers    map[string]*watukuytype.Poller
	budgets    map[string]watukuytype.Budget // by name, with defaults
	registered bool                          // keys written to the registry and due set
	regGen     uint64                        // bumped by every registration change; ensureRegistered marks only the one it wrote
	repairedAt time.Time                     // when Tick last ran the repair sweep (local clock)

	root     context.Context
	stopRoot context.CancelFunc
	// yield asks running cycles to stop at their next step (Stop with drain).
	yield     context.Context
	stopYield context.CancelFunc
	stopping  bool
	inflight  sync.WaitGroup
}

// NewEngine checks opts and returns an engine.
func NewEngine(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, &watukuytype.ConfigError{Field: "store", Msg: "is required"}
	}
	if opts.InstanceID == "" {
		return nil, &watukuytype.ConfigError{Field: "instanceID", Msg: "is required"}
	}
	e := &Engine{store: opts.Store, owner: opts.InstanceID, log: opts.Logger, rand: opts.Rand,
		tickN: opts.TickConcurrency, claimTO: opts.ClaimTimeout, hooks: opts.Hooks, clock: opts.Clock, wait: opts.Wait, pollers: map[string]*watukuytype.Poller{},
		tracer: tracerOf(opts.TracerProvider)}
	if e.clock == nil {
		e.clock = time.Now
	}
	var err error
	if e.budgets, err = budgetsByName(opts.Budgets); err != nil {
		return nil, err
	}
	if e.rand == nil {
		e.rand = rand.Float64
	}
	if e.tickN <= 0 {
		e.tickN = 4
	}
	e.root, e.stopRoot = context.WithCancel(context.Background())
	e.yield, e.stopYield = context.WithCancel(context.Background())
	return e, nil
}

// now reads the engine's local clock.
func (e *Engine) now() time.Time { return e.clock() }

// Register adds a poller; an invalid definition is a *ConfigError naming the field.
func (e *Engine) Register(p watukuytype.Poller) error {
	p, err := WithDefaults(p)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := checkBudgetName(e.budgets, &p); err != nil {
		return err
	}
	if _, dup := e.pollers[p.Name]; dup {
		return &watukuytype.ConfigError{Poller: p.Name, Field: "name", Msg: "is registered twice"}
	}
	e.pollers[p.Name] = &p
	e.registered = false
	e.regGen++
	return nil
}

// Replace swaps the shared budgets and the whole set of registered pollers for bs and ps at
// once (a config reload). Everything is checked first: an invalid definition, a name given
// twice, or a poller naming a budget bs lacks is a *ConfigError and changes nothing. A cycle
// already running keeps the definition it started with; the key's next cycle uses the new
// one. The keys of new pollers and partitions are written to the registry and due set at the
// next Setup (or Tick, InspectAll); the keys of pollers left out stay in the registry, and
// this engine no longer runs or claims them.
func (e *Engine) Replace(bs []watukuytype.Budget, ps ...watukuytype.Poller) error {
	budgets, err := budgetsByName(bs)
	if err != nil {
		return err
	}
	next := make(map[string]*watukuytype.Poller, len(ps))
	for _, p := range ps {
		p, err := WithDefaults(p)
		if err != nil {
			return err
		}
		if _, dup := next[p.Name]; dup {
			return &watukuytype.ConfigError{Poller: p.Name, Field: "name", Msg: "is registered twice"}
		}
		if err := checkBudgetName(budgets, &p); err != nil {
			return err
		}
		next[p.Name] = &p
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pollers, e.budgets = next, budgets
	e.registered = false
	e.regGen++
	return nil
}

// poller returns the registered poller of key for a cycle. Partitions added at run time
// (partitions add) are not in the definition: any well-formed partition name is accepted,
// since only registered keys ever become due.
func (e *Engine) poller(key watukuytype.Key) (*watukuytype.Poller, error) {
	e.mu.Lock()
	p, ok := e.pollers[key.Poller]
	e.mu.Unlock()
	if !ok {
		return nil, &watukuytype.NotFoundError{Poller: key.Poller, Hint: "this engine has no such poller registered"}
	}
	if key.Partition != "" && CheckPartition(key.Partition) != nil {
		return nil, &watukuytype.ConfigError{Poller: key.Poller, Field: "partitions", Msg: fmt.Sprintf("malformed partition %q", key.Partition)}
	}
	return p, nil
}

// Setup checks the data layout, then writes every registered key to the registry and, for new
// keys, the due set, so the schedulers find them. Tick does it by itself; workers call it at
// start. A layout newer than this build knows is a *LayoutError.
func (e *Engine) Setup(ctx context.Context) error { return e.ensureRegistered(ctx) }

// ensureRegistered writes every poller's description and registers its config keys once per
// registration change.
func (e *Engine) ensureRegistered(ctx context.Context) error {
	e.mu.Lock()
	if e.registered {
		e.mu.Unlock()
		return nil
	}
	e.mu.Unlock()
	if err := e.checkLayout(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	gen := e.regGen
	pollers := map[string][]byte{}
	var keys []watukuytype.Key
	for _, p := range e.pollers {
		pollers[p.Name], _ = json.Marshal(e.info(p))
		keys = append(keys, pollerKeys(p)...)
	}
	e.mu.Unlock()
	if err := e.store.Register(ctx, pollers, keys); err != nil {
		return fmt.Errorf("watukuy: register keys: %w", err)
	}
	e.mu.Lock()
	e.registered = gen == e.regGen // a Replace while writing: the next call writes its pollers
	e.mu.Unlock()
	return nil
}

func addCycle(r *watukuytype.TickReport, c watukuytype.CycleReport) {
	switch c.Outcome {
	case watukuytype.Ran:
		r.Ran++
	case watukuytype.SkippedNotDue:
		r.SkippedNotDue++
	case watukuytype.SkippedLeased:
		r.SkippedLeased++
	case watukuytype.SkippedPaused:
		r.SkippedPaused++
	}
	r.Events += c.Events
	r.Delivered += c.Delivered
	r.Items += c.Items
	r.Parked += c.Parked
	r.Invalid += c.Invalid
	r.DeleteCandidates += c.DeleteCandidates
	if c.Err != nil {
		r.Errors = append(r.Errors, c.Err)
	}
}

// Tick claims due keys with the scheduler's claim script and runs their cycles, then returns
// what it did (cron and serverless mode). maxDuration bounds the whole run: no key is claimed
// after it, and cycles still running then stop at their next step (a request in flight is
// given up), commit what they have and release their leases with the keys due at once. Tick
// mode has no scheduler process, so Tick also runs the due-set repair sweep, at most once a
// minute.
func (e *Engine) Tick(ctx context.Context, maxDuration time.Duration) (watukuytype.TickReport, error) {
	var rep watukuytype.TickReport
	deadline := time.Now().Add(maxDuration)
	yield, stopYield := context.WithDeadline(context.Background(), deadline)
	defer stopYield()
	ctx = context.WithValue(ctx, yieldKey{}, yield)
	if err := e.ensureRegistered(ctx); err != nil {
		return rep, err
	}
	rep.Repaired = len(e.repairIfStale(ctx))
	var mu sync.Mutex
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !e.enter() {
			break
		}
		keys, err := e.store.ClaimDue(ctx, e.tickN, e.claimTO, e.pollerNames())
		e.inflight.Done()
		if err != nil {
			return rep, fmt.Errorf("watukuy: claim due keys: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := e.RunCycle(ctx, k)
				mu.Lock()
				addCycle(&rep, c)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	return rep, nil
}

// yieldKey carries a context whose end asks the cycles run with it to yield (Tick's deadline).
type yieldKey struct{}

// yieldOf is the yield context ctx carries, or one that never ends.
func yieldOf(ctx context.Context) context.Context {
	if y, ok := ctx.Value(yieldKey{}).(context.Context); ok {
		return y
	}
	return context.Background()
}

// tickRepairEvery is how often Tick runs the repair sweep at most: tick mode has no
// scheduler process to run it.
const tickRepairEvery = time.Minute

// repairIfStale runs the repair sweep unless Tick ran it less than tickRepairEvery ago. A
// failed sweep is logged and the tick goes on: its claims do not depend on it.
func (e *Engine) repairIfStale(ctx context.Context) []watukuytype.Key {
	e.mu.Lock()
	stale := e.repairedAt.IsZero() || time.Since(e.repairedAt) >= tickRepairEvery
	if stale {
		e.repairedAt = time.Now()
	}
	e.mu.Unlock()
	if !stale {
		return nil
	}
	keys, err := e.RepairDue(ctx)
	if err != nil {
		e.log.Error().Err(err).Msg("due-set repair sweep failed")
	}
	return keys
}

// RepairDue gives every registered key that is not deleted and lacks a due entry one again
// (at its state's next due time, or now), logs each at warn level and reports it to
// Hooks.OnDueRepaired. A key without a due entry would never be claimed again, whatever its
// state says, so schedulers run this periodically and Tick at most once a minute. A database
// of another layout is refused with a *LayoutError.
func (e *Engine) RepairDue(ctx context.Context) ([]watukuytype.Key, error) {
	l, err := e.store.Layout(ctx)
	if err != nil {
		return nil, fmt.Errorf("watukuy: repair due entries: read the data layout: %w", err)
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	keys, err := e.store.RepairDue(ctx)
	for _, k := range keys {
		e.log.Warn().Str("poller", k.Poller).Str("partition", k.Partition).
			Msg("a registered key had no due entry (it would never run again): due again")
		if h := e.hooks.OnDueRepaired; h != nil {
			h(k)
		}
	}
	if err != nil {
		return keys, fmt.Errorf("watukuy: repair due entries: %w", err)
	}
	return keys, nil
}

// pollerNames lists the registered pollers, the only ones whose keys this engine claims.
func (e *Engine) pollerNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.pollers))
	for n := range e.pollers {
		names = append(names, n)
	}
	return names
}

// Stopped reports whether Stop was called: the engine runs no cycle or operation since.
func (e *Engine) Stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}

// enter counts an in-flight call unless the engine is stopping.
func (e *Engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return false
	}
	e.inflight.Add(1)
	return true
}

// Stop refuses new cycles, then waits for running ones. With drain each stops at its next
// step: a request in flight is given up, a delivery in flight finishes, what was committed
// stays, and the cycle ends normally, releasing its lease with the key due at once, so
// another instance takes it over in seconds; those still running after timeout are
// cancelled. Without drain they are cancelled at once: their leases lapse by themselves.
// Cancelled deliveries are not acked and come back later (G1).
func (e *Engine) Stop(drain bool, timeout time.Duration) error {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.stopYield()
	if !drain {
		e.stopRoot()
	}
	done := make(chan struct{})
	go func() { e.inflight.Wait(); close(done) }()
	select {
	case <-done:
		e.stopRoot()
		return nil
	case <-time.After(timeout):
		e.stopRoot()
		return fmt.Errorf("watukuy: stop: cycles still running after %v were cancelled; their unacked events stay in the outbox", timeout)
	}
}
