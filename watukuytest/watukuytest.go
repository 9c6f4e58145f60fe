// Package watukuytest helps programs that embed watukuy test their pollers: an engine on an
// embedded miniredis with a clock the test moves, and RunChaos, which puts your pollers and
// handlers through the kill points, stop-the-world pauses, handler failures and competing
// instances, then checks the guarantees (like River's rivertest).
package watukuytest

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/watukuytype"
)

// Clock is the embedded Redis server's clock (TIME), which leases, due times and throttle
// windows follow. It moves only when the test moves it.
type Clock struct {
	*fakeclock.Clock
	m *miniredis.Miniredis
}

// Advance moves the server's time forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.Clock.Advance(d)
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
func New(tb testing.TB, pollers ...watukuy.Poller) *Env {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	clk := &Clock{Clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), m: m}
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
func (e *Env) Tick() watukuy.TickReport {
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
	Truth func() map[watukuy.Key]chaos.Truth
}

// Report is what a chaos run found, one line per guarantee.
type Report = chaos.Report

// Truth is a key's ground truth: every change and the final versions.
type Truth = chaos.Truth

// RunChaos runs your pollers on a fresh miniredis under two competing engines that are
// killed at every kill point, frozen past their lease and whose handlers fail at random,
// then lets everything settle and checks the guarantees. It fails the test when one is
// violated and returns the report.
func RunChaos(tb testing.TB, pollers []watukuy.Poller, o ChaosOptions) Report {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	var truth func() map[watukuytype.Key]chaos.Truth
	if o.Truth != nil {
		truth = func() map[watukuytype.Key]chaos.Truth { return o.Truth() }
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
	return res.Report
}
