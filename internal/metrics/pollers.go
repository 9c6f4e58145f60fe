package metrics

import (
	"sync"
	"time"

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
// schedule.max, defaults filled as Engine.Register fills them) and deletes the series of the
// pollers it no longer runs. Call it with every poller each time the set changes: at start,
// after registering, and after a config reload. Until a process calls it, the alert rules use
// the defaults (probeEvery and schedule.max of 5 minutes) for every poller.
func (m *Metrics) SetPollers(ps ...watukuytype.Poller) {
	s := m.settings
	s.mu.Lock()
	defer s.mu.Unlock()
	now := map[string]bool{}
	for _, p := range ps {
		probeEvery, scheduleMax := effectiveSettings(p)
		s.probeEvery.WithLabelValues(p.Name).Set(probeEvery.Seconds())
		s.scheduleMax.WithLabelValues(p.Name).Set(scheduleMax.Seconds())
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

// effectiveSettings are p's probeEvery and schedule.max as the engine runs them: an unset
// schedule.max is the default (not less than schedule.min), an unset probeEvery is
// schedule.max.
func effectiveSettings(p watukuytype.Poller) (probeEvery, scheduleMax time.Duration) {
	scheduleMax = p.Schedule.Max
	if scheduleMax <= 0 {
		minimum := p.Schedule.Min
		if minimum <= 0 {
			minimum = core.DefaultScheduleMin
		}
		scheduleMax = max(core.DefaultScheduleMax, minimum)
	}
	probeEvery = p.ProbeEvery
	if probeEvery <= 0 {
		probeEvery = scheduleMax
	}
	return probeEvery, scheduleMax
}
