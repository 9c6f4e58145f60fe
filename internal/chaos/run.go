package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/cursor"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/schedule"
)

// Options configures an in-process chaos run. Everything random derives from Seed, so a
// seed reproduces the run's choices (goroutine timing aside).
type Options struct {
	Seed uint64
	// Steps is how many rounds of mutations, faults and ticks run; default 200.
	Steps int
	// Duration, when set, runs rounds until that much wall time has passed (Steps is ignored).
	Duration time.Duration
	// Redis is where the engines keep their state (miniredis or a real server); the run uses
	// its own key prefix.
	Redis redis.UniversalClient
	// Engines is how many engines compete for the keys at once; default 2.
	Engines int
	// KillRate is the chance per engine and step that a random kill point is armed; default 0.3.
	KillRate float64
	// FailRate is the chance that a handler call fails once; default 0.05.
	FailRate float64
	// PauseRate is the chance per step of a stop-the-world: an engine freezes inside a
	// handler past its lease, another instance takes the key over, then the frozen one
	// resumes and must be fenced off (G5); default 0.1.
	PauseRate float64
	// OpRate is the chance per step of an operator action (backfill, reset-cursor, pause
	// lifted a few steps later) on a random key; default 0.1, negative for none.
	OpRate float64
	// Log receives one line per kill and per step summary; may be nil.
	Log io.Writer
	// Pollers replaces the built-in scenario (fake APIs with every cursor strategy) with your
	// own pollers; their Fetch and Handler are wrapped to record what happens and to inject
	// handler failures and pauses. Between runs before each step (change your fake API
	// there); Truth, when set, gives the ground truth that G3 and G6 need.
	Pollers []core.Poller
	Between func(step int)
	Truth   func() map[core.Key]Truth
}

// Result is a run's report with what the run did.
type Result struct {
	Report
	Seed   uint64
	Steps  int
	Cycles int
	Kills  map[KillPoint]int
	Faults int // 429 / 503 / 5xx answers injected
	Pauses int // stop-the-world pauses past the lease, with a takeover
	// Ops counts the operator actions by name ("backfill", "pause", "reset-cursor refused", …).
	Ops     map[string]int
	Changes int
}

// key is one (poller, partition) of the run with its own fake API.
type runKey struct {
	key core.Key
	api *fakeapi.API
	srv *fakeapi.Server
}

