// Package watukuytest helps programs that embed watukuy test their pollers: an engine on an
// embedded miniredis with a clock the test moves, and RunChaos, which puts your pollers and
// handlers through the kill points, stop-the-world pauses, handler failures and competing
// instances, then checks the guarantees (like River's rivertest).
package watukuytest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/watukuytype"
)

// Clock is the embedded Redis server's clock (TIME), which leases, due times and throttle
// windows follow. It moves only when the test moves it.
type Clock struct {
	c *fakeclock.Clock
	m *miniredis.Miniredis
}

// Now returns the server's time.
func (c *Clock) Now() time.Time { return c.c.Now() }

// Advance moves the server's time forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.c.Advance(d)
	c.m.SetTime(c.Now())
}

// Env is an engine on its own embedded Redis.
type Env struct {
	Engine *watukuy.Engine
	Redis  *redis.Client
	Mini   *miniredis.Miniredis
	Clock  *Clock
	tb     testing.TB
}

// New starts an engine on a fresh miniredis (closed when the test ends) and registers the
// pollers; a bad definition fails the test.
func New(tb testing.TB, pollers ...watukuytype.Poller) *Env {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	clk := &Clock{c: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), m: m}
	m.SetTime(clk.Now())
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, InstanceID: "watukuytest"})
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range pollers {
		if err := eng.Register(p); err != nil {
			tb.Fatal(err)
		}
	}
	return &Env{Engine: eng, Redis: rdb, Mini: m, Clock: clk, tb: tb}
}

// Tick runs every due cycle once and fails the test on an engine error (cycle errors are in
// the report).
func (e *Env) Tick() watukuytype.TickReport {
	e.tb.Helper()
	rep, err := e.Engine.Tick(context.Background(), 30*time.Second)
	if err != nil {
		e.tb.Fatal(err)
	}
	return rep
}

// Settle advances the clock past every interval and ticks until a round emits and delivers
// nothing (at most rounds times).
func (e *Env) Settle(rounds int) {
	e.tb.Helper()
	for i := 0; i < rounds; i++ {
		e.Clock.Advance(time.Hour)
		rep := e.Tick()
		if rep.Ran > 0 && rep.Events == 0 && rep.Delivered == 0 && len(rep.Errors) == 0 && rep.DeleteCandidates == 0 {
			return
		}
	}
	e.tb.Fatalf("still emitting after %d rounds", rounds)
}

// ChaosOptions configures RunChaos.
type ChaosOptions struct {
	// Seed makes the run's choices reproducible; Steps is how many rounds run (default 200).
	Seed  uint64
	Steps int
	// Between runs before each step: change your fake API there.
	Between func(step int)
	// Truth, when set, returns your fake API's ground truth per key, so the final state (G3)
	// and deletes (G6) are checked too.
	Truth func() map[watukuytype.Key]Truth
}

// Truth is one key's ground truth, as your fake API knows it.
type Truth struct {
	// Changes is every change the API made to the key's items, in order.
	Changes []Change
	// Final maps each live identity to its version at the end.
	Final map[string]int
	// Project, when set, is what a poller without a version sees of an item (its
	// fingerprint's fields), and Content each live identity's final content as Project sees
	// it: the final state is then compared by content, since an update that leaves the
	// content as it was emits nothing.
	Project func(item json.RawMessage) string
	Content map[string]string
}

// Change is one change of an item. The checks tell changes apart by identity and version, so
// an item created again after a delete goes on from its last version rather than starting over.
type Change struct {
	ID      string // the item's identity
	Version int    // its version after the change
	Deleted bool   // the change deleted it
}

// Report is what a chaos run found.
type Report struct {
	Deliveries     int     // handler calls that succeeded
	UniqueEvents   int     // distinct event ids among them
	DuplicateRatio float64 // deliveries per unique event, minus one
	Commits        int     // commits the engines made
	// Violations maps a guarantee (G1…G9) to its violations; NotMeasured lists the ones the
	// run had no data for (G3 and G6 without a Truth).
	Violations  map[string][]Violation
	NotMeasured map[string]bool
	lines       []string
}

// Violation is one breach of a guarantee on one key.
type Violation struct {
	Key    watukuytype.Key
	Detail string
}

// Failed reports whether any guarantee was violated.
func (r Report) Failed() bool {
	for _, v := range r.Violations {
		if len(v) > 0 {
			return true
		}
	}
	return false
}

// Lines renders one line per guarantee: its violations (must be 0) and the first example.
func (r Report) Lines() []string { return r.lines }

// reportOf is the chaos suite's report as a Report.
func reportOf(cr chaos.Report) Report {
	r := Report{Deliveries: cr.Deliveries, UniqueEvents: cr.UniqueEvents, DuplicateRatio: cr.DuplicateRatio,
		Commits: cr.Commits, Violations: map[string][]Violation{}, NotMeasured: cr.NotMeasured, lines: cr.Lines()}
	for g, vs := range cr.Violations {
		for _, v := range vs {
			r.Violations[g] = append(r.Violations[g], Violation{Key: v.Key, Detail: v.Detail})
		}
	}
	return r
}

// truthOf is t as the chaos suite's checks take it.
func truthOf(t Truth) chaos.Truth {
	ct := chaos.Truth{Final: t.Final, Project: t.Project, Content: t.Content}
	for _, c := range t.Changes {
		ct.Changes = append(ct.Changes, fakeapi.Change{ID: c.ID, Version: c.Version, Deleted: c.Deleted})
	}
	return ct
}

// RunChaos runs your pollers on a fresh miniredis under two competing engines that are
// killed at every kill point, frozen past their lease and whose handlers fail at random,
// then lets everything settle and checks the guarantees. It fails the test when one is
// violated and returns the report.
func RunChaos(tb testing.TB, pollers []watukuytype.Poller, o ChaosOptions) Report {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	var truth func() map[watukuytype.Key]chaos.Truth
	if o.Truth != nil {
		truth = func() map[watukuytype.Key]chaos.Truth {
			out := map[watukuytype.Key]chaos.Truth{}
			for k, t := range o.Truth() {
				out[k] = truthOf(t)
			}
			return out
		}
	}
	res, err := chaos.Run(context.Background(), chaos.Options{Seed: o.Seed, Steps: o.Steps, Redis: rdb,
		Pollers: pollers, Between: o.Between, Truth: truth})
	if err != nil {
		tb.Fatal(err)
	}
	if res.Failed() {
		for _, l := range res.Lines() {
			tb.Log(l)
		}
		tb.Fatalf("guarantees violated (seed %d)", o.Seed)
	}
	return reportOf(res.Report)
}
