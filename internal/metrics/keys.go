package metrics

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watukuy/watukuy/watukuytype"
)

// KeySource lists the keys with their status. WatchKeys calls it on every scrape, for the
// gauges that need Redis. It may return the keys it could read together with an error; those
// keys are exported and watukuy_key_source_up is 0.
type KeySource func(ctx context.Context) ([]watukuytype.KeyInfo, error)

const (
	// keySourceTimeout bounds one call of the KeySource per scrape.
	keySourceTimeout = 5 * time.Second
	// staleLeaseAfter is how long past its expiry a lease whose owner is still recorded counts
	// as stale: its worker died mid-cycle and no one has taken the key over since.
	staleLeaseAfter = time.Minute
	// unknownCode labels a lastError that carries no readable code.
	unknownCode = "UNKNOWN"
)

// WatchKeys registers on reg a collector that calls src on each scrape (with a 5s timeout) and
// exports, per key (labels poller, partition):
//
//	watukuy_outbox_pending            events committed and not yet acked
//	watukuy_outbox_oldest_age_seconds age of the oldest event in the outbox (0 when empty)
//	watukuy_key_freshness_seconds     time since a cycle last found the key current with its API or
//	                                  moved it forward with data (absent until the first such cycle)
//	watukuy_parked                    parked rows (poison and invalid)
//	watukuy_held                      events held behind a parked event of their ordering key
//	watukuy_lag_seconds               how far past its due time the key is
//	watukuy_circuit_open              1 while the circuit is open
//	watukuy_circuit_open_since_seconds when the circuit opened (unix seconds; absent while closed)
//	watukuy_throttled_until_seconds   end of the Retry-After window (unix seconds; 0 if none)
//	watukuy_last_error{code}          1 for the code of the key's last error (absent when none)
//	watukuy_lease_stale               1 when the lease expired more than 1 minute ago while its owner is still set
//	watukuy_paused                    1 while the key is paused
//	watukuy_consecutive_failures      failures since the last success (the circuit opens at the poller's limit)
//
// and, unlabelled, watukuy_key_source_up (1 when src succeeded) and
// watukuy_key_source_duration_seconds. Every process that calls WatchKeys exports the same
// keys (they come from Redis), so the alert rules aggregate with max by (poller, partition);
// watukuy_circuit_open_since_seconds with min (see openSince), since a process that started
// after the circuit opened may only know a later time.
// It panics if reg already has such a collector, like prometheus.MustRegister.
func (m *Metrics) WatchKeys(reg prometheus.Registerer, src KeySource) {
	reg.MustRegister(newKeyCollector(src, time.Now))
}

type keyCollector struct {
	src     KeySource
	now     func() time.Time
	timeout time.Duration

	mu     sync.Mutex // one scrape at a time updates opened
	opened map[watukuytype.Key]openCircuit

	outboxPending, outboxOldestAge, freshness, parked, held, lag, circuitOpen, circuitSince, throttledUntil, lastError, leaseStale, paused, failures,
	blocked, retrying, up, duration *prometheus.Desc
}

// openCircuit is what the collector remembers of a key whose circuit it found open.
type openCircuit struct {
	since    time.Time // the earliest time the circuit is known to have been open since
	failures int       // the key's consecutive failures at the last scrape
}

func newKeyCollector(src KeySource, now func() time.Time) *keyCollector {
	key := []string{"poller", "partition"}
	desc := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &keyCollector{src: src, now: now, timeout: keySourceTimeout, opened: map[watukuytype.Key]openCircuit{},
		outboxPending:   desc("outbox_pending", "Events in the key's outbox, committed and not yet acked.", key),
		outboxOldestAge: desc("outbox_oldest_age_seconds", "Age of the oldest event in the key's outbox, committed and not yet acked (0 when the outbox is empty).", key),
		freshness:       desc("key_freshness_seconds", "Time since a cycle last found the key current with its API (ran through without failing or degrading, nothing new included) or moved it forward with data; grows through cursor stalls, failing requests, throttles and pages of invalid items. Absent until the first such cycle.", key),
		parked:          desc("parked", "Parked rows of the key (poison events and invalid items).", key),
		held:            desc("held", "Events held behind a parked event of their ordering key.", key),
		lag:             desc("lag_seconds", "How long past its due time the key is (0 when not overdue).", key),
		circuitOpen:     desc("circuit_open", "1 while the key's circuit is open.", key),
		circuitSince:    desc("circuit_open_since_seconds", "When the key's circuit opened, unix seconds (the failure that opened it, or, for a process that first saw it open later, its latest failure or that first sight); absent while the circuit is closed.", key),
		throttledUntil:  desc("throttled_until_seconds", "End of the key's Retry-After window, unix seconds (0 when not throttled).", key),
		lastError:       desc("last_error", "1 for the code of the key's last error; absent after a successful cycle.", append(key, "code")),
		leaseStale:      desc("lease_stale", "1 when the key's lease expired more than 1 minute ago while its owner is still recorded (a worker died mid-cycle and nobody took the key over).", key),
		paused:          desc("paused", "1 while the key is paused.", key),
		failures:        desc("consecutive_failures", "Consecutive failed cycles of the key.", key),
		blocked:         desc("delivery_blocked_seconds", "How long the key's delivery has been blocked because its sink fails as a whole (0 when it is not): its events wait in the outbox while the cycles poll.", key),
		retrying:        desc("retrying", "Ordering keys of the key whose first event failed and waits for its next try.", key),
		up:              desc("key_source_up", "1 when the last read of the keys' status from Redis succeeded.", nil),
		duration:        desc("key_source_duration_seconds", "Time the last read of the keys' status from Redis took.", nil),
	}
}