// Run drives a seeded scenario: fake APIs change (ties included) and answer with 429s and
// 5xx, engines are killed at random kill points and replaced by new instances, handlers fail
// and some events are poison; then faults stop, parked events are retried, everything
// settles, and Check reports per guarantee.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Redis == nil {
		return Result{}, errors.New("chaos: Options.Redis is required")
	}
	if o.Steps <= 0 {
		o.Steps = 200
	}
	deadline := time.Time{}
	if o.Duration > 0 {
		deadline = time.Now().Add(o.Duration)
		o.Steps = math.MaxInt
	}
	if o.Engines <= 0 {
		o.Engines = 2
	}
	if o.KillRate == 0 {
		o.KillRate = 0.3
	}
	if o.FailRate == 0 {
		o.FailRate = 0.05
	}
	if o.PauseRate == 0 {
		o.PauseRate = 0.1
	}
	if o.OpRate == 0 {
		o.OpRate = 0.1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	s := &scenario{o: o, rng: rng, rec: NewRecorder(), clock: NewClock(time.UnixMilli(1_800_000_000_000)), prefix: fmt.Sprintf("chaos%d", o.Seed),
		handlerFail: true, paused: map[core.Key]int{}, res: Result{Seed: o.Seed, Steps: o.Steps, Kills: map[KillPoint]int{}, Ops: map[string]int{}}}
	s.rec.MarkMeasured("throttles", "parked")
	defer s.close()
	if o.Pollers == nil {
		s.keys = s.newKeys()
	}
	for i := range o.Engines {
		if err := s.spawn(i); err != nil {
			return s.res, err
		}
	}
	step := 0
	for ; step < o.Steps && ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)); step++ {
		s.mutate(step)
		s.operate(ctx, step)
		s.clock.Advance(time.Duration(100+rng.IntN(1400)) * time.Millisecond)
		for i := range s.engines {
			if rng.Float64() < o.KillRate {
				s.engines[i].store.Arm(KillPoints()[rng.IntN(len(KillPoints()))])
			}
		}
		if len(s.engines) > 1 && rng.Float64() < o.PauseRate {
			s.stopTheWorld(ctx, rng.IntN(len(s.engines)))
		}
		var wg sync.WaitGroup
		for i := range s.engines {
			wg.Add(1)
			go func() { defer wg.Done(); s.tick(ctx, i) }()
		}
		wg.Wait()
		for i := range s.engines {
			if p := s.engines[i].store.Killed(); p != "" {
				s.res.Kills[p]++
				fmt.Fprintf(o.Log, "step %d: %s killed at %s\n", step, s.engines[i].store.Instance, p)
				if err := s.spawn(i); err != nil {
					return s.res, err
				}
			}
		}
	}
	s.res.Steps = step
	if err := s.quiesce(ctx); err != nil {
		return s.res, err
	}
	var truth map[core.Key]Truth
	switch {
	case o.Pollers == nil:
		truth = map[core.Key]Truth{}
		for _, k := range s.keys {
			truth[k.key] = TruthOf(k.api)
		}
	case o.Truth != nil:
		truth = o.Truth()
	}
	for _, t := range truth {
		s.res.Changes += len(t.Changes)
	}
	s.res.Report = Check(truth, s.rec)
	return s.res, nil
}

// scenario is one run's world.
type scenario struct {
	o       Options
	rng     *rand.Rand
	rec     *Recorder
	clock   *Clock
	prefix  string
	keys    []*runKey
	engines []*engineSlot
	gen     int
	res     Result

	mu          sync.Mutex
	handlerFail bool // poison and random failures are on until quiesce
	freeze      *freeze

	paused map[core.Key]int // keys the operator paused → the step that resumes them
}

// freeze is a pending stop-the-world: the next fetch or handler call (at) of instance blocks.
type freeze struct {
	instance string
	at       string        // "fetch" or "handler"
	frozen   chan core.Key // reports the key it froze in
	thaw     chan struct{}
}

// maybeFreeze blocks the caller when a stop-the-world waits for this instance at this point.
func (s *scenario) maybeFreeze(instance string, key core.Key, at string) {
	s.mu.Lock()
	f := s.freeze
	if f == nil || f.instance != instance || f.at != at {
		s.mu.Unlock()
		return
	}
	s.freeze = nil
	s.mu.Unlock()
	f.frozen <- key
	<-f.thaw
}

type engineSlot struct {
	eng   *core.Engine
	store *FaultyStore
}

// newKeys makes three pollers over their own fake APIs: timestamp with a tie-breaker and
// a reconcile lane (two partitions), token with tombstones, snapshotDiff over a listing.
func (s *scenario) newKeys() []*runKey {
	mk := func(poller, part string) *runKey {
		api := fakeapi.New()
		return &runKey{key: core.Key{Poller: poller, Partition: part}, api: api, srv: fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: true})}
	}
	return []*runKey{mk("ts", "a"), mk("ts", "b"), mk("tok", ""), mk("snap", "")}
}

// allKeys lists the run's keys.
func (s *scenario) allKeys() []core.Key {
	var ks []core.Key
	for _, k := range s.keys {
		ks = append(ks, k.key)
	}
	for _, p := range s.o.Pollers {
		if len(p.Partitions) == 0 {
			ks = append(ks, core.Key{Poller: p.Name})
		}
		for _, part := range p.Partitions {
			ks = append(ks, core.Key{Poller: p.Name, Partition: part})
		}
	}
	return ks
}

func (s *scenario) close() {
	for _, k := range s.keys {
		k.srv.Close()
	}
}

