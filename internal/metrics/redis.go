package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Redis counts what happened to the process's Redis: data losses the data watcher noticed and
// outages (Redis unreachable).
type Redis struct {
	DataLoss prometheus.Counter
	Outages  prometheus.Counter
	// OutageSeconds sums the duration of the outages that ended.
	OutageSeconds prometheus.Counter
	// Up is 0 during an outage, 1 otherwise.
	Up prometheus.Gauge
}

// NewRedis creates the collectors and registers them on reg (nil registers nothing).
func NewRedis(reg prometheus.Registerer) *Redis {
	r := &Redis{
		DataLoss: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "redis_data_loss_total",
			Help: "Times this process found that Redis had lost watukuy's data (restarted empty, flushed, failed over to an empty replica) and registered its pollers again."}),
		Outages: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "redis_outages_total",
			Help: "Times Redis stopped answering this process (the first failed call of an outage)."}),
		OutageSeconds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "redis_outage_seconds_total",
			Help: "Total duration of the Redis outages this process saw end."}),
		Up: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "redis_up",
			Help: "0 while Redis does not answer this process, 1 otherwise."}),
	}
	r.Up.Set(1)
	if reg != nil {
		reg.MustRegister(r.DataLoss, r.Outages, r.OutageSeconds, r.Up)
	}
	return r
}
