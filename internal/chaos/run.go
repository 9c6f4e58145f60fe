package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
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
	// its own key prefix, and removes what an earlier run left under it first.
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
	// ResendRate is the chance that a script call is sent twice, as go-redis re-sends a
	// command after a read timeout while the first attempt ran; default 0.03, negative for none.
	ResendRate float64
	// LateRate is the chance that a granted Begin's reply arrives late when the key's outbox
	// holds events (the cycle delivers them first): the clock moves on by most of the lease
	// before the engine sees it, and that cycle's deliveries take time; default 0.25, negative
	// for none.
	LateRate float64
	// Log receives one line per kill and per step summary; may be nil.
	Log io.Writer
	// Keys limits the built-in scenario to these pollers ("ts", "tok", "snap", "hot", "fp");
	// none runs them all.
	Keys []string
	// Patch turns Changes.Patch on for the built-in scenario's pollers (fp ignores two fields,
	// tok keeps payloads of up to 220 bytes, so some of its updates say "too large") and
	// gives the items nested objects and arrays to patch; P1 checks every change set.
	Patch bool
	// Pollers replaces the built-in scenario (fake APIs with every cursor strategy) with your
	// own pollers; their Fetch and Handler are wrapped to record what happens and to inject
	// handler failures and pauses. Between runs before each step (change your fake API
	// there); Truth, when set, gives the ground truth that G3 and G6 need.
	Pollers []watukuytype.Poller
	Between func(step int)
	Truth   func() map[watukuytype.Key]Truth
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
	// Frozen counts the pauses by where the instance froze: "fetch", "handler", "request"
	// (before a request, another instance got a 429 meanwhile), "lost-grant" (after a Begin
	// whose grant a failover lost: the next instance gets the same epoch).
	Frozen  map[string]int
	Resends int // script calls sent twice
	Late    int // Begin replies that arrived late
	// BudgetWaits and BudgetRefusals count the requests that waited for a budget's token in
	// their cycle and those the budget refused (the key yielded).
	BudgetWaits, BudgetRefusals int
	// PagingDeletes counts items the snapshot listing's API deleted while it was paged.
	PagingDeletes int
	// ListingCuts counts cycles that stopped a complete listing short (snap's live lane, a
	// reconcile): it went on from there in a later cycle.
	ListingCuts int
	// SinkOutages counts the outages of a key's sink: every delivery fails as the sink's, for
	// 10 to 40 steps (many cycles), so the key's delivery is blocked while its cycles poll.
	SinkOutages int
	// Ops counts the operator actions by name ("backfill", "pause", "reset-cursor refused", …).
	Ops     map[string]int
	Changes int
}