// pollers defines the run's pollers for one engine instance.
func (s *scenario) pollers(instance string) []core.Poller {
	if s.o.Pollers != nil {
		var ps []core.Poller
		for _, p := range s.o.Pollers {
			fetch := p.Fetch
			p.Fetch = func(ctx context.Context, req core.FetchRequest) (core.Page, error) {
				s.rec.Fetched(Fetch{Instance: instance, Key: req.Key, At: s.clock.Now()})
				page, err := fetch(ctx, req)
				s.maybeFreeze(instance, req.Key, "fetch")
				return page, err
			}
			p.Handler = s.handler(instance, p.Handler)
			ps = append(ps, p)
		}
		return ps
	}
	return s.builtinPollers(instance)
}

// builtinPollers are the default scenario's; fetches go to the key's own fake API.
func (s *scenario) builtinPollers(instance string) []core.Poller {
	byKey := map[core.Key]*runKey{}
	for _, k := range s.keys {
		byKey[k.key] = k
	}
	type fetcher interface {
		Fetch(context.Context, core.FetchRequest) (core.Page, error)
	}
	route := func(make func(k *runKey) fetcher) core.FetchFunc {
		fs := map[core.Key]fetcher{}
		for _, k := range s.keys {
			fs[k.key] = make(k)
		}
		return func(ctx context.Context, req core.FetchRequest) (core.Page, error) {
			s.rec.Fetched(Fetch{Instance: instance, Key: req.Key, At: s.clock.Now()})
			p, err := fs[req.Key].Fetch(ctx, req)
			// Frozen with the answer in hand: what it commits next comes from a stale lease.
			s.maybeFreeze(instance, req.Key, "fetch")
			return p, err
		}
	}
	ts := route(func(k *runKey) fetcher {
		return &cursor.Timestamp{Source: cursor.Source{URL: k.srv.URL + "/items", Items: "data"}, Field: "updated_at",
			Param: "updated_since", LimitParam: "limit", Limit: 1 + s.rng.IntN(6), HasMore: "has_more", TieBreaker: "after_id"}
	})
	list := route(func(k *runKey) fetcher {
		return &cursor.Page{Source: cursor.Source{URL: k.srv.URL + "/list", Items: "data"}, Param: "page",
			SizeParam: "per_page", Size: 2 + s.rng.IntN(6), HasMore: "has_more"}
	})
	tok := route(func(k *runKey) fetcher {
		return &cursor.Token{Source: cursor.Source{URL: k.srv.URL + "/sync", Items: "data"}, Param: "cursor",
			Next: "next_cursor", HasMore: "has_more", LimitParam: "limit", Limit: 1 + s.rng.IntN(6)}
	})
	common := func(p core.Poller) core.Poller {
		p.Version = core.Field("version")
		p.Handler = s.handler(instance, nil)
		p.Schedule = schedule.Config{Min: 200 * time.Millisecond, Max: 2 * time.Second}
		p.LeaseTTL = 5 * time.Second
		p.MaxPagesPerCycle = 1000
		p.Delivery = core.Delivery{Attempts: 2, Backoff: schedule.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}
		return p
	}
	return []core.Poller{
		common(core.Poller{Name: "ts", Partitions: []string{"a", "b"}, Fetch: ts,
			Reconcile: &core.Reconcile{Every: 20 * time.Second, Fetch: list}}),
		common(core.Poller{Name: "tok", Fetch: tok, Tombstone: core.Flag("deleted")}),
		common(core.Poller{Name: "snap", Strategy: core.SnapshotDiff, Fetch: list}),
	}
}