// Describe implements prometheus.Collector.
func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.outboxPending, c.outboxOldestAge, c.freshness, c.parked, c.held, c.lag, c.circuitOpen, c.circuitSince, c.throttledUntil,
		c.lastError, c.leaseStale, c.paused, c.failures, c.blocked, c.retrying, c.up, c.duration} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	keys, err := c.src(ctx)
	ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, time.Since(start).Seconds())
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, boolValue(err == nil))

	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[watukuytype.Key]bool, len(keys))
	for _, k := range keys {
		// Label values must be valid UTF-8, or the const metric panics.
		poller, partition := strings.ToValidUTF8(k.Poller, "\uFFFD"), strings.ToValidUTF8(k.Partition, "\uFFFD")
		id := watukuytype.Key{Poller: poller, Partition: partition}
		if seen[id] {
			continue // a duplicate would fail the whole scrape
		}
		seen[id] = true
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, poller, partition)
		}
		gauge(c.outboxPending, float64(k.OutboxPending))
		gauge(c.outboxOldestAge, float64(k.OutboxOldestAgeMs)/1000)
		if k.FreshAt != nil {
			gauge(c.freshness, float64(max(k.FreshnessMs, 0))/1000)
		}
		gauge(c.parked, float64(k.Parked))
		gauge(c.held, float64(k.Held))
		gauge(c.lag, float64(k.LagMs)/1000)
		gauge(c.circuitOpen, boolValue(k.Circuit == watukuytype.CircuitOpen))
		if since, open := c.openSince(id, k, now); open {
			gauge(c.circuitSince, float64(since.UnixMilli())/1000)
		}
		throttled := 0.0
		if k.ThrottledUntil != nil {
			throttled = float64(k.ThrottledUntil.UnixMilli()) / 1000
		}
		gauge(c.throttledUntil, throttled)
		gauge(c.leaseStale, boolValue(k.LeaseOwner != "" && k.LeaseExpires != nil && now.Sub(*k.LeaseExpires) > staleLeaseAfter))
		gauge(c.paused, boolValue(k.Paused))
		gauge(c.failures, float64(k.Failures))
		blocked := 0.0
		if k.Blocked != nil {
			blocked = max(now.Sub(k.Blocked.Since).Seconds(), 0.001)
		}
		gauge(c.blocked, blocked)
		gauge(c.retrying, float64(k.Retrying))
		if code, ok := errorCode(k.LastError); ok {
			ch <- prometheus.MustNewConstMetric(c.lastError, prometheus.GaugeValue, 1, poller, partition, strings.ToValidUTF8(code, "\uFFFD"))
		}
	}
	// A key the source no longer lists is gone (removed, deleted): forget its circuit. After a
	// failed read the keys it could not list are kept.
	if err == nil {
		for id := range c.opened {
			if !seen[id] {
				delete(c.opened, id)
			}
		}
	}
}

// openSince is since when key k's circuit has been open (false when it is closed), as far
// as this collector can tell; the caller holds c.mu. The store keeps no opening time, but the
// cycle that opens the circuit writes its failure as the key's lastError, and each failed
// probe overwrites it with a later one: the earliest lastError time seen while the circuit
// stayed open is when it opened, provided this collector saw the key before its first failed
// probe. A collector that first sees the key later (it started later) knows only a later
// time, the latest failure or, when lastError carries none, the scrape itself: the circuit
// has been open at least since then. Either way the time is never before the opening, so an
// alert on it is late rather than early. Consecutive
// failures only grow while the circuit stays open; fewer than last time means it closed and
// opened again between two scrapes (a close and a new opening that both fall between two
// scrapes, before any probe of the old opening failed, keep the old time).
func (c *keyCollector) openSince(id watukuytype.Key, k watukuytype.KeyInfo, now time.Time) (time.Time, bool) {
	if k.Circuit != watukuytype.CircuitOpen {
		delete(c.opened, id)
		return time.Time{}, false
	}
	since := now
	if at, ok := errorTime(k.LastError); ok && at.Before(since) {
		since = at
	}
	if prev, ok := c.opened[id]; ok && k.Failures >= prev.failures && prev.since.Before(since) {
		since = prev.since
	}
	c.opened[id] = openCircuit{since: since, failures: k.Failures}
	return since, true
}

// errorTime reads the time of a key's lastError JSON ({"code": ..., "at": RFC 3339}).
func errorTime(raw json.RawMessage) (time.Time, bool) {
	if len(raw) == 0 {
		return time.Time{}, false
	}
	var le watukuytype.LastError
	if err := json.Unmarshal(raw, &le); err != nil || le.At == "" {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, le.At)
	return at, err == nil
}

// errorCode reads the code of a key's lastError JSON ({"code": "CONFIG", "phase": ...}).
func errorCode(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	var le watukuytype.LastError
	if err := json.Unmarshal(raw, &le); err != nil || le.Code == "" {
		return unknownCode, true
	}
	return string(le.Code), true
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
