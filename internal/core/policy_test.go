package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// policyEngine is w.engine with a random number of 0.99 instead of 0.5, so jitter and backoff
// show: a symmetric jitter at 0.5 is exactly the interval.
func policyEngine(t *testing.T, w *world, p watukuytype.Poller) *core.Engine {
	t.Helper()
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Clock: w.clock.Now, Rand: func() float64 { return 0.99 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(p); err != nil {
		t.Fatal(err)
	}
	if err := eng.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return eng
}

// TestSchedulePolicy: NoJitter makes the interval exact while Jitter 0 keeps the default
// spread; Backoff spaces failed cycles; Failures and ProbeEvery open the circuit and time
// its probe.
func TestSchedulePolicy(t *testing.T) {
	fail := errors.New("connection reset")
	for _, tc := range []struct {
		name     string
		mod      func(p *watukuytype.Poller)
		failures int           // failed cycles before the checked one, a minute apart
		fail     bool          // the checked cycle fails
		nextDue  time.Duration // after the checked cycle
		circuit  watukuytype.CircuitState
	}{
		{name: "jitter 0 is the default spread", mod: func(*watukuytype.Poller) {},
			nextDue: 1098 * time.Millisecond, circuit: watukuytype.CircuitClosed}, // 1s × (1 + 0.1×(2×0.99-1))
		{name: "NoJitter is exact", mod: func(p *watukuytype.Poller) { p.Schedule.NoJitter = true },
			nextDue: time.Second, circuit: watukuytype.CircuitClosed},
		{name: "the default backoff", mod: func(*watukuytype.Poller) {}, failures: 1, fail: true,
			nextDue: 1980 * time.Millisecond, circuit: watukuytype.CircuitClosed}, // second failure: 0.99 × 1s×2
		{name: "a backoff of its own", mod: func(p *watukuytype.Poller) { p.Backoff = watukuytype.Backoff{Base: 10 * time.Second, Factor: 3} },
			failures: 1, fail: true, nextDue: 29700 * time.Millisecond, circuit: watukuytype.CircuitClosed}, // 0.99 × 10s×3
		{name: "the backoff's max", mod: func(p *watukuytype.Poller) {
			p.Backoff = watukuytype.Backoff{Base: 10 * time.Second, Max: 12 * time.Second}
		},
			failures: 1, fail: true, nextDue: 11880 * time.Millisecond, circuit: watukuytype.CircuitClosed}, // 0.99 × 12s
		{name: "failures and probeEvery", mod: func(p *watukuytype.Poller) { p.Failures, p.ProbeEvery = 2, 7*time.Minute },
			failures: 1, fail: true, nextDue: 7 * time.Minute, circuit: watukuytype.CircuitOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(10)
			f.putN(3)
			eng := policyEngine(t, w, w.poller(f.fetch, tc.mod))
			f.setErr(fail)
			for range tc.failures {
				w.run(eng)
				w.clock.Advance(time.Minute) // past any backoff of these cases
			}
			if !tc.fail {
				f.setErr(nil)
			}
			now := w.clock.Now()
			w.run(eng)
			ki := w.inspect(eng)
			if got := w.due().Sub(now); got != tc.nextDue || ki.Circuit != tc.circuit {
				t.Errorf("due in %v, circuit %s; want %v, %s", got, ki.Circuit, tc.nextDue, tc.circuit)
			}
		})
	}
}

// TestSchedulePolicyChecks: Register refuses a jitter together with NoJitter and a backoff
// that shrinks, naming the field.
func TestSchedulePolicyChecks(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	for _, tc := range []struct {
		name, field string
		mod         func(p *watukuytype.Poller)
	}{
		{"jitter and NoJitter", "schedule.jitter", func(p *watukuytype.Poller) { p.Schedule.Jitter, p.Schedule.NoJitter = 0.2, true }},
		{"factor below 1", "backoff", func(p *watukuytype.Poller) { p.Backoff.Factor = 0.5 }},
		{"max below base", "backoff", func(p *watukuytype.Poller) { p.Backoff = watukuytype.Backoff{Base: time.Minute, Max: time.Second} }},
		{"negative failures", "failures", func(p *watukuytype.Poller) { p.Failures = -1 }},
	} {
		eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Clock: w.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		var ce *watukuytype.ConfigError
		if err := eng.Register(w.poller(f.fetch, tc.mod)); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: got %v, want a config error about %s", tc.name, err, tc.field)
		}
	}
	if b, err := core.CycleBackoff(watukuytype.Backoff{Base: 20 * time.Minute}); err != nil || b != (watukuytype.Backoff{Base: 20 * time.Minute, Factor: 2, Max: 20 * time.Minute}) {
		t.Errorf("a base above the default max: %+v, %v", b, err)
	}
}
