package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

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

	mu         sync.Mutex
	pollers    map[string]*watukuytype.Poller
	registered bool      // keys written to the registry and due set
	regGen     uint64    // bumped by every registration change; ensureRegistered marks only the one it wrote
	repairedAt time.Time // when Tick last ran the repair sweep (local clock)

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
		tickN: opts.TickConcurrency, claimTO: opts.ClaimTimeout, hooks: opts.Hooks, clock: opts.Clock, wait: opts.Wait, pollers: map[string]*watukuytype.Poller{}}
	if e.clock == nil {
		e.clock = time.Now
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
	p, err := withDefaults(p)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.pollers[p.Name]; dup {
		return &watukuytype.ConfigError{Poller: p.Name, Field: "name", Msg: "is registered twice"}
	}
	e.pollers[p.Name] = &p
	e.registered = false
	e.regGen++
	return nil
}

// Replace swaps the whole set of registered pollers for ps at once (a config reload). Every
// definition is checked first: an invalid one, or a name given twice, is a *ConfigError and
// changes nothing. A cycle already running keeps the definition it started with; the key's
// next cycle uses the new one. The keys of new pollers and partitions are written to the
// registry and due set at the next Setup (or Tick, InspectAll); the keys of pollers left out
// stay in the registry, and this engine no longer runs or claims them.
func (e *Engine) Replace(ps ...watukuytype.Poller) error {
	next := make(map[string]*watukuytype.Poller, len(ps))
	for _, p := range ps {
		p, err := withDefaults(p)
		if err != nil {
			return err
		}
		if _, dup := next[p.Name]; dup {
			return &watukuytype.ConfigError{Poller: p.Name, Field: "name", Msg: "is registered twice"}
		}
		next[p.Name] = &p
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pollers = next
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
	if key.Partition != "" && !partitionRE.MatchString(key.Partition) {
		return nil, &watukuytype.ConfigError{Poller: key.Poller, Field: "partitions", Msg: fmt.Sprintf("malformed partition %q", key.Partition)}
	}
	return p, nil
}

// Setup checks the data layout, then writes every registered key to the registry and, for new
// keys, the due set, so the schedulers find them. Tick does it by itself; workers call it at
// start. A layout newer than this build knows is a *LayoutError.
func (e *Engine) Setup(ctx context.Context) error { return e.ensureRegistered(ctx) }

// ensureRegistered writes every key to the registry and due set once per registration change.
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
	keys := map[watukuytype.Key][]byte{}
	entry, _ := json.Marshal(keyEntry{Source: "config"})
	for _, p := range e.pollers {
		pollers[p.Name], _ = json.Marshal(info(p))
		for _, k := range pollerKeys(p) {
			keys[k] = entry
		}
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

// Trigger makes a key due now; an open circuit gets its probe. It is an operator's override:
// it also clears the key's Retry-After window (the cleared window is logged), so a bogus
// window need not be waited out. A window the API gives again is kept again.
func (e *Engine) Trigger(ctx context.Context, key watukuytype.Key) error {
	return e.keyOp(ctx, key, "trigger", func(ctx context.Context, key watukuytype.Key) error {
		until, err := e.store.ClearThrottle(ctx, key)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			e.log.Warn().Str("poller", key.Poller).Str("partition", key.Partition).Time("throttledUntil", until.UTC()).
				Msg("trigger: cleared the key's Retry-After window (operator override)")
		}
		return e.store.Trigger(ctx, key)
	})
}

// Pause stops the key's cycles (no request, no delivery) until Resume.
func (e *Engine) Pause(ctx context.Context, key watukuytype.Key) error {
	return e.keyOp(ctx, key, "pause", e.store.Pause)
}

// Resume lifts a pause; the key is due at once.
func (e *Engine) Resume(ctx context.Context, key watukuytype.Key) error {
	return e.keyOp(ctx, key, "resume", e.store.Resume)
}

func (e *Engine) keyOp(ctx context.Context, key watukuytype.Key, name string, op func(context.Context, watukuytype.Key) error) error {
	if _, err := e.resolve(ctx, key); err != nil {
		return err
	}
	if err := op(ctx, key); err != nil {
		return fmt.Errorf("watukuy: %s %s: %w", name, key, err)
	}
	return nil
}

// Inspect reads one key's status.
func (e *Engine) Inspect(ctx context.Context, key watukuytype.Key) (watukuytype.KeyInfo, error) {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return watukuytype.KeyInfo{}, err
	}
	return e.inspect(ctx, t)
}

