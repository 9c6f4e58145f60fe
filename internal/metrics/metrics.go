// Package metrics exports watukuy's Prometheus metrics. The counters and histograms are fed by
// the engine's hooks (Metrics.Hooks); the per-key gauges (outbox, parked, lag, circuit, ...) are
// read from Redis on every scrape (Metrics.WatchKeys).
//
// Labels are kept to the poller name (plus the lane, phase, outcome, result or kind where a
// metric says so); only the WatchKeys gauges carry the partition, because they describe one key each.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watukuy/watukuy/internal/buildinfo"
	"github.com/watukuy/watukuy/watukuytype"
)

const namespace = "watukuy"

// Cycle outcome label values, in watukuytype.Outcome order.
var outcomes = [...]string{
	watukuytype.Ran:           "ran",
	watukuytype.SkippedNotDue: "skipped_not_due",
	watukuytype.SkippedLeased: "skipped_leased",
	watukuytype.SkippedPaused: "skipped_paused",
	watukuytype.Failed:        "failed",
}

// The phases OnError reports and the kinds OnParked reports; they are initialised at zero for
// every poller seen, so rate() and increase() work from the first failure on.
var (
	phases = []string{"fetch", "handler", "store", "config"}
	kinds  = []string{"poison", "invalid"}
	lanes  = []watukuytype.Lane{watukuytype.LaneLive, watukuytype.LaneReconcile}
)

func outcomeLabel(o watukuytype.Outcome) string {
	if o >= 0 && int(o) < len(outcomes) {
		return outcomes[o]
	}
	return "unknown"
}

// Histogram buckets (seconds).
var (
	// A cycle drains, fetches a few pages and commits: milliseconds to minutes.
	cycleBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// One third-party request.
	fetchBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// From observation to ack: 5ms (delivered in the same cycle) to 1h (held, parked and retried).
	latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	// One call of a handler or sink: an in-process function to a slow webhook (10s timeout).
	handlerBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// A request's wait for its budget's token: none, a token interval, a key yielded until a
	// pause's end.
	budgetBuckets = []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
)

// Metrics holds watukuy's collectors.
type Metrics struct {
	cycles          *prometheus.CounterVec   // poller, outcome
	cycleDuration   *prometheus.HistogramVec // poller
	eventsEmitted   *prometheus.CounterVec   // poller
	delivered       *prometheus.CounterVec   // poller
	deliveryLatency *prometheus.HistogramVec // poller
	handlerAttempts *prometheus.CounterVec   // poller, sink, result
	handlerDuration *prometheus.HistogramVec // poller, sink
	parked          *prometheus.CounterVec   // poller, kind
	fetchDuration   *prometheus.HistogramVec // poller, lane
	fetchErrors     *prometheus.CounterVec   // poller, lane
	errors          *prometheus.CounterVec   // poller, phase
	leaseLost       *prometheus.CounterVec   // poller
	circuitOpened   *prometheus.CounterVec   // poller
	throttled       *prometheus.CounterVec   // poller
	dueRepaired     *prometheus.CounterVec   // poller
	budgetWait      *prometheus.HistogramVec // budget, lane
	budgetTokens    *prometheus.CounterVec   // budget, lane, result
	settings        *pollerSettings          // poller: SetPollers

	seen  sync.Map // poller name -> struct{}: pollers whose series were initialised at zero
	sinks sync.Map // poller name -> its sink's kind (SetSinks); absent: SinkHandler
}

