package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/watukuy/watukuy/watukuytype"
)

// The per-poller settings the alert rules read: probeEvery and schedule.max with the engine's
// defaults filled in, replaced as a whole by each call, so a poller a reload removed loses
// its series.
func TestSetPollers(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	names := []string{"watukuy_poller_probe_every_seconds", "watukuy_poller_schedule_max_seconds"}
	compare := func(step, want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Errorf("%s: %v", step, err)
		}
	}
	const help = `
# HELP watukuy_poller_probe_every_seconds The poller's circuit.probeEvery: how long an open circuit waits for its probe (schedule.max by default).
# TYPE watukuy_poller_probe_every_seconds gauge
`
	const helpMax = `
# HELP watukuy_poller_schedule_max_seconds The poller's schedule.max: the longest interval between two of a key's cycles.
# TYPE watukuy_poller_schedule_max_seconds gauge
`
	compare("before SetPollers", "")

	m.SetPollers(
		valid(watukuytype.Poller{Name: "orders", Schedule: watukuytype.Schedule{Min: time.Second, Max: 10 * time.Minute}, ProbeEvery: 2 * time.Minute}),
		valid(watukuytype.Poller{Name: "users"}),                                                       // every default: schedule.max 5m, probeEvery = schedule.max
		valid(watukuytype.Poller{Name: "slow", Schedule: watukuytype.Schedule{Min: 20 * time.Minute}}), // schedule.max defaults to no less than min
	)
	compare("three pollers", help+`
watukuy_poller_probe_every_seconds{poller="orders"} 120
watukuy_poller_probe_every_seconds{poller="slow"} 1200
watukuy_poller_probe_every_seconds{poller="users"} 300
`+helpMax+`
watukuy_poller_schedule_max_seconds{poller="orders"} 600
watukuy_poller_schedule_max_seconds{poller="slow"} 1200
watukuy_poller_schedule_max_seconds{poller="users"} 300
`)

	// A reload: orders changed, users removed, slow kept, billing added.
	m.SetPollers(
		valid(watukuytype.Poller{Name: "orders", Schedule: watukuytype.Schedule{Max: 10 * time.Minute}, ProbeEvery: 30 * time.Minute}),
		valid(watukuytype.Poller{Name: "slow", Schedule: watukuytype.Schedule{Min: 20 * time.Minute}}),
		valid(watukuytype.Poller{Name: "billing", Schedule: watukuytype.Schedule{Max: time.Hour}}),
	)
	compare("after a reload", help+`
watukuy_poller_probe_every_seconds{poller="billing"} 3600
watukuy_poller_probe_every_seconds{poller="orders"} 1800
watukuy_poller_probe_every_seconds{poller="slow"} 1200
`+helpMax+`
watukuy_poller_schedule_max_seconds{poller="billing"} 3600
watukuy_poller_schedule_max_seconds{poller="orders"} 600
watukuy_poller_schedule_max_seconds{poller="slow"} 1200
`)

	m.SetPollers(watukuytype.Poller{Name: "nofetch"}) // not a poller the engine would run
	compare("an invalid poller", "")
}

// valid is p with what a poller needs besides its settings (Register would refuse it).
func valid(p watukuytype.Poller) watukuytype.Poller {
	p.Fetch = func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
		return watukuytype.Page{}, nil
	}
	p.Handler = func(context.Context, watukuytype.Event) error { return nil }
	return p
}

// openKeys is a KeySource whose keys and error a test changes between scrapes.
type openKeys struct {
	keys []watukuytype.KeyInfo
	err  error
}

func (o *openKeys) source(context.Context) ([]watukuytype.KeyInfo, error) { return o.keys, o.err }