// handler records deliveries; until quiesce, it fails at random and, in the built-in
// scenario, always fails poison events (identities ending in 7 at an odd version). inner is
// the user's handler, if any.
func (s *scenario) handler(instance string, inner core.Handler) core.Handler {
	return func(ctx context.Context, ev core.Event) error {
		s.maybeFreeze(instance, core.Key{Poller: ev.Poller, Partition: ev.Partition}, "handler")
		s.mu.Lock()
		failing := s.handlerFail
		fail := failing && s.rng.Float64() < s.o.FailRate
		s.mu.Unlock()
		if failing && inner == nil && ev.Identity[len(ev.Identity)-1] == '7' && len(ev.Version) > 0 && (ev.Version[len(ev.Version)-1]-'0')%2 == 1 {
			return errors.New("poison: the downstream rejects this event")
		}
		if fail {
			return errors.New("transient handler failure")
		}
		if inner != nil {
			if err := inner(ctx, ev); err != nil {
				return err
			}
		}
		s.rec.Delivered(Delivery{Instance: instance, Event: ev, At: s.clock.Now()})
		return nil
	}
}

// spawn starts a new engine instance in slot i (after a kill: the old one is dropped, never stopped).
func (s *scenario) spawn(i int) error {
	s.gen++
	instance := fmt.Sprintf("engine%d-gen%d", i, s.gen)
	st, err := redisstore.New(s.o.Redis, redisstore.Options{Prefix: s.prefix, Clock: s.clock.Now})
	if err != nil {
		return err
	}
	fs := &FaultyStore{Store: st, Instance: instance, Rec: s.rec, Clock: s.clock.Now}
	eng, err := core.NewEngine(core.Options{Store: fs, InstanceID: instance, TickConcurrency: 4, ClaimTimeout: 10 * time.Second, Clock: s.clock.Now,
		Rand: func() float64 { return 0.5 }, Hooks: core.Hooks{OnCycle: func(r core.CycleReport, _ time.Duration) {
			if r.Outcome == core.Ran {
				s.mu.Lock()
				s.res.Cycles++
				s.mu.Unlock()
			}
		}}})
	if err != nil {
		return err
	}
	for _, p := range s.pollers(instance) {
		if err := eng.Register(p); err != nil {
			return err
		}
	}
	slot := &engineSlot{eng: eng, store: fs}
	if i < len(s.engines) {
		s.engines[i] = slot
	} else {
		s.engines = append(s.engines, slot)
	}
	return nil
}

// stopTheWorld freezes engine i inside a fetch or a handler, lets its lease expire, has
// another engine take the key over, then thaws it: whatever it writes afterwards must be
// fenced off.
func (s *scenario) stopTheWorld(ctx context.Context, i int) {
	at := []string{"fetch", "handler"}[s.rng.IntN(2)]
	f := &freeze{instance: s.engines[i].store.Instance, at: at, frozen: make(chan core.Key, 1), thaw: make(chan struct{})}
	s.mu.Lock()
	s.freeze = f
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.tick(ctx, i); close(done) }()
	select {
	case key := <-f.frozen:
		s.res.Pauses++
		s.clock.Advance(6 * time.Second) // past the 5s lease
		other := (i + 1) % len(s.engines)
		_ = s.engines[other].eng.Trigger(ctx, key)
		s.tick(ctx, other)
		close(f.thaw)
		<-done
	case <-done: // nothing to deliver this time
		s.mu.Lock()
		s.freeze = nil
		s.mu.Unlock()
	}
	fmt.Fprintf(s.o.Log, "stop-the-world on %s in a %s\n", f.instance, at)
}

func (s *scenario) tick(ctx context.Context, i int) {
	_, _ = s.engines[i].eng.Tick(ctx, 2*time.Second)
}