// New creates the collectors and registers them on reg (it panics if they are already
// registered there, like prometheus.MustRegister). A nil reg registers nothing.
func New(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		cycles: counter("cycles_total",
			"Cycles by outcome: ran, skipped_not_due, skipped_leased, skipped_paused, failed.", "poller", "outcome"),
		cycleDuration: histogram("cycle_duration_seconds",
			"Wall time of a cycle, ran or skipped.", cycleBuckets, "poller"),
		eventsEmitted: counter("events_emitted_total",
			"Change events committed to the outbox (created, updated, deleted).", "poller"),
		delivered: counter("events_delivered_total",
			"Events delivered to the handler and acked.", "poller"),
		deliveryLatency: histogram("delivery_latency_seconds",
			"Time from an event's observation to its ack.", latencyBuckets, "poller"),
		handlerAttempts: counter("handler_attempts_total",
			"Calls of the handler or sink, each attempt of each event (retries included), by sink (webhook, stream, stdout, nats, amqp, postgres, or handler: a Go function) and result: ok, error, panic, timeout, fenced (cut short by a lost lease or a stop; not the handler's failure).", "poller", "sink", "result"),
		handlerDuration: histogram("handler_duration_seconds",
			"Duration of one call of the handler or sink, whatever its result, by sink.", handlerBuckets, "poller", "sink"),
		parked: counter("events_parked_total",
			"Events parked as poison and items parked as invalid.", "poller", "kind"),
		fetchDuration: histogram("fetch_duration_seconds",
			"Duration of one request to the third-party API, by lane.", fetchBuckets, "poller", "lane"),
		fetchErrors: counter("fetch_errors_total",
			"Requests to the third-party API that returned an error (429s included), by lane.", "poller", "lane"),
		errors: counter("errors_total",
			"Cycle failures by phase: fetch, handler, store, config (throttles are not failures).", "poller", "phase"),
		leaseLost: counter("lease_lost_total",
			"Cycles abandoned because their lease was lost (fencing).", "poller"),
		circuitOpened: counter("circuit_opened_total",
			"Cycles that ended with the key's circuit open.", "poller"),
		throttled: counter("throttled_total",
			"Throttles by a 429 or a 503 with Retry-After.", "poller"),
		dueRepaired: counter("due_repaired_total",
			"Registered keys the repair sweep found without a due entry (they would never have run again) and made due.", "poller"),
		budgetWait: histogram("budget_wait_seconds",
			"How long a request waited for its shared budget's token (0: at once), by budget (its declared name) and lane; a key the budget refused counts the wait it yielded for.", budgetBuckets, "budget", "lane"),
		budgetTokens: counter("budget_tokens_total",
			"Tokens of shared budgets asked for, by budget, lane and result: taken, or refused (the key yielded).", "budget", "lane", "result"),
		settings: newPollerSettings(),
	}
	if reg != nil {
		reg.MustRegister(m.collectors()...)
		reg.MustRegister(buildInfo(buildinfo.Read()))
	}
	return m
}

// buildInfo is watukuy_build_info: 1, labelled with the build's version, VCS revision and Go
// version, so a dashboard shows which build each process runs (an upgrade's progress).
func buildInfo(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
		Help: "Always 1; the labels name the build: watukuy's version, the VCS revision, the Go version."}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(in.Version, in.Revision, in.GoVersion).Set(1)
	return g
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.cycles, m.cycleDuration, m.eventsEmitted, m.delivered, m.deliveryLatency,
		m.handlerAttempts, m.handlerDuration, m.parked, m.fetchDuration, m.fetchErrors, m.errors, m.leaseLost, m.circuitOpened, m.throttled, m.dueRepaired, m.budgetWait, m.budgetTokens,
		m.settings.probeEvery, m.settings.scheduleMax}
}

// Init creates every labelled series of the given pollers at zero, so dashboards and alerts
// see them before the first event (a series that does not exist yet breaks rate() and
// increase()). Hooks do the same for a poller the first time they see it.
func (m *Metrics) Init(pollers ...string) {
	for _, p := range pollers {
		m.init(p)
	}
}

// SinkHandler is the sink label of a poller whose sink no one named: a Go function.
const SinkHandler = "handler"

// SetSinks names each poller's sink (webhook, stream, stdout, nats, amqp, postgres) for the
// sink label of the handler metrics; pollers it leaves out are SinkHandler.
func (m *Metrics) SetSinks(kinds map[string]string) {
	for p, k := range kinds {
		m.sinks.Store(p, k)
	}
}

func (m *Metrics) sinkOf(poller string) string {
	if k, ok := m.sinks.Load(poller); ok {
		return k.(string)
	}
	return SinkHandler
}

func (m *Metrics) init(poller string) {
	if _, loaded := m.seen.LoadOrStore(poller, struct{}{}); loaded {
		return
	}
	for _, o := range outcomes {
		m.cycles.WithLabelValues(poller, o)
	}
	for _, k := range kinds {
		m.parked.WithLabelValues(poller, k)
	}
	for _, r := range watukuytype.HandlerResults() {
		m.handlerAttempts.WithLabelValues(poller, m.sinkOf(poller), string(r))
	}
	for _, ph := range phases {
		m.errors.WithLabelValues(poller, ph)
	}
	for _, l := range lanes {
		m.fetchErrors.WithLabelValues(poller, string(l))
	}
	for _, c := range []*prometheus.CounterVec{m.eventsEmitted, m.delivered, m.leaseLost, m.circuitOpened, m.throttled, m.dueRepaired} {
		c.WithLabelValues(poller)
	}
}