// inspect reads a resolved key's status.
func (e *Engine) inspect(ctx context.Context, t target) (watukuytype.KeyInfo, error) {
	key := t.key
	s, err := e.store.Inspect(ctx, key)
	if err != nil {
		return watukuytype.KeyInfo{}, fmt.Errorf("watukuy: inspect %s: %w", key, err)
	}
	st := newState(s.State)
	ki := watukuytype.KeyInfo{Poller: key.Poller, Partition: key.Partition, Paused: st.paused(), Source: t.source,
		Cursor: st.get(fieldCursorLive), Cursors: map[string]string{"live": st.get(fieldCursorLive)},
		LeaseOwner: s.LeaseOwner, LeaseEpoch: s.LeaseEpoch,
		Interval: st.duration(fieldInterval), Circuit: st.circuit(), Failures: st.int(fieldFailures),
		OutboxPending: s.OutboxLen, Parked: s.Parked, ParkedInvalid: s.ParkedInvalid, ParkedPoison: s.Parked - s.ParkedInvalid,
		Held: s.Held, Items: s.Items, SchemaVersion: t.info.SchemaVersion, Shadow: t.info.Shadow, LogRetention: t.info.logRetention()}
	if v := st.get(fieldLastPoll); v != "" {
		ki.LastPoll = json.RawMessage(v)
	}
	if v := st.get(fieldLastError); v != "" {
		ki.LastError = json.RawMessage(v)
	}
	if v := st.get(fieldRateLimit); v != "" {
		ki.RateLimit = json.RawMessage(v)
	}
	if bp := st.backfill(); bp != nil {
		ki.Backfill = bp
		ki.Cursors["backfill"] = bp.Cursor
	}
	for _, typ := range []watukuytype.EventType{watukuytype.Created, watukuytype.Updated, watukuytype.Deleted} {
		if n := st.int(fieldShadowPrefix + string(typ)); n > 0 {
			if ki.ShadowEvents == nil {
				ki.ShadowEvents = map[string]int{}
			}
			ki.ShadowEvents[string(typ)] = n
		}
	}
	if t := st.time(FieldThrottled); t.After(s.Now) {
		ki.ThrottledUntil = &t
	}
	if t := st.time(fieldReconcileDue); !t.IsZero() {
		ki.ReconcileDue = &t
	}
	if !s.LeaseExpires.IsZero() {
		ki.LeaseExpires = &s.LeaseExpires
	}
	ki.FreshnessMs = -1
	if t := st.time(fieldFreshAt); !t.IsZero() {
		ki.FreshAt = &t
		ki.FreshnessMs = max(s.Now.Sub(t), 0).Milliseconds()
	}
	if !s.OutboxOldest.IsZero() {
		ki.OutboxOldestAt = &s.OutboxOldest
		ki.OutboxOldestAgeMs = max(s.OutboxOldestAge, 0).Milliseconds()
	}
	if st.get(FieldNextDue) == "0" {
		ki.NextDueAt = &s.Now // triggered: due now
	} else if due := st.time(FieldNextDue); !due.IsZero() {
		ki.NextDueAt = &due
		if lag := s.Now.Sub(due); lag > 0 && !ki.Paused {
			ki.LagMs = lag.Milliseconds()
		}
	}
	switch {
	case st.get(fieldDeleted) == "1":
		ki.Status = watukuytype.StatusDeleted
	case st.get(fieldRemoved) == "1":
		ki.Status = watukuytype.StatusRemoved
	case ki.Paused:
		ki.Status = watukuytype.StatusPaused
	case ki.LeaseExpires != nil && ki.LeaseExpires.After(s.Now):
		ki.Status = watukuytype.StatusRunning
	case ki.Circuit == watukuytype.CircuitOpen:
		ki.Status = watukuytype.StatusCircuitOpen
	case ki.ThrottledUntil != nil:
		ki.Status = watukuytype.StatusThrottled
	case lastErrorCode(st.get(fieldLastError)) == watukuytype.CodeInvalidItems:
		ki.Status = watukuytype.StatusDegraded
	case ki.LastError != nil:
		ki.Status = watukuytype.StatusFailing
	default:
		ki.Status = watukuytype.StatusIdle
	}
	return ki, nil
}

// InspectAll reads every known key of poller (all pollers when "").
func (e *Engine) InspectAll(ctx context.Context, poller string) ([]watukuytype.KeyInfo, error) {
	if err := e.ensureRegistered(ctx); err != nil {
		return nil, err
	}
	ts, err := e.targets(ctx, poller) // one registry read, no lookup per key
	if err != nil {
		return nil, err
	}
	out := make([]watukuytype.KeyInfo, 0, len(ts))
	for _, t := range ts {
		ki, err := e.inspect(ctx, t)
		if err != nil {
			return out, err
		}
		out = append(out, ki)
	}
	return out, nil
}