// key is one (poller, partition) of the run with its own fake API.
type runKey struct {
	key watukuytype.Key
	api *fakeapi.API
	srv *fakeapi.Server
	// listSize is the page size of its page-numbered listing, the same for every instance:
	// one deployment, one config (a page number read at another size lands elsewhere, which
	// the engine tells by Poller.Revision).
	listSize int
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
	if o.ResendRate == 0 {
		o.ResendRate = 0.03
	}
	if o.LateRate == 0 {
		o.LateRate = 0.25
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	s := &scenario{o: o, rng: rng, rec: NewRecorder(), clock: fakeclock.New(time.UnixMilli(1_800_000_000_000)), prefix: fmt.Sprintf("chaos%d", o.Seed),
		handlerFail: true, paused: map[watukuytype.Key]int{}, down: map[watukuytype.Key]int{}, slow: map[string]slowCalls{}, res: Result{Seed: o.Seed, Steps: o.Steps, Kills: map[KillPoint]int{}, Ops: map[string]int{}, Frozen: map[string]int{}}}
	s.rec.MarkMeasured("throttles", "parked")
	defer s.close()
	rdb, err := s.resending(o.Redis)
	if err != nil {
		return s.res, err
	}
	defer rdb.Close()
	s.rdb = rdb
	// The run's truth starts empty: rows an earlier run of this seed left would be items the
	// fake API never had, and their deletes would count as false.
	if err := clearPrefix(ctx, o.Redis, s.prefix); err != nil {
		return s.res, err
	}
	if o.Pollers == nil {
		s.keys = s.newKeys()
		var shared []watukuytype.Key
		for _, k := range s.keys {
			if k.key.Poller == "ts" || k.key.Poller == "snap" {
				shared = append(shared, k.key)
			}
		}
		if len(shared) > 0 {
			s.rec.Budgeted(apiBudget(), apiBudget().Name, shared...)
		}
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
	for _, k := range s.keys {
		s.res.PagingDeletes += k.srv.DeletedWhilePaging()
		k.srv.DeleteWhilePaging(0, 0)
	}
	if err := s.quiesce(ctx); err != nil {
		return s.res, err
	}
	var truth map[watukuytype.Key]Truth
	switch {
	case o.Pollers == nil:
		truth = map[watukuytype.Key]Truth{}
		for _, k := range s.keys {
			truth[k.key] = TruthOf(k.api)
			if k.key.Poller == "fp" {
				t, err := TruthByContent(ctx, k.api, FieldN)
				if err != nil {
					return s.res, err
				}
				truth[k.key] = t
			}
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
	o     Options
	rng   *rand.Rand
	rec   *Recorder
	clock *fakeclock.Clock
	// inFlight keeps the run's clock still from a request's last lease check until the fake
	// API records it: the engines tick concurrently, and one engine's wait jumping the clock
	// there would be a pause past the lease's margin between the check and the wire, which no
	// lease can guard (the stop-the-world faults pause before that check, on purpose).
	inFlight sync.RWMutex
	prefix   string
	keys     []*runKey
	engines  []*engineSlot
	gen      int
	res      Result

	mu          sync.Mutex
	handlerFail bool // poison and random failures are on until quiesce
	freeze      *freeze

	paused map[watukuytype.Key]int // keys the operator paused → the step that resumes them
	down   map[watukuytype.Key]int // keys whose sink is down → the step it comes back
	slow   map[string]slowCalls    // instance/key of a late Begin → its next handler calls take time
	rdb    redis.UniversalClient
}

// advance moves the run's clock while no request is between its last lease check and the
// fake API (inFlight).
func (s *scenario) advance(d time.Duration) {
	s.inFlight.Lock()
	defer s.inFlight.Unlock()
	s.clock.Advance(d)
}

// sending runs a request from its last lease check to its answer with the clock held still.
func (s *scenario) sending(ctx context.Context, send func() error) error {
	s.inFlight.RLock()
	defer s.inFlight.RUnlock()
	if err := watukuytype.CheckLease(ctx); err != nil {
		return err
	}
	return send()
}

// freeze is a pending stop-the-world: the next call of instance at a point blocks.
type freeze struct {
	instance string
	at       string               // "fetch", "handler", "request" or "lost-grant"
	claimed  bool                 // lost-grant: a Begin has taken it
	frozen   chan watukuytype.Key // reports the key it froze in
	thaw     chan struct{}
}

// maybeFreeze blocks the caller when a stop-the-world waits for this instance at this point.
func (s *scenario) maybeFreeze(instance string, key watukuytype.Key, at string) {
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

// newKeys makes the built-in scenario's keys, each over its own fake API: timestamp with a
// tie-breaker and a reconcile lane (two partitions), token with tombstones, snapshotDiff over
// an offset listing that loses items while it is paged (confirmed by a detail request), a hot
// ordering key, and items without a version whose content comes back.
func (s *scenario) newKeys() []*runKey {
	mk := func(poller, part string) *runKey {
		api := fakeapi.New()
		srv := fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: true})
		k := &runKey{key: watukuytype.Key{Poller: poller, Partition: part}, api: api, srv: srv, listSize: 2 + s.rng.IntN(6)}
		// Requests are recorded where they arrive, so a request a frozen instance never sent
		// does not count.
		srv.OnRequest(func(_ int, r *http.Request) {
			if inst := r.Header.Get(instanceHeader); inst != "" {
				s.rec.Fetched(Fetch{Instance: inst, Key: k.key, At: s.clock.Now()})
			}
		})
		return k
	}
	keys := []*runKey{mk("ts", "a"), mk("ts", "b"), mk("tok", ""), mk("snap", ""), mk("hot", ""), mk("fp", "")}
	if len(s.o.Keys) > 0 {
		keys = slices.DeleteFunc(keys, func(k *runKey) bool { return !slices.Contains(s.o.Keys, k.key.Poller) })
	}
	return keys
}

// instanceHeader names the engine instance in the built-in scenario's requests.
const instanceHeader = "X-Chaos-Instance"

// allKeys lists the run's keys.
func (s *scenario) allKeys() []watukuytype.Key {
	var ks []watukuytype.Key
	for _, k := range s.keys {
		ks = append(ks, k.key)
	}
	for _, p := range s.o.Pollers {
		if len(p.Partitions) == 0 {
			ks = append(ks, watukuytype.Key{Poller: p.Name})
		}
		for _, part := range p.Partitions {
			ks = append(ks, watukuytype.Key{Poller: p.Name, Partition: part})
		}
	}
	return ks
}

func (s *scenario) close() {
	for _, k := range s.keys {
		k.srv.Close()
	}
}

// apiBudget is the budget the built-in scenario's ts and snap keys share: tight enough that
// their cycles wait for tokens and yield, and their reconcile lane gives way to live.
func apiBudget() watukuytype.Budget {
	return watukuytype.Budget{Name: "api", Rate: 20, Per: time.Second, Burst: 4}
}

// pollers defines the run's pollers for one engine instance.
func (s *scenario) pollers(instance string) []watukuytype.Poller {
	if s.o.Pollers != nil {
		var ps []watukuytype.Poller
		for _, p := range s.o.Pollers {
			fetch := p.Fetch
			p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (page watukuytype.Page, err error) {
				if serr := s.sending(ctx, func() error {
					s.rec.Fetched(Fetch{Instance: instance, Key: req.Key, At: s.clock.Now()})
					page, err = fetch(ctx, req)
					return nil
				}); serr != nil {
					return page, serr
				}
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
func (s *scenario) builtinPollers(instance string) []watukuytype.Poller {
	type fetcher interface {
		Fetch(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error)
	}
	src := func(k *runKey, path string) httppoll.Source {
		return httppoll.Source{URL: k.srv.URL + path, Items: "data", Header: http.Header{instanceHeader: {instance}}}
	}
	route := func(make func(k *runKey) fetcher) watukuytype.FetchFunc {
		fs := map[watukuytype.Key]fetcher{}
		for _, k := range s.keys {
			fs[k.key] = make(k)
		}
		return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			// Frozen after the cycle's checks, before the request leaves.
			s.maybeFreeze(instance, req.Key, "request")
			var p watukuytype.Page
			err := s.sending(ctx, func() (err error) { p, err = fs[req.Key].Fetch(ctx, req); return err })
			// Frozen with the answer in hand: what it commits next comes from a stale lease.
			s.maybeFreeze(instance, req.Key, "fetch")
			return p, err
		}
	}
	ts := route(func(k *runKey) fetcher {
		return &httppoll.TimestampCursor{Source: src(k, "/items"), Field: "updated_at",
			Param: "updated_since", LimitParam: "limit", Limit: 1 + s.rng.IntN(6), HasMore: "has_more", TieBreaker: "after_id"}
	})
	big := route(func(k *runKey) fetcher {
		return &httppoll.TimestampCursor{Source: src(k, "/items"), Field: "updated_at",
			Param: "updated_since", LimitParam: "limit", Limit: 1000, HasMore: "has_more", TieBreaker: "after_id"}
	})
	list := route(func(k *runKey) fetcher {
		return &httppoll.PageCursor{Source: src(k, "/list"), Param: "page", SizeParam: "per_page", Size: k.listSize, HasMore: "has_more"}
	})
	offsets := route(func(k *runKey) fetcher {
		return &httppoll.PageCursor{Source: src(k, "/list"), Param: "offset", Offset: true, SizeParam: "limit", Size: 2 + s.rng.IntN(6), HasMore: "has_more"}
	})
	tok := func(limit func() int) watukuytype.FetchFunc {
		return route(func(k *runKey) fetcher {
			return &httppoll.TokenCursor{Source: src(k, "/sync"), Param: "cursor", Next: "next_cursor", HasMore: "has_more", LimitParam: "limit", Limit: limit()}
		})
	}
	details := map[watukuytype.Key]*httppoll.DetailRequest{}
	for _, k := range s.keys {
		d := &httppoll.DetailRequest{Source: src(k, "/items/{id}")}
		d.Items = "" // the body is the item
		details[k.key] = d
	}
	detail := func(ctx context.Context, key watukuytype.Key, identity string) (json.RawMessage, bool, error) {
		var item json.RawMessage
		var found bool
		err := s.sending(ctx, func() (err error) { item, found, err = details[key].Fetch(ctx, key, identity); return err })
		return item, found, err
	}
	common := func(p watukuytype.Poller) watukuytype.Poller {
		if p.Fingerprint == nil {
			p.Version = watukuytype.Field("version")
		}
		p.Handler = s.handler(instance, nil)
		p.Schedule = watukuytype.Schedule{Min: 200 * time.Millisecond, Max: 2 * time.Second}
		p.LeaseTTL = 5 * time.Second
		if p.MaxPagesPerCycle == 0 {
			p.MaxPagesPerCycle = 1000
		}
		if p.CommitMaxItems == 0 {
			p.CommitMaxItems = 200 // large pages commit in several chunks
		}
		p.Delivery = watukuytype.Delivery{Attempts: 2, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}, OrderingKey: p.Delivery.OrderingKey}
		if s.o.Patch {
			p.Changes.Patch = true
		} else {
			p.Changes = watukuytype.Changes{}
		}
		return p
	}
	ps := []watukuytype.Poller{
		common(watukuytype.Poller{Name: "ts", Partitions: []string{"a", "b"}, Fetch: ts, Budget: apiBudget().Name,
			Reconcile: &watukuytype.Reconcile{Every: 20 * time.Second, Fetch: list, MaxPages: 3}}),
		common(watukuytype.Poller{Name: "tok", Fetch: tok(func() int { return 1 + s.rng.IntN(6) }), Tombstone: watukuytype.Flag("deleted"),
			Changes: watukuytype.Changes{MaxBytes: 220}}),
		// A listing of a few pages a cycle: it goes on over several, with kills between them.
		common(watukuytype.Poller{Name: "snap", Strategy: watukuytype.SnapshotDiff, Fetch: offsets, Detail: detail, Budget: apiBudget().Name, MaxPagesPerCycle: 2}),
		// Every "h…" identity shares one ordering key: a poison event holds hundreds behind it.
		common(watukuytype.Poller{Name: "hot", Fetch: big, Reconcile: &watukuytype.Reconcile{Every: 20 * time.Second, Fetch: list}, CommitMaxItems: 1000,
			Delivery: watukuytype.Delivery{OrderingKey: func(ev watukuytype.Event) string {
				if strings.HasPrefix(ev.Identity, "hot-h") {
					return "H"
				}
				return ev.Identity
			}}}),
		// No version: the content (field n, one of three values) is the change, and it comes
		// back; identities are deleted and created again.
		common(watukuytype.Poller{Name: "fp", Fetch: tok(func() int { return 1 + s.rng.IntN(6) }), Tombstone: watukuytype.Flag("deleted"),
			Fingerprint: func(item json.RawMessage) ([]byte, error) { return []byte(FieldN(item)), nil },
			Changes:     watukuytype.Changes{Ignore: []string{"/updated_at", "meta.etag"}}}),
	}
	if len(s.o.Keys) > 0 {
		ps = slices.DeleteFunc(ps, func(p watukuytype.Poller) bool { return !slices.Contains(s.o.Keys, p.Name) })
	}
	return ps
}

// handler records deliveries; until quiesce, it fails at random and, in the built-in
// scenario, always fails poison events (identities ending in 7 at an odd version). inner is
// the user's handler, if any.
func (s *scenario) handler(instance string, inner watukuytype.Handler) watukuytype.Handler {
	return func(ctx context.Context, ev watukuytype.Event) error {
		start, believed := s.clock.Now(), watukuytype.CheckLease(ctx) == nil
		s.mu.Lock()
		sk := instance + "/" + watukuytype.Key{Poller: ev.Poller, Partition: ev.Partition}.String()
		slow := s.slow[sk]
		if slow.n--; slow.n <= 0 {
			delete(s.slow, sk)
		} else {
			s.slow[sk] = slow
		}
		s.mu.Unlock()
		if slow.d > 0 {
			defer s.advance(slow.d)
		}
		s.maybeFreeze(instance, watukuytype.Key{Poller: ev.Poller, Partition: ev.Partition}, "handler")
		s.mu.Lock()
		_, down := s.down[watukuytype.Key{Poller: ev.Poller, Partition: ev.Partition}]
		if down {
			s.mu.Unlock()
			return watukuytype.SinkUnavailable(errors.New("chaos: the sink is down"))
		}
		failing := s.handlerFail
		fail := failing && s.rng.Float64() < s.o.FailRate
		s.mu.Unlock()
		if failing && inner == nil && poison(ev) {
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
		d := Delivery{Instance: instance, Event: ev, Start: start, Believed: believed, At: s.clock.Now()}
		if ev.Type == watukuytype.Deleted {
			d.Early = s.deletedEarly(ev)
		}
		s.rec.Delivered(d)
		return nil
	}
}

// slowCalls makes the next n handler calls of an instance for a key take d each.
type slowCalls struct {
	d time.Duration
	n int
}

// deletedEarly reports whether a deleted event reaches the handler before its fake API deleted
// the item at the event's version: a delete the API has not made (yet).
func (s *scenario) deletedEarly(ev watukuytype.Event) bool {
	v, _ := strconv.Atoi(versionOf(ev))
	for _, k := range s.keys {
		if k.key == (watukuytype.Key{Poller: ev.Poller, Partition: ev.Partition}) {
			return !k.api.DeletedSince(ev.Identity, v)
		}
	}
	return false
}

// FieldN is what the fp poller's fingerprint sees of an item: its field n.
func FieldN(item json.RawMessage) string {
	var it struct {
		N json.RawMessage `json:"n"`
	}
	_ = json.Unmarshal(item, &it)
	return string(it.N)
}

// poison picks the built-in scenario's poison events: identities ending in 7 at an odd version.
func poison(ev watukuytype.Event) bool {
	v := versionOf(ev)
	return ev.Identity[len(ev.Identity)-1] == '7' && len(v) > 0 && (v[len(v)-1]-'0')%2 == 1
}

// spawn starts a new engine instance in slot i (after a kill: the old one is dropped, never stopped).
func (s *scenario) spawn(i int) error {
	s.gen++
	instance := fmt.Sprintf("engine%d-gen%d", i, s.gen)
	st, err := redisstore.New(s.rdb, redisstore.Options{Prefix: s.prefix, Clock: s.clock.Now})
	if err != nil {
		return err
	}
	fs := &FaultyStore{Store: st, Instance: instance, Rec: s.rec, Clock: s.clock.Now}
	s.grantHooks(fs, st)
	// Waits between pages and for a budget's token pass on the run's clock, which the budget's
	// bucket and the requests' record read too.
	wait := func(ctx context.Context, d time.Duration) error { s.advance(d); return ctx.Err() }
	eng, err := core.NewEngine(core.Options{Store: fs, InstanceID: instance, TickConcurrency: 4, ClaimTimeout: 10 * time.Second, Clock: s.clock.Now,
		Budgets: []watukuytype.Budget{apiBudget()}, Wait: wait,
		Rand: func() float64 { return 0.5 }, Hooks: watukuytype.Hooks{OnCycle: func(r watukuytype.CycleReport, _ time.Duration) {
			if r.Outcome == watukuytype.Ran {
				s.mu.Lock()
				s.res.Cycles++
				if r.Truncated && (r.Key.Poller == "snap" || r.Key.Poller == "ts") {
					s.res.ListingCuts++
				}
				s.mu.Unlock()
			}
		}, OnBudget: func(_ watukuytype.Key, _ string, _ watukuytype.Lane, wait time.Duration, taken bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			switch {
			case !taken:
				s.res.BudgetRefusals++
			case wait > 0:
				s.res.BudgetWaits++
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

// stopTheWorld freezes engine i at one point of a cycle, has another engine take the key over,
// then thaws it: whatever it writes or sends afterwards must be fenced off or never leave. The
// points: inside a fetch (the answer in hand) or a handler, before a request (the other engine
// gets a 429 and saves a Retry-After window meanwhile), and right after a Begin whose grant a
// failover lost (the lease is put back as it was, so the other engine gets the same epoch).
func (s *scenario) stopTheWorld(ctx context.Context, i int) {
	points := []string{"fetch", "handler", "lost-grant"}
	if s.o.Pollers == nil {
		points = append(points, "request")
	}
	at := points[s.rng.IntN(len(points))]
	f := &freeze{instance: s.engines[i].store.Instance, at: at, frozen: make(chan watukuytype.Key, 1), thaw: make(chan struct{})}
	s.mu.Lock()
	s.freeze = f
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.tick(ctx, i); close(done) }()
	select {
	case key := <-f.frozen:
		s.mu.Lock()
		s.res.Pauses++
		s.res.Frozen[at]++
		s.mu.Unlock()
		if at != "lost-grant" {
			s.advance(6 * time.Second) // past the 5s lease
		}
		if at == "request" {
			for _, k := range s.keys {
				if k.key == key {
					k.srv.Inject(fakeapi.Fault{Status: 429, RetryAfter: "30"})
				}
			}
		}
		other := (i + 1) % len(s.engines)
		// Due now through the store: the engine's trigger is an operator's override that
		// clears Retry-After windows, which the G8 check holds every request to.
		_ = s.engines[other].store.Trigger(ctx, key)
		s.tick(ctx, other)
		close(f.thaw)
		<-done
	case <-done: // the point was not reached this time
		s.mu.Lock()
		s.freeze = nil
		s.mu.Unlock()
	}
	fmt.Fprintf(s.o.Log, "stop-the-world on %s at %s\n", f.instance, at)
}

// grantHooks makes a FaultyStore's grants late (the reply arrives when most of the lease is
// gone, and the cycle's deliveries take time) or lost (a failover forgets the grant: the lease is put back as it was before Begin)
// when the scenario asks for it.
func (s *scenario) grantHooks(fs *FaultyStore, st *redisstore.Store) {
	var mu sync.Mutex
	lose := map[watukuytype.Key][]any{} // the one Begin that loses its grant → the lease before it
	leaseFields := []string{statehash.LeaseEpoch, statehash.LeaseToken, statehash.LeaseOwner, statehash.LeaseExpires, statehash.LeaseWrite, statehash.LeaseReply}
	fs.BeforeBegin = func(key watukuytype.Key) {
		s.mu.Lock()
		f := s.freeze
		mine := f != nil && f.instance == fs.Instance && f.at == "lost-grant" && !f.claimed
		if mine {
			f.claimed = true
		}
		s.mu.Unlock()
		if mine {
			before, _ := s.rdb.HMGet(context.Background(), st.Key(key, "state"), leaseFields...).Result()
			mu.Lock()
			lose[key] = before
			mu.Unlock()
		}
	}
	fs.AfterBegin = func(key watukuytype.Key, b core.BeginResult, err error) {
		mu.Lock()
		before, lost := lose[key]
		delete(lose, key)
		mu.Unlock()
		if err != nil || b.Status != core.BeginOK {
			return
		}
		if lost {
			// The grant is lost: the lease's fields go back to what they were before it.
			state := st.Key(b.Lease.Key, "state")
			ctx := context.Background()
			for i, f := range leaseFields {
				if v, ok := before[i].(string); ok {
					_ = s.rdb.HSet(ctx, state, f, v).Err()
				} else {
					_ = s.rdb.HDel(ctx, state, f).Err()
				}
			}
			s.maybeFreeze(fs.Instance, b.Lease.Key, "lost-grant")
			return
		}
		s.mu.Lock()
		late := s.o.LateRate > 0 && b.OutboxLen > 0 && s.rng.Float64() < s.o.LateRate
		if late {
			s.res.Late++
			// The reply took most of the lease, and this cycle's handler calls take time: an
			// engine that counts its lease from the reply delivers after it expired.
			s.slow[fs.Instance+"/"+key.String()] = slowCalls{d: b.Lease.TTL * 3 / 10, n: 4}
		}
		s.mu.Unlock()
		if late {
			s.advance(b.Lease.TTL * 9 / 10)
		}
	}
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
	s.outages(step)
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
			values := 100
			if k.key.Poller == "fp" {
				values = 3 // no version: the content comes back
			}
			if s.rng.IntN(5) == 0 {
				k.api.Delete(id)
			} else {
				k.api.Put(id, s.fields(s.rng.IntN(values)))
			}
		}
		switch {
		case k.key.Poller == "hot" && s.rng.IntN(15) == 0:
			// A burst on the hot ordering key: more events than one outbox read, then, a second
			// later, other identities. The burst's instance dies right after it parks a poison
			// event of the hot key (the events delivered before it unacked) or right after
			// committing the burst, whichever of the two has fired less often: a random kill
			// point armed later may replace this one, and an unlucky run would otherwise never
			// see one of them. While the hot key is held the next instance drains hundreds of
			// held entries before the deliverable ones behind them.
			k.api.PutMany(600+s.rng.IntN(300), "hot-h", s.fields(s.rng.IntN(100)))
			k.api.Advance(time.Second)
			for j := range 3 {
				k.api.Put(fmt.Sprintf("hot-y%d", j), s.fields(s.rng.IntN(100)))
			}
			point := K4AfterPark
			if s.res.Kills[K4AfterPark] > s.res.Kills[K3AfterCommit] {
				point = K3AfterCommit
			}
			for _, e := range s.engines {
				e.store.ArmFor(point, k.key)
			}
		case k.key.Poller == "snap" && s.rng.IntN(3) == 0:
			k.srv.DeleteWhilePaging(1, 3) // items shift while the next listing is paged
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

// fields is an item's content: its field n and, with Options.Patch, what a patch has to get
// right (nested objects, arrays whose elements come and go, numbers written with trailing
// zeros).
func (s *scenario) fields(n int) map[string]any {
	f := map[string]any{"n": n}
	if !s.o.Patch {
		return f
	}
	lines := make([]any, s.rng.IntN(5))
	for i := range lines {
		lines[i] = map[string]any{"sku": fmt.Sprintf("s%d", s.rng.IntN(4)), "qty": 1 + s.rng.IntN(3),
			"price": json.Number(fmt.Sprintf("%d.%d0", s.rng.IntN(10), s.rng.IntN(10)))}
	}
	tags := make([]any, s.rng.IntN(4))
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d", s.rng.IntN(5))
	}
	f["lines"] = lines
	f["meta"] = map[string]any{"etag": fmt.Sprintf("e%d", s.rng.IntN(1000)), "tags": tags}
	return f
}

// outages takes a key's sink down now and then, for 10 to 40 steps (many cycles: its delivery
// is blocked while its cycles poll), and brings the ones whose time is up back.
func (s *scenario) outages(step int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, until := range s.down {
		if step >= until {
			delete(s.down, k)
			s.rec.SinkUp(k)
		}
	}
	if !s.handlerFail || len(s.keys) == 0 || s.rng.IntN(40) != 0 {
		return
	}
	k := s.keys[s.rng.IntN(len(s.keys))].key
	if _, ok := s.down[k]; !ok {
		s.down[k] = step + 10 + s.rng.IntN(31)
		s.rec.SinkDown(k)
		s.res.SinkOutages++
	}
}

// quiesce stops the faults, retries every parked event with a working handler, and ticks
// until a round emits and delivers nothing.
func (s *scenario) quiesce(ctx context.Context) error {
	s.mu.Lock()
	s.handlerFail = false
	for k := range s.down {
		delete(s.down, k)
		s.rec.SinkUp(k)
	}
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
		// An open circuit gets its probe now; through the store, which keeps Retry-After
		// windows (the engine's trigger clears them: an operator's override).
		if err := s.engines[0].store.Trigger(ctx, k); err != nil {
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
				if _, err := eng.RetryParked(ctx, k, ids[:n]); err != nil && !watukuytype.IsLeaseLost(err) {
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

// settled reports whether every key is healthy: no last error, nothing waiting, no complete
// listing under way (its deletes show only when it ends, and rounds that go on with it emit
// nothing).
func (s *scenario) settled(ctx context.Context, eng *core.Engine) bool {
	for _, k := range s.allKeys() {
		ki, err := eng.Inspect(ctx, k)
		if err != nil || ki.LastError != nil || ki.OutboxPending > 0 || ki.Parked > 0 || ki.Held > 0 || len(ki.Listings) > 0 {
			return false
		}
	}
	return true
}

// resending returns a client of its own to the run's Redis whose script calls are, at
// ResendRate, sent a second time right after the first, as go-redis does after a read timeout
// when the first attempt ran all the same: the caller sees the second reply.
func (s *scenario) resending(c redis.UniversalClient) (redis.UniversalClient, error) {
	// No socket timeouts: a reply lost to one leaves a write's outcome unknown to the caller,
	// which the recorder would take for not written (an ack or commit that did happen goes
	// unrecorded). The run's lost replies are its re-sends, whose outcome the caller sees.
	var own redis.UniversalClient
	switch c := c.(type) {
	case *redis.Client:
		o := *c.Options()
		o.MaintNotificationsConfig = nil // the original's; the copy makes its own
		o.ReadTimeout, o.WriteTimeout = -1, -1
		own = redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *c.Options()
		o.ReadTimeout, o.WriteTimeout = -1, -1
		own = redis.NewClusterClient(&o)
	default:
		return nil, fmt.Errorf("chaos: cannot copy a %T", c)
	}
	own.AddHook(resendHook{s})
	return own, nil
}

// resendHook re-sends script calls (see resending).
type resendHook struct{ s *scenario }

func (h resendHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h resendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h resendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); name != "evalsha" && name != "eval" || err != nil || h.s.o.ResendRate < 0 {
			return err
		}
		h.s.mu.Lock()
		again := h.s.rng.Float64() < h.s.o.ResendRate
		if again {
			h.s.res.Resends++
		}
		h.s.mu.Unlock()
		if again {
			return next(ctx, cmd)
		}
		return err
	}
}

// clearPrefix removes every key under prefix (on each master of a cluster).
func clearPrefix(ctx context.Context, c redis.UniversalClient, prefix string) error {
	clear := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := n.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, clear)
	} else if n, ok := c.(*redis.Client); ok {
		err = clear(ctx, n)
	} else {
		err = fmt.Errorf("a %T client", c)
	}
	if err != nil {
		return fmt.Errorf("chaos: clear the keys of %s: %w", prefix, err)
	}
	return nil
}