// Hooks returns watukuytype.Hooks that update the metrics; every hook of chain (the user's hooks) runs
// too, after the metrics are updated.
func (m *Metrics) Hooks(chain watukuytype.Hooks) watukuytype.Hooks {
	return watukuytype.Hooks{
		OnCycle: func(r watukuytype.CycleReport, d time.Duration) {
			m.init(r.Key.Poller)
			m.cycles.WithLabelValues(r.Key.Poller, outcomeLabel(r.Outcome)).Inc()
			m.cycleDuration.WithLabelValues(r.Key.Poller).Observe(d.Seconds())
			if r.Events > 0 {
				m.eventsEmitted.WithLabelValues(r.Key.Poller).Add(float64(r.Events))
			}
			if chain.OnCycle != nil {
				chain.OnCycle(r, d)
			}
		},
		OnFetch: func(key watukuytype.Key, lane watukuytype.Lane, d time.Duration, err error) {
			m.init(key.Poller)
			m.fetchDuration.WithLabelValues(key.Poller, string(lane)).Observe(d.Seconds())
			if err != nil {
				m.fetchErrors.WithLabelValues(key.Poller, string(lane)).Inc()
			}
			if chain.OnFetch != nil {
				chain.OnFetch(key, lane, d, err)
			}
		},
		OnDelivered: func(key watukuytype.Key, ev watukuytype.Event, latency time.Duration) {
			m.init(key.Poller)
			m.delivered.WithLabelValues(key.Poller).Inc()
			// Observation and ack times come from different clocks only in tests; never go negative.
			m.deliveryLatency.WithLabelValues(key.Poller).Observe(max(latency, 0).Seconds())
			if chain.OnDelivered != nil {
				chain.OnDelivered(key, ev, latency)
			}
		},
		OnHandlerAttempt: func(key watukuytype.Key, ev watukuytype.Event, attempt int, d time.Duration, result watukuytype.HandlerResult, err error) {
			m.init(key.Poller)
			sink := m.sinkOf(key.Poller)
			m.handlerAttempts.WithLabelValues(key.Poller, sink, string(result)).Inc()
			m.handlerDuration.WithLabelValues(key.Poller, sink).Observe(max(d, 0).Seconds())
			if chain.OnHandlerAttempt != nil {
				chain.OnHandlerAttempt(key, ev, attempt, d, result, err)
			}
		},
		OnParked: func(key watukuytype.Key, kind, id, reason string) {
			m.init(key.Poller)
			m.parked.WithLabelValues(key.Poller, kind).Inc()
			if chain.OnParked != nil {
				chain.OnParked(key, kind, id, reason)
			}
		},
		OnCircuitOpen: func(key watukuytype.Key, until time.Time, err error) {
			m.init(key.Poller)
			m.circuitOpened.WithLabelValues(key.Poller).Inc()
			if chain.OnCircuitOpen != nil {
				chain.OnCircuitOpen(key, until, err)
			}
		},
		OnThrottled: func(key watukuytype.Key, until time.Time) {
			m.init(key.Poller)
			m.throttled.WithLabelValues(key.Poller).Inc()
			if chain.OnThrottled != nil {
				chain.OnThrottled(key, until)
			}
		},
		OnLeaseLost: func(key watukuytype.Key, err error) {
			m.init(key.Poller)
			m.leaseLost.WithLabelValues(key.Poller).Inc()
			if chain.OnLeaseLost != nil {
				chain.OnLeaseLost(key, err)
			}
		},
		OnDueRepaired: func(key watukuytype.Key) {
			m.init(key.Poller)
			m.dueRepaired.WithLabelValues(key.Poller).Inc()
			if chain.OnDueRepaired != nil {
				chain.OnDueRepaired(key)
			}
		},
		OnBudget: func(key watukuytype.Key, budget string, lane watukuytype.Lane, wait time.Duration, taken bool) {
			result := "taken"
			if !taken {
				result = "refused"
			}
			m.budgetWait.WithLabelValues(budget, string(lane)).Observe(wait.Seconds())
			m.budgetTokens.WithLabelValues(budget, string(lane), result).Inc()
			if chain.OnBudget != nil {
				chain.OnBudget(key, budget, lane, wait, taken)
			}
		},
		OnError: func(key watukuytype.Key, phase string, err error) {
			m.init(key.Poller)
			m.errors.WithLabelValues(key.Poller, phase).Inc()
			if chain.OnError != nil {
				chain.OnError(key, phase, err)
			}
		},
	}
}