// parkedRow is the stored JSON of a parked row.
type parkedRow struct {
	Kind     string           `json:"kind"`
	ID       string           `json:"id"`
	Error    string           `json:"error"`
	Errors   []string         `json:"errors,omitempty"`
	Attempts int              `json:"attempts,omitempty"`
	Event    *heldEntry       `json:"event,omitempty"`
	Identity string           `json:"identity,omitempty"`
	Lane     watukuytype.Lane `json:"lane,omitempty"`
	Item     string           `json:"item,omitempty"`
	ParkedAt int64            `json:"parkedAt"`
}

// heldEntry is an outbox entry kept aside (poison or held); the fields mirror the stream's.
type heldEntry struct {
	ID  string `json:"id"`
	OK  string `json:"ok"`
	EV  string `json:"ev"`
	Seq string `json:"seq"`
}

// ListParked returns the key's parked rows, oldest first; kind "" lists all.
func (e *Engine) ListParked(ctx context.Context, key watukuytype.Key, kind string) ([]watukuytype.ParkedInfo, error) {
	if _, err := e.resolve(ctx, key); err != nil {
		return nil, err
	}
	rows, err := e.store.ListParked(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("watukuy: parked ls %s: %w", key, err)
	}
	out := []watukuytype.ParkedInfo{}
	for id, raw := range rows {
		var r parkedRow
		if err := json.Unmarshal(raw, &r); err != nil {
			out = append(out, watukuytype.ParkedInfo{ID: id, Kind: "corrupt", Error: err.Error()})
			continue
		}
		if kind != "" && r.Kind != kind {
			continue
		}
		pi := watukuytype.ParkedInfo{ID: id, Kind: r.Kind, Error: r.Error, Errors: r.Errors, Attempts: r.Attempts,
			Identity: r.Identity, ParkedAt: time.UnixMilli(r.ParkedAt).UTC()}
		if r.Event != nil {
			pi.OrderingKey = r.Event.OK
			pi.Event = json.RawMessage(r.Event.EV)
			if pi.Identity == "" {
				var ev struct {
					Identity string `json:"identity"`
				}
				if json.Unmarshal(pi.Event, &ev) == nil {
					pi.Identity = ev.Identity
				}
			}
		}
		if r.Item != "" {
			if json.Valid([]byte(r.Item)) {
				pi.Item = json.RawMessage(r.Item)
			} else {
				pi.Item, _ = json.Marshal(r.Item)
			}
		}
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].ParkedAt.Equal(out[j].ParkedAt) {
			return out[i].ParkedAt.Before(out[j].ParkedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// RetryParked returns parked rows to work: a poison event goes back to delivery, the events
// its ordering key held follow in their original order; an invalid item is checked again and,
// when it now passes, committed as a normal observation.
func (e *Engine) RetryParked(ctx context.Context, key watukuytype.Key, ids []string) (int, error) {
	return e.releaseParked(ctx, key, ids, true)
}

// DiscardParked drops parked rows; the events a poison event held return to delivery.
func (e *Engine) DiscardParked(ctx context.Context, key watukuytype.Key, ids []string) (int, error) {
	return e.releaseParked(ctx, key, ids, false)
}

func (e *Engine) releaseParked(ctx context.Context, key watukuytype.Key, ids []string, retry bool) (int, error) {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return 0, err
	}
	released := 0
	err = e.withOpLease(ctx, t, func(c *cycle) error {
		rows, err := e.store.ListParked(ctx, key)
		if err != nil {
			return err
		}
		var plain []string
		for _, id := range ids {
			raw, ok := rows[id]
			if !ok {
				return fmt.Errorf("no parked row %q", id)
			}
			var r parkedRow
			if err := json.Unmarshal(raw, &r); err == nil && r.Kind == parkedInvalid && retry {
				if c.p == nil {
					return fmt.Errorf("parked row %s is an invalid item: retrying it runs the poller's checks, so pass --config with poller %q", id, key.Poller)
				}
				if err := c.retryInvalid(ctx, r); err != nil {
					return err
				}
				released++
				continue
			}
			plain = append(plain, id)
		}
		if len(plain) > 0 {
			n, _, err := e.store.ReleaseParked(ctx, c.lease, retry, plain)
			released += n
			if err != nil {
				return err
			}
		}
		// A degraded key (INVALID_ITEMS) whose parked invalid rows are all dealt with is no
		// longer degraded: its next cycle reads nothing new and would keep the code.
		if lastErrorCode(c.state.get(fieldLastError)) == watukuytype.CodeInvalidItems && !invalidLeft(rows, ids) {
			c.endDelete = append(c.endDelete, fieldLastError)
		}
		return nil
	})
	if err != nil {
		return released, fmt.Errorf("watukuy: parked %s on %s: %w", map[bool]string{true: "retry", false: "discard"}[retry], key, err)
	}
	return released, e.store.Trigger(ctx, key)
}

// invalidLeft reports whether rows (parked id → row) hold an invalid row that ids do not name.
func invalidLeft(rows map[string][]byte, ids []string) bool {
	named := make(map[string]bool, len(ids))
	for _, id := range ids {
		named[id] = true
	}
	for id, raw := range rows {
		var r parkedRow
		if !named[id] && json.Unmarshal(raw, &r) == nil && r.Kind == parkedInvalid {
			return true
		}
	}
	return false
}

// withOpLease runs fn under the key's lease, waiting up to 5s for another holder to finish.
// The cycle's poller is nil when this engine does not have the key's definition.
func (e *Engine) withOpLease(ctx context.Context, t target, fn func(c *cycle) error) error {
	deadline := time.Now().Add(5 * time.Second)
	ttl := t.info.leaseTTL()
	if t.p != nil {
		ttl = t.p.LeaseTTL
	}
	for {
		sent := e.now()
		b, err := e.store.Begin(ctx, t.key, e.owner, ttl, true)
		if err != nil {
			return err
		}
		if b.Status == BeginOK {
			c := newCycle(e, t.p, b, sent, e.now())
			ferr := fn(c)
			if c.released {
				return ferr
			}
			if err := e.store.End(ctx, c.lease, EndRequest{Delete: c.endDelete, NextDue: b.Now, Trigger: c.state.get(FieldTrigger)}); err != nil && ferr == nil {
				ferr = err
			}
			return ferr
		}
		if time.Now().After(deadline) {
			return errors.New("the key stayed leased by another instance for 5s; try again")
		}
		wait := min(b.LeaseExpires.Sub(b.Now), 250*time.Millisecond)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(wait, 10*time.Millisecond)):
		}
	}
}

