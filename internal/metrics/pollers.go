package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// pollerSettings are the per-poller gauges of the settings the alert rules compare the
// per-key gauges with, so each poller is held to its own thresholds:
//
//	watukuy_poller_probe_every_seconds   circuit.probeEvery: WatukuyCircuitOpen fires when the
//	                                     circuit has been open for more than twice it
//	watukuy_poller_schedule_max_seconds  schedule.max: WatukuyThrottledLong fires when a
//	                                     Retry-After window reaches further ahead than it
type pollerSettings struct {
	mu          sync.Mutex
	probeEvery  *prometheus.GaugeVec // poller
	scheduleMax *prometheus.GaugeVec // poller
	set         map[string]bool      // the pollers whose series exist
}

func newPollerSettings() *pollerSettings {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{"poller"})
	}
	return &pollerSettings{set: map[string]bool{},
		probeEvery: gauge("poller_probe_every_seconds",
			"The poller's circuit.probeEvery: how long an open circuit waits for its probe (schedule.max by default)."),
		scheduleMax: gauge("poller_schedule_max_seconds",
			"The poller's schedule.max: the longest interval between two of a key's cycles."),
	}
}

// SetPollers exports the settings of the pollers this process runs (their probeEvery and
// schedule.max, defaults filled as Engine.Register fills them; an invalid poller is left out) and deletes the series of the
// pollers it no longer runs. Call it with every poller each time the set changes: at start,
// after registering, and after a config reload. Until a process calls it, the alert rules use
// the defaults (probeEvery and schedule.max of 5 minutes) for every poller.
func (m *Metrics) SetPollers(ps ...watukuytype.Poller) {
	s := m.settings
	s.mu.Lock()
	defer s.mu.Unlock()
	now := map[string]bool{}
	for _, p := range ps {
		d, err := core.WithDefaults(p) // the settings as the engine runs them
		if err != nil {
			continue // not a poller the engine would run
		}
		s.probeEvery.WithLabelValues(p.Name).Set(d.ProbeEvery.Seconds())
		s.scheduleMax.WithLabelValues(p.Name).Set(d.Schedule.Max.Seconds())
		now[p.Name] = true
	}
	for name := range s.set {
		if !now[name] {
			s.probeEvery.DeleteLabelValues(name)
			s.scheduleMax.DeleteLabelValues(name)
		}
	}
	s.set = now
}