// failedAt is a lastError of a failure at t.
func failedAt(t time.Time) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"code":"FETCH","phase":"fetch","message":"503","at":%q}`, t.UTC().Format(time.RFC3339Nano)))
}

// scrapeOpenSince scrapes c and returns watukuy_circuit_open_since_seconds by "poller|partition".
func scrapeOpenSince(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "watukuy_circuit_open_since_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			out[label(mt, "poller")+"|"+label(mt, "partition")] = mt.GetGauge().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func unix(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

// watukuy_circuit_open_since_seconds is when the circuit opened: the opening failure's time,
// kept through failed probes (which write later failures), dropped when the circuit closes,
// the key goes or its failures restart; a collector that first sees the circuit after a
// failed probe can only say since that probe.
func TestCircuitOpenSince(t *testing.T) {
	t0 := testNow
	now := t0.Add(10 * time.Second)
	keys := &openKeys{}
	c := newKeyCollector(keys.source, func() time.Time { return now })
	check := func(step string, want map[string]float64) {
		t.Helper()
		got := scrapeOpenSince(t, c)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: circuit_open_since = %v, want %v", step, got, want)
		}
	}

	// orders|a opened at t0 (its fifth failure); orders|b is open with a lastError without a
	// time; orders|c is closed.
	keys.keys = []watukuytype.KeyInfo{
		{Poller: "orders", Partition: "a", Circuit: watukuytype.CircuitOpen, Failures: 5, LastError: failedAt(t0)},
		{Poller: "orders", Partition: "b", Circuit: watukuytype.CircuitOpen, Failures: 5, LastError: json.RawMessage(`{"code":"FETCH"}`)},
		{Poller: "orders", Partition: "c", Circuit: watukuytype.CircuitClosed},
	}
	check("opened", map[string]float64{"orders|a": unix(t0), "orders|b": unix(now)})

	// Both probes failed at t0+5m: the opening time stays.
	now = t0.Add(5*time.Minute + 10*time.Second)
	probe := t0.Add(5 * time.Minute)
	keys.keys[0].Failures, keys.keys[0].LastError = 6, failedAt(probe)
	keys.keys[1].Failures, keys.keys[1].LastError = 6, failedAt(probe)
	check("after a failed probe", map[string]float64{"orders|a": unix(t0), "orders|b": unix(t0.Add(10 * time.Second))})

	// A process that starts now knows only the probe's failure.
	late := newKeyCollector(keys.source, func() time.Time { return now })
	if got := scrapeOpenSince(t, late); got["orders|a"] != unix(probe) {
		t.Errorf("a collector started after the probe: orders|a since %v, want the probe's failure %v", got["orders|a"], unix(probe))
	}

	// A failed read keeps what the collector knows of the keys it could not list.
	keys.keys, keys.err = keys.keys[:1], errors.New("redis: i/o timeout")
	check("a partial read", map[string]float64{"orders|a": unix(t0)})
	keys.keys, keys.err = []watukuytype.KeyInfo{
		{Poller: "orders", Partition: "a", Circuit: watukuytype.CircuitOpen, Failures: 6, LastError: failedAt(probe)},
		{Poller: "orders", Partition: "b", Circuit: watukuytype.CircuitOpen, Failures: 6, LastError: failedAt(probe)},
	}, nil
	check("read again", map[string]float64{"orders|a": unix(t0), "orders|b": unix(t0.Add(10 * time.Second))})

	// a's probe succeeded: closed, forgotten. b was closed and opened again between two
	// scrapes: its failures restarted, so does its time.
	now = t0.Add(20 * time.Minute)
	reopened := t0.Add(19 * time.Minute)
	keys.keys[0] = watukuytype.KeyInfo{Poller: "orders", Partition: "a", Circuit: watukuytype.CircuitClosed}
	keys.keys[1].Failures, keys.keys[1].LastError = 5, failedAt(reopened)
	check("a closed, b reopened", map[string]float64{"orders|b": unix(reopened)})

	// a opens again: from its new opening, not the old one.
	now = t0.Add(31 * time.Minute)
	keys.keys[0] = watukuytype.KeyInfo{Poller: "orders", Partition: "a", Circuit: watukuytype.CircuitOpen, Failures: 5, LastError: failedAt(t0.Add(30 * time.Minute))}
	check("a opened again", map[string]float64{"orders|a": unix(t0.Add(30 * time.Minute)), "orders|b": unix(reopened)})

	// b's partition was deleted: a successful read no longer lists it, and it is forgotten; a
	// key of that name that turns up open again starts afresh.
	keys.keys = keys.keys[:1]
	check("b gone", map[string]float64{"orders|a": unix(t0.Add(30 * time.Minute))})
	now = t0.Add(40 * time.Minute)
	keys.keys = append(keys.keys, watukuytype.KeyInfo{Poller: "orders", Partition: "b", Circuit: watukuytype.CircuitOpen, Failures: 9, LastError: failedAt(t0.Add(39 * time.Minute))})
	check("b back", map[string]float64{"orders|a": unix(t0.Add(30 * time.Minute)), "orders|b": unix(t0.Add(39 * time.Minute))})

	if len(c.opened) != 2 {
		t.Errorf("the collector remembers %d open circuits, want 2", len(c.opened))
	}
}