// mutate changes the APIs: creates, updates, deletes over a few identities per key, often
// within one second (ties), and now and then a 429, a 503 or a 5xx burst.
func (s *scenario) mutate(step int) {
	if s.o.Between != nil {
		s.o.Between(step)
	}
	for _, k := range s.keys {
		if s.rng.IntN(3) > 0 {
			k.api.Advance(time.Second)
		}
		for n := s.rng.IntN(4); n > 0; n-- {
			// Half the changes hit a few hot identities, half a long tail changed once or
			// twice: a change skipped there stays visible in the final state.
			id := fmt.Sprintf("%s-%d", k.key.Poller, s.rng.IntN(8))
			if s.rng.IntN(2) == 0 {
				id = fmt.Sprintf("%s-c%d", k.key.Poller, s.rng.IntN(300))
			}
			if s.rng.IntN(5) == 0 {
				k.api.Delete(id)
			} else {
				k.api.Put(id, map[string]any{"n": s.rng.IntN(100)})
			}
		}
		switch s.rng.IntN(40) {
		case 0:
			k.srv.Inject(fakeapi.Fault{Status: 429, RetryAfter: fmt.Sprint(1 + s.rng.IntN(5))})
			s.res.Faults++
		case 1:
			k.srv.Inject(fakeapi.Fault{Status: 503, RetryAfter: "2"})
			s.res.Faults++
		case 2:
			k.srv.Inject(fakeapi.Fault{Status: 500, Times: 1 + s.rng.IntN(3)})
			s.res.Faults++
		}
	}
}

// quiesce stops the faults, retries every parked event with a working handler, and ticks
// until a round emits and delivers nothing.
func (s *scenario) quiesce(ctx context.Context) error {
	s.mu.Lock()
	s.handlerFail = false
	s.mu.Unlock()
	for i := range s.engines {
		s.engines[i].store.Arm("")
	}
	if err := s.resumeAll(ctx); err != nil {
		return err
	}
	eng := s.engines[0].eng
	for _, k := range s.keys {
		fmt.Fprintf(s.o.Log, "quiesce: %s drops %d pending faults\n", k.key, k.srv.PendingFaults())
		k.srv.ClearFaults()
	}
	for _, k := range s.allKeys() {
		if err := eng.Trigger(ctx, k); err != nil { // an open circuit gets its probe now
			return err
		}
	}
	quiet := 0
	round := 0
	defer func() { fmt.Fprintf(s.o.Log, "quiesce: %d rounds\n", round) }()
	for ; round < 200 && quiet < 3; round++ {
		s.clock.Advance(30 * time.Second)
		for _, k := range s.allKeys() {
			rows, err := eng.ListParked(ctx, k, "")
			if err != nil {
				return err
			}
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.ID)
			}
			for len(ids) > 0 { // in batches, as an operator would
				n := min(len(ids), 200)
				if _, err := eng.RetryParked(ctx, k, ids[:n]); err != nil && !core.IsLeaseLost(err) {
					fmt.Fprintf(s.o.Log, "quiesce: retry parked on %s: %v\n", k, err)
				}
				ids = ids[n:]
			}
		}
		rep, err := eng.Tick(ctx, 10*time.Second)
		if err != nil {
			return err
		}
		if rep.Events == 0 && rep.Delivered == 0 && len(rep.Errors) == 0 && rep.DeleteCandidates == 0 && rep.Ran > 0 && s.settled(ctx, eng) {
			quiet++
		} else {
			quiet = 0
		}
	}
	for _, k := range s.allKeys() {
		if ki, err := eng.Inspect(ctx, k); err == nil {
			fmt.Fprintf(s.o.Log, "after quiesce %s: status %s cursor %q items %d outbox %d parked %d held %d lastError %s\n",
				k, ki.Status, ki.Cursor, ki.Items, ki.OutboxPending, ki.Parked, ki.Held, ki.LastError)
		}
	}
	return nil
}

// settled reports whether every key is healthy: no last error, nothing waiting.
func (s *scenario) settled(ctx context.Context, eng *core.Engine) bool {
	for _, k := range s.allKeys() {
		ki, err := eng.Inspect(ctx, k)
		if err != nil || ki.LastError != nil || ki.OutboxPending > 0 || ki.Parked > 0 || ki.Held > 0 {
			return false
		}
	}
	return true
}

// Clock is a fake clock that stands in for the Redis server clock (and the engines' time)
// in tests and chaos runs. It moves only when told to.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