// state wraps a key's state hash with typed accessors.
type state map[string]string

func newState(m map[string]string) state {
	if m == nil {
		return state{}
	}
	return state(m)
}

func (s state) get(f string) string { return s[f] }
func (s state) int(f string) int    { n, _ := strconv.Atoi(s[f]); return n }
func (s state) paused() bool        { return s[FieldPaused] == "1" }
func (s state) duration(f string) time.Duration {
	return time.Duration(s.int(f)) * time.Millisecond
}
func (s state) time(f string) time.Time {
	n, err := strconv.ParseInt(s[f], 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}
func (s state) backfill() *watukuytype.BackfillProgress {
	v := s[fieldBackfill]
	if v == "" {
		return nil
	}
	var bp watukuytype.BackfillProgress
	if json.Unmarshal([]byte(v), &bp) != nil {
		return nil
	}
	return &bp
}
func (s state) circuit() watukuytype.CircuitState {
	if c := s[fieldCircuit]; c != "" {
		return watukuytype.CircuitState(c)
	}
	return watukuytype.CircuitClosed
}

// State hash fields.
const (
	fieldCursorLive = "cursor.live"
	FieldNextDue    = "nextDue"
	fieldInterval   = "interval"
	fieldFailures   = "failures"
	fieldCircuit    = "circuit"
	fieldLastPoll   = "lastPoll"
	fieldLastError  = "lastError"
	FieldPaused     = "paused"
	fieldSchema     = "schemaVersion"
	FieldThrottled  = "throttledUntil"
	// FieldTrigger counts triggers (trigger, resume, partitions add): a cycle that ends after
	// one landed stays due now.
	FieldTrigger   = "trig"
	fieldRateLimit = "rateLimit"
	// fieldFreshAt is when (ms, server clock) a cycle last found the key current with its API
	// or moved it forward with data (finish); KeyInfo.FreshAt.
	fieldFreshAt = "freshAt"

	fieldReconcileDue     = "reconcileDue"
	fieldDeleteCandidates = "deleteCandidates"
	fieldLiveTag          = "etag.live" // the live lane's committed entity tag (liveTag)
	fieldBackfill         = "backfill"
	fieldShadowPrefix     = "shadow."
	fieldRemoved          = "removed"
	fieldDeleted          = "deleted"
	fieldIncarnation      = "incarnation" // a partition deleted and added again: its lives start here

	parkedInvalid = "invalid"
	parkedPoison  = "poison"
)
