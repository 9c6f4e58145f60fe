package pool

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/metrics"
	"github.com/watukuy/watukuy/watukuytype"
)

// Metrics are the engine's Prometheus metrics, the watukuy_* series the alert rules and the
// dashboard in deploy/ read: counters and histograms the engine's Hooks feed, and per-key
// gauges (outbox, freshness, parked, circuit, blocked delivery, …) read from Redis on each
// scrape. Make them before the engine, hand their Hooks to it, and name them in
// Options.Metrics:
//
//	reg := prometheus.NewRegistry()
//	m := pool.NewMetrics(reg)
//	eng, _ := watukuy.New(watukuy.Options{Redis: rdb, Hooks: m.Hooks(watukuy.Hooks{})})
//	p := pool.New(eng, pool.Options{Registry: reg, Metrics: m})
type Metrics struct {
	m   *metrics.Metrics
	reg prometheus.Registerer
}

// NewMetrics registers the engine's counters and histograms on reg (it panics if they are
// registered there already, like prometheus.MustRegister).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{m: metrics.New(reg), reg: reg}
}

// Hooks returns chain with the metrics' hooks: each hook records, then calls chain's. Pass
// it as watukuy.Options.Hooks.
func (m *Metrics) Hooks(chain watukuytype.Hooks) watukuytype.Hooks { return m.m.Hooks(chain) }

// SetPollers exports the settings the alert rules hold each poller's keys to
// (watukuy_poller_probe_every_seconds, watukuy_poller_schedule_max_seconds) for the pollers
// the process runs, and drops those of pollers it no longer runs. Call it with every poller
// registered on the engine, after registering them and after each change.
func (m *Metrics) SetPollers(ps ...watukuytype.Poller) { m.m.SetPollers(ps...) }

// SetSinks names pollers' sinks for the sink label of watukuy_handler_attempts_total and
// watukuy_handler_duration_seconds (e.g. {"orders": "nats"}); a poller left out is
// "handler". Call it before the pollers' first cycle.
func (m *Metrics) SetSinks(kinds map[string]string) { m.m.SetSinks(kinds) }

// watchKeys registers the per-key gauges of eng's keys on the metrics' registerer, read on
// each scrape; pollers names the pollers whose keys they export (nil: every registered one).
func (m *Metrics) watchKeys(eng *watukuy.Engine, pollers func() []string) {
	m.m.WatchKeys(m.reg, func(ctx context.Context) ([]watukuytype.KeyInfo, error) {
		if pollers == nil {
			return eng.InspectAll(ctx, "")
		}
		var out []watukuytype.KeyInfo
		for _, name := range pollers() {
			kis, err := eng.InspectAll(ctx, name)
			out = append(out, kis...)
			if err != nil {
				return out, err
			}
		}
		return out, nil
	})
}
