package metrics

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watukuy/watukuy/watukuytype"
)

var (
	orders = watukuytype.Key{Poller: "orders", Partition: "t_1"}
	users  = watukuytype.Key{Poller: "users"}
)

func TestCycleOutcomes(t *testing.T) {
	m := New(prometheus.NewRegistry())
	h := m.Hooks(watukuytype.Hooks{})
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.Ran, Events: 3}, 120*time.Millisecond)
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.Ran, Events: 2}, 80*time.Millisecond)
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.SkippedNotDue}, time.Millisecond)
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.SkippedLeased}, time.Millisecond)
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.SkippedPaused}, time.Millisecond)
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.Failed, Err: errors.New("boom")}, time.Second)
	h.OnCycle(watukuytype.CycleReport{Key: users, Outcome: watukuytype.Ran, Events: 7}, time.Second)

	for outcome, want := range map[string]float64{"ran": 2, "skipped_not_due": 1, "skipped_leased": 1, "skipped_paused": 1, "failed": 1} {
		if got := testutil.ToFloat64(m.cycles.WithLabelValues("orders", outcome)); got != want {
			t.Errorf("cycles{orders,%s} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(m.cycles.WithLabelValues("users", "ran")); got != 1 {
		t.Errorf("cycles{users,ran} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.eventsEmitted.WithLabelValues("orders")); got != 5 {
		t.Errorf("events_emitted{orders} = %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.eventsEmitted.WithLabelValues("users")); got != 7 {
		t.Errorf("events_emitted{users} = %v, want 7", got)
	}
	// One histogram series per poller; the partition is never a label.
	if n := testutil.CollectAndCount(m.cycleDuration, "watukuy_cycle_duration_seconds"); n != 2 {
		t.Errorf("cycle_duration series = %d, want 2", n)
	}
}

func TestCycleDuration(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.Hooks(watukuytype.Hooks{}).OnCycle(watukuytype.CycleReport{Key: users, Outcome: watukuytype.Ran}, 750*time.Millisecond)
	if err := testutil.CollectAndCompare(m.cycleDuration, strings.NewReader(`
# HELP watukuy_cycle_duration_seconds Wall time of a cycle, ran or skipped.
# TYPE watukuy_cycle_duration_seconds histogram
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.005"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.01"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.025"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.05"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.1"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.25"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="0.5"} 0
watukuy_cycle_duration_seconds_bucket{poller="users",le="1"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="2.5"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="5"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="10"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="30"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="60"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="120"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="300"} 1
watukuy_cycle_duration_seconds_bucket{poller="users",le="+Inf"} 1
watukuy_cycle_duration_seconds_sum{poller="users"} 0.75
watukuy_cycle_duration_seconds_count{poller="users"} 1
`), "watukuy_cycle_duration_seconds"); err != nil {
		t.Error(err)
	}
}

func TestUnknownOutcome(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.Hooks(watukuytype.Hooks{}).OnCycle(watukuytype.CycleReport{Key: users, Outcome: watukuytype.Outcome(42)}, 0)
	if got := testutil.ToFloat64(m.cycles.WithLabelValues("users", "unknown")); got != 1 {
		t.Errorf("cycles{users,unknown} = %v, want 1", got)
	}
}

func TestDeliveryAndParking(t *testing.T) {
	m := New(prometheus.NewRegistry())
	h := m.Hooks(watukuytype.Hooks{})
	h.OnDelivered(orders, watukuytype.Event{ID: "e1"}, 3*time.Millisecond)
	h.OnDelivered(orders, watukuytype.Event{ID: "e2"}, 2*time.Second)
	h.OnDelivered(orders, watukuytype.Event{ID: "e3"}, 2*time.Hour)
	h.OnDelivered(orders, watukuytype.Event{ID: "e4"}, -time.Second) // clock skew: counted as 0
	h.OnParked(orders, "poison", "e5", "handler: 500")
	h.OnParked(orders, "invalid", "inv_1", "missing id")
	h.OnParked(orders, "invalid", "inv_2", "missing id")

	if got := testutil.ToFloat64(m.delivered.WithLabelValues("orders")); got != 4 {
		t.Errorf("delivered = %v, want 4", got)
	}
	if got := testutil.ToFloat64(m.parked.WithLabelValues("orders", "poison")); got != 1 {
		t.Errorf("parked{poison} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.parked.WithLabelValues("orders", "invalid")); got != 2 {
		t.Errorf("parked{invalid} = %v, want 2", got)
	}
	want := `
# HELP watukuy_delivery_latency_seconds Time from an event's observation to its ack.
# TYPE watukuy_delivery_latency_seconds histogram
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.005"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.01"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.025"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.05"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.1"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.25"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="0.5"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="1"} 2
watukuy_delivery_latency_seconds_bucket{poller="orders",le="2.5"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="5"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="10"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="30"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="60"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="120"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="300"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="600"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="1800"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="3600"} 3
watukuy_delivery_latency_seconds_bucket{poller="orders",le="+Inf"} 4
watukuy_delivery_latency_seconds_sum{poller="orders"} 7202.003
watukuy_delivery_latency_seconds_count{poller="orders"} 4
`
	if err := testutil.CollectAndCompare(m.deliveryLatency, strings.NewReader(want), "watukuy_delivery_latency_seconds"); err != nil {
		t.Error(err)
	}
}

// Every handler attempt counts by its sink and result and observes its duration: two failed
// attempts and a success are 2 error and 1 ok, whatever became of the event.
func TestHandlerAttempts(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.SetSinks(map[string]string{"orders": "nats"})
	h := m.Hooks(watukuytype.Hooks{})
	for _, a := range []struct {
		result watukuytype.HandlerResult
		d      time.Duration
	}{
		{watukuytype.HandlerError, 20 * time.Millisecond},
		{watukuytype.HandlerError, 30 * time.Millisecond},
		{watukuytype.HandlerOK, 4 * time.Millisecond},
		{watukuytype.HandlerTimeout, 10 * time.Second},
		{watukuytype.HandlerFenced, -time.Millisecond}, // clock skew: observed as 0
	} {
		var err error
		if a.result != watukuytype.HandlerOK {
			err = errors.New(string(a.result))
		}
		h.OnHandlerAttempt(orders, watukuytype.Event{ID: "e1"}, 1, a.d, a.result, err)
	}
	for result, want := range map[string]float64{"ok": 1, "error": 2, "panic": 0, "timeout": 1, "fenced": 1} {
		if got := testutil.ToFloat64(m.handlerAttempts.WithLabelValues("orders", "nats", result)); got != want {
			t.Errorf("handler_attempts_total{result=%s} = %v, want %v", result, got, want)
		}
	}
	if err := testutil.CollectAndCompare(m.handlerDuration, strings.NewReader(`
# HELP watukuy_handler_duration_seconds Duration of one call of the handler or sink, whatever its result, by sink.
# TYPE watukuy_handler_duration_seconds histogram
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.001"} 1
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.0025"} 1
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.005"} 2
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.01"} 2
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.025"} 3
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.05"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.1"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.25"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="0.5"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="1"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="2.5"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="5"} 4
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="10"} 5
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="30"} 5
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="60"} 5
watukuy_handler_duration_seconds_bucket{poller="orders",sink="nats",le="+Inf"} 5
watukuy_handler_duration_seconds_sum{poller="orders",sink="nats"} 10.054
watukuy_handler_duration_seconds_count{poller="orders",sink="nats"} 5
`), "watukuy_handler_duration_seconds"); err != nil {
		t.Error(err)
	}
}

// A poller whose sink no one named (a Go handler) counts under sink="handler".
func TestHandlerAttemptsOfAGoHandler(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.SetSinks(map[string]string{"orders": "postgres"})
	m.Hooks(watukuytype.Hooks{}).OnHandlerAttempt(users, watukuytype.Event{ID: "e1"}, 1, time.Millisecond, watukuytype.HandlerOK, nil)
	if got := testutil.ToFloat64(m.handlerAttempts.WithLabelValues("users", SinkHandler, "ok")); got != 1 {
		t.Errorf("handler_attempts_total{users,handler,ok} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.handlerAttempts, "watukuy_handler_attempts_total"); n != len(watukuytype.HandlerResults()) {
		t.Errorf("%d series, want one per result of users' handler only", n)
	}
}

func TestFetchErrorsAndFailures(t *testing.T) {
	m := New(prometheus.NewRegistry())
	h := m.Hooks(watukuytype.Hooks{})
	h.OnFetch(orders, "live", 50*time.Millisecond, nil)
	h.OnFetch(orders, "live", 70*time.Millisecond, errors.New("502"))
	h.OnFetch(orders, "reconcile", time.Second, errors.New("timeout"))
	h.OnError(orders, "fetch", errors.New("502"))
	h.OnError(orders, "config", errors.New("bad cursor"))
	h.OnLeaseLost(orders, errors.New("lost"))
	h.OnCircuitOpen(orders, time.Now().Add(time.Minute), errors.New("502"))
	h.OnThrottled(orders, time.Now().Add(time.Minute))
	h.OnThrottled(users, time.Now().Add(time.Minute))

	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"fetch_errors{live}", m.fetchErrors.WithLabelValues("orders", "live"), 1},
		{"fetch_errors{reconcile}", m.fetchErrors.WithLabelValues("orders", "reconcile"), 1},
		{"errors{fetch}", m.errors.WithLabelValues("orders", "fetch"), 1},
		{"errors{config}", m.errors.WithLabelValues("orders", "config"), 1},
		{"errors{handler}", m.errors.WithLabelValues("orders", "handler"), 0},
		{"lease_lost", m.leaseLost.WithLabelValues("orders"), 1},
		{"circuit_opened", m.circuitOpened.WithLabelValues("orders"), 1},
		{"throttled{orders}", m.throttled.WithLabelValues("orders"), 1},
		{"throttled{users}", m.throttled.WithLabelValues("users"), 1},
	}
	for _, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	// Histogram per (poller, lane): live and reconcile.
	if n := testutil.CollectAndCount(m.fetchDuration, "watukuy_fetch_duration_seconds"); n != 2 {
		t.Errorf("fetch_duration series = %d, want 2", n)
	}
}

// The first hook call for a poller creates its labelled counters at zero, so rate() and
// increase() see a series before the first failure.
func TestSeriesInitialisedAtZero(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.Hooks(watukuytype.Hooks{}).OnDelivered(orders, watukuytype.Event{}, time.Millisecond)
	if n := testutil.CollectAndCount(m.cycles, "watukuy_cycles_total"); n != len(outcomes) {
		t.Errorf("cycles series = %d, want %d", n, len(outcomes))
	}
	if n := testutil.CollectAndCount(m.errors, "watukuy_errors_total"); n != len(phases) {
		t.Errorf("errors series = %d, want %d", n, len(phases))
	}
	if n := testutil.CollectAndCount(m.handlerAttempts, "watukuy_handler_attempts_total"); n != len(watukuytype.HandlerResults()) {
		t.Errorf("handler attempts series = %d, want %d", n, len(watukuytype.HandlerResults()))
	}
	if got := testutil.ToFloat64(m.cycles.WithLabelValues("orders", "failed")); got != 0 {
		t.Errorf("cycles{failed} = %v, want 0", got)
	}
	m.Init("users", "orders")
	if n := testutil.CollectAndCount(m.parked, "watukuy_events_parked_total"); n != 2*len(kinds) {
		t.Errorf("parked series = %d, want %d", n, 2*len(kinds))
	}
}

func TestHooksChainUserHooks(t *testing.T) {
	var calls []string
	user := watukuytype.Hooks{
		OnCycle: func(r watukuytype.CycleReport, d time.Duration) { calls = append(calls, "cycle:"+r.Key.Poller) },
		OnFetch: func(k watukuytype.Key, lane watukuytype.Lane, d time.Duration, err error) {
			calls = append(calls, "fetch:"+string(lane))
		},
		OnDelivered: func(k watukuytype.Key, ev watukuytype.Event, l time.Duration) {
			calls = append(calls, "delivered:"+ev.ID)
		},
		OnHandlerAttempt: func(k watukuytype.Key, ev watukuytype.Event, attempt int, d time.Duration, result watukuytype.HandlerResult, err error) {
			calls = append(calls, fmt.Sprintf("attempt:%s:%d:%s", ev.ID, attempt, result))
		},
		OnParked:      func(k watukuytype.Key, kind, id, reason string) { calls = append(calls, "parked:"+kind) },
		OnCircuitOpen: func(k watukuytype.Key, until time.Time, err error) { calls = append(calls, "circuit") },
		OnThrottled:   func(k watukuytype.Key, until time.Time) { calls = append(calls, "throttled") },
		OnLeaseLost:   func(k watukuytype.Key, err error) { calls = append(calls, "leaseLost") },
		OnError:       func(k watukuytype.Key, phase string, err error) { calls = append(calls, "error:"+phase) },
		OnDueRepaired: func(k watukuytype.Key) { calls = append(calls, "dueRepaired") },
	}
	m := New(prometheus.NewRegistry())
	h := m.Hooks(user)
	h.OnCycle(watukuytype.CycleReport{Key: orders, Outcome: watukuytype.Ran}, time.Millisecond)
	h.OnFetch(orders, "live", time.Millisecond, nil)
	h.OnDelivered(orders, watukuytype.Event{ID: "e1"}, time.Millisecond)
	h.OnHandlerAttempt(orders, watukuytype.Event{ID: "e1"}, 2, time.Millisecond, watukuytype.HandlerError, errors.New("x"))
	h.OnParked(orders, "poison", "e1", "x")
	h.OnCircuitOpen(orders, time.Now(), errors.New("x"))
	h.OnThrottled(orders, time.Now())
	h.OnLeaseLost(orders, errors.New("x"))
	h.OnError(orders, "store", errors.New("x"))
	h.OnDueRepaired(orders)

	want := "cycle:orders fetch:live delivered:e1 attempt:e1:2:error parked:poison circuit throttled leaseLost error:store dueRepaired"
	if got := strings.Join(calls, " "); got != want {
		t.Errorf("user hooks = %q, want %q", got, want)
	}
	// The metrics were updated too.
	if got := testutil.ToFloat64(m.errors.WithLabelValues("orders", "store")); got != 1 {
		t.Errorf("errors{store} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.delivered.WithLabelValues("orders")); got != 1 {
		t.Errorf("delivered = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.dueRepaired.WithLabelValues("orders")); got != 1 {
		t.Errorf("due repaired = %v, want 1", got)
	}
}

// Hooks with no user hooks never call a nil function; every hook is set.
func TestHooksWithoutChain(t *testing.T) {
	h := New(nil).Hooks(watukuytype.Hooks{})
	if h.OnCycle == nil || h.OnFetch == nil || h.OnDelivered == nil || h.OnHandlerAttempt == nil || h.OnParked == nil ||
		h.OnCircuitOpen == nil || h.OnThrottled == nil || h.OnLeaseLost == nil || h.OnError == nil || h.OnDueRepaired == nil || h.OnBudget == nil {
		t.Fatal("a hook is nil")
	}
	h.OnCycle(watukuytype.CycleReport{Key: orders}, 0)
	h.OnFetch(orders, "live", 0, nil)
	h.OnDelivered(orders, watukuytype.Event{}, 0)
	h.OnHandlerAttempt(orders, watukuytype.Event{}, 1, 0, watukuytype.HandlerOK, nil)
	h.OnParked(orders, "poison", "", "")
	h.OnCircuitOpen(orders, time.Time{}, nil)
	h.OnThrottled(orders, time.Time{})
	h.OnLeaseLost(orders, nil)
	h.OnError(orders, "fetch", nil)
	h.OnDueRepaired(orders)
	h.OnBudget(orders, "shop", "live", 0, false)
}

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	defer func() {
		if recover() == nil {
			t.Error("registering twice on one registry did not panic")
		}
	}()
	New(reg)
}

// Hooks run concurrently from many cycles (checked under -race).
func TestHooksConcurrent(t *testing.T) {
	m := New(prometheus.NewRegistry())
	h := m.Hooks(watukuytype.Hooks{})
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			k := watukuytype.Key{Poller: []string{"a", "b"}[i%2]}
			for range 100 {
				h.OnCycle(watukuytype.CycleReport{Key: k, Outcome: watukuytype.Ran, Events: 1}, time.Millisecond)
				h.OnDelivered(k, watukuytype.Event{}, time.Millisecond)
			}
		}()
	}
	for range 8 {
		<-done
	}
	if got := testutil.ToFloat64(m.eventsEmitted.WithLabelValues("a")) + testutil.ToFloat64(m.eventsEmitted.WithLabelValues("b")); got != 800 {
		t.Errorf("events emitted = %v, want 800", got)
	}
}

// watukuy_build_info names the build in its labels.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "watukuy_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["goversion"] != runtime.Version() || labels["version"] == "" {
			t.Fatalf("watukuy_build_info %v = %v", labels, m.GetGauge().GetValue())
		}
		return
	}
	t.Fatal("watukuy_build_info is not exported")
}
