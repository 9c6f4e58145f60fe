package metrics

import "github.com/prometheus/client_golang/prometheus"

// Reload results, the values of watukuy_config_reloads_total's result label.
const (
	ReloadOK    = "ok"
	ReloadError = "error"
)

// NewReloads creates watukuy_config_reloads_total{result} (config file reloads on SIGHUP: ok,
// or error when the running config was kept or its new keys could not be written), both
// series at zero, and registers it on reg (nil registers nothing).
func NewReloads(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "config_reloads_total",
		Help: "Config file reloads (SIGHUP) by result: ok, or error (the running config was kept, or the new pollers' keys could not be written)."},
		[]string{"result"})
	c.WithLabelValues(ReloadOK)
	c.WithLabelValues(ReloadError)
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}
