package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watukuy/watukuy/watukuytype"
)

var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(t time.Time) *time.Time { return &t }

// fakeKeys is what a Redis-backed KeySource would list: one key of each interesting kind.
func fakeKeys() []watukuytype.KeyInfo {
	return []watukuytype.KeyInfo{
		{ // healthy, idle: fresh 2s ago, its oldest pending event 0.25s old
			Poller: "orders", Partition: "t_1", Circuit: "closed", OutboxPending: 4, LagMs: 1500,
			FreshAt: at(testNow.Add(-2 * time.Second)), FreshnessMs: 2000, OutboxOldestAt: at(testNow.Add(-250 * time.Millisecond)), OutboxOldestAgeMs: 250,
		},
		{ // circuit open after a config error, parked and held events, throttled
			Poller: "orders", Partition: "t_2", Circuit: "open", Failures: 5, Parked: 2, Held: 3,
			ThrottledUntil: at(testNow.Add(2 * time.Hour)), Retrying: 2,
			Blocked:   &watukuytype.DeliveryBlocked{Since: testNow.Add(-10 * time.Minute), Error: "connection refused", Tries: 6, NextTry: testNow.Add(time.Minute)},
			LastError: json.RawMessage(`{"code":"CONFIG","phase":"config","message":"bad cursor"}`),
			FreshAt:   at(testNow.Add(-time.Hour)), FreshnessMs: 3_600_000,
		},
		{ // its worker died mid-cycle 5 minutes ago; nobody took the key over
			Poller: "users", Partition: "", Circuit: "closed", LeaseOwner: "worker-1", LeaseEpoch: 9,
			LeaseExpires: at(testNow.Add(-5 * time.Minute)), Paused: true,
			LastError: json.RawMessage(`not json`),
		},
		{ // a running cycle: the lease is live
			Poller: "users", Partition: "p", LeaseOwner: "worker-2", LeaseExpires: at(testNow.Add(20 * time.Second)),
		},
		{ // expired 30s ago: within the grace minute, not stale yet
			Poller: "users", Partition: "q", LeaseOwner: "worker-3", LeaseExpires: at(testNow.Add(-30 * time.Second)),
		},
	}
}

func TestWatchKeysGauges(t *testing.T) {
	var calls atomic.Int32
	var deadline time.Duration
	src := func(ctx context.Context) ([]watukuytype.KeyInfo, error) {
		calls.Add(1)
		if d, ok := ctx.Deadline(); ok {
			deadline = time.Until(d)
		}
		return fakeKeys(), nil
	}
	c := newKeyCollector(src, func() time.Time { return testNow })
	want := `
# HELP watukuy_circuit_open 1 while the key's circuit is open.
# TYPE watukuy_circuit_open gauge
watukuy_circuit_open{partition="",poller="users"} 0
watukuy_circuit_open{partition="p",poller="users"} 0
watukuy_circuit_open{partition="q",poller="users"} 0
watukuy_circuit_open{partition="t_1",poller="orders"} 0
watukuy_circuit_open{partition="t_2",poller="orders"} 1
# HELP watukuy_consecutive_failures Consecutive failed cycles of the key.
# TYPE watukuy_consecutive_failures gauge
watukuy_consecutive_failures{partition="",poller="users"} 0
watukuy_consecutive_failures{partition="p",poller="users"} 0
watukuy_consecutive_failures{partition="q",poller="users"} 0
watukuy_consecutive_failures{partition="t_1",poller="orders"} 0
watukuy_consecutive_failures{partition="t_2",poller="orders"} 5
# HELP watukuy_held Events held behind a parked event of their ordering key.
# TYPE watukuy_held gauge
watukuy_held{partition="",poller="users"} 0
watukuy_held{partition="p",poller="users"} 0
watukuy_held{partition="q",poller="users"} 0
watukuy_held{partition="t_1",poller="orders"} 0
watukuy_held{partition="t_2",poller="orders"} 3
# HELP watukuy_key_freshness_seconds Time since a cycle last found the key current with its API (ran through without failing or degrading, nothing new included) or moved it forward with data; grows through cursor stalls, failing requests, throttles and pages of invalid items. Absent until the first such cycle.
# TYPE watukuy_key_freshness_seconds gauge
watukuy_key_freshness_seconds{partition="t_1",poller="orders"} 2
watukuy_key_freshness_seconds{partition="t_2",poller="orders"} 3600
# HELP watukuy_lag_seconds How long past its due time the key is (0 when not overdue).
# TYPE watukuy_lag_seconds gauge
watukuy_lag_seconds{partition="",poller="users"} 0
watukuy_lag_seconds{partition="p",poller="users"} 0
watukuy_lag_seconds{partition="q",poller="users"} 0
watukuy_lag_seconds{partition="t_1",poller="orders"} 1.5
watukuy_lag_seconds{partition="t_2",poller="orders"} 0
# HELP watukuy_last_error 1 for the code of the key's last error; absent after a successful cycle.
# TYPE watukuy_last_error gauge
watukuy_last_error{code="CONFIG",partition="t_2",poller="orders"} 1
watukuy_last_error{code="UNKNOWN",partition="",poller="users"} 1
# HELP watukuy_lease_stale 1 when the key's lease expired more than 1 minute ago while its owner is still recorded (a worker died mid-cycle and nobody took the key over).
# TYPE watukuy_lease_stale gauge
watukuy_lease_stale{partition="",poller="users"} 1
watukuy_lease_stale{partition="p",poller="users"} 0
watukuy_lease_stale{partition="q",poller="users"} 0
watukuy_lease_stale{partition="t_1",poller="orders"} 0
watukuy_lease_stale{partition="t_2",poller="orders"} 0
# HELP watukuy_outbox_oldest_age_seconds Age of the oldest event in the key's outbox, committed and not yet acked (0 when the outbox is empty).
# TYPE watukuy_outbox_oldest_age_seconds gauge
watukuy_outbox_oldest_age_seconds{partition="",poller="users"} 0
watukuy_outbox_oldest_age_seconds{partition="p",poller="users"} 0
watukuy_outbox_oldest_age_seconds{partition="q",poller="users"} 0
watukuy_outbox_oldest_age_seconds{partition="t_1",poller="orders"} 0.25
watukuy_outbox_oldest_age_seconds{partition="t_2",poller="orders"} 0
# HELP watukuy_outbox_pending Events in the key's outbox, committed and not yet acked.
# TYPE watukuy_outbox_pending gauge
watukuy_outbox_pending{partition="",poller="users"} 0
watukuy_outbox_pending{partition="p",poller="users"} 0
watukuy_outbox_pending{partition="q",poller="users"} 0
watukuy_outbox_pending{partition="t_1",poller="orders"} 4
watukuy_outbox_pending{partition="t_2",poller="orders"} 0
# HELP watukuy_parked Parked rows of the key (poison events and invalid items).
# TYPE watukuy_parked gauge
watukuy_parked{partition="",poller="users"} 0
watukuy_parked{partition="p",poller="users"} 0
watukuy_parked{partition="q",poller="users"} 0
watukuy_parked{partition="t_1",poller="orders"} 0
watukuy_parked{partition="t_2",poller="orders"} 2
# HELP watukuy_paused 1 while the key is paused.
# TYPE watukuy_paused gauge
watukuy_paused{partition="",poller="users"} 1
watukuy_paused{partition="p",poller="users"} 0
watukuy_paused{partition="q",poller="users"} 0
watukuy_paused{partition="t_1",poller="orders"} 0
watukuy_paused{partition="t_2",poller="orders"} 0
# HELP watukuy_throttled_until_seconds End of the key's Retry-After window, unix seconds (0 when not throttled).
# TYPE watukuy_throttled_until_seconds gauge
watukuy_throttled_until_seconds{partition="",poller="users"} 0
watukuy_throttled_until_seconds{partition="p",poller="users"} 0
watukuy_throttled_until_seconds{partition="q",poller="users"} 0
watukuy_throttled_until_seconds{partition="t_1",poller="orders"} 0
watukuy_throttled_until_seconds{partition="t_2",poller="orders"} 1.893560645e+09
# HELP watukuy_key_source_up 1 when the last read of the keys' status from Redis succeeded.
# TYPE watukuy_key_source_up gauge
watukuy_key_source_up 1
# HELP watukuy_delivery_blocked_seconds How long the key's delivery has been blocked because its sink fails as a whole (0 when it is not): its events wait in the outbox while the cycles poll.
# TYPE watukuy_delivery_blocked_seconds gauge
watukuy_delivery_blocked_seconds{partition="",poller="users"} 0
watukuy_delivery_blocked_seconds{partition="p",poller="users"} 0
watukuy_delivery_blocked_seconds{partition="q",poller="users"} 0
watukuy_delivery_blocked_seconds{partition="t_1",poller="orders"} 0
watukuy_delivery_blocked_seconds{partition="t_2",poller="orders"} 600
# HELP watukuy_retrying Ordering keys of the key whose first event failed and waits for its next try.
# TYPE watukuy_retrying gauge
watukuy_retrying{partition="",poller="users"} 0
watukuy_retrying{partition="p",poller="users"} 0
watukuy_retrying{partition="q",poller="users"} 0
watukuy_retrying{partition="t_1",poller="orders"} 0
watukuy_retrying{partition="t_2",poller="orders"} 2
`
	names := []string{"watukuy_delivery_blocked_seconds", "watukuy_retrying", "watukuy_circuit_open", "watukuy_consecutive_failures", "watukuy_held", "watukuy_lag_seconds",
		"watukuy_key_freshness_seconds", "watukuy_outbox_oldest_age_seconds",
		"watukuy_last_error", "watukuy_lease_stale", "watukuy_outbox_pending", "watukuy_parked", "watukuy_paused",
		"watukuy_throttled_until_seconds", "watukuy_key_source_up"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if calls.Load() != 1 {
		t.Errorf("KeySource called %d times for one scrape, want 1", calls.Load())
	}
	if deadline <= 4*time.Second || deadline > 5*time.Second {
		t.Errorf("KeySource deadline in %v, want about 5s", deadline)
	}
	// Every scrape reads the keys again.
	testutil.CollectAndCount(c)
	if calls.Load() != 2 {
		t.Errorf("KeySource called %d times after two scrapes, want 2", calls.Load())
	}
}

func TestWatchKeysRegistersAndScrapes(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.WatchKeys(reg, func(ctx context.Context) ([]watukuytype.KeyInfo, error) { return fakeKeys(), nil })
	// 10 gauges for each of the 5 keys, 2 last_error series, key_source_up and duration.
	if n, err := testutil.GatherAndCount(reg, "watukuy_outbox_pending", "watukuy_last_error", "watukuy_key_source_up"); err != nil || n != 5+2+1 {
		t.Errorf("GatherAndCount = %d, %v; want 8", n, err)
	}
	// Registering a second watcher on the same registry is a programming error.
	defer func() {
		if recover() == nil {
			t.Error("a second WatchKeys on one registry did not panic")
		}
	}()
	m.WatchKeys(reg, func(ctx context.Context) ([]watukuytype.KeyInfo, error) { return nil, nil })
}

func TestWatchKeysSourceFails(t *testing.T) {
	partial := fakeKeys()[:1]
	c := newKeyCollector(func(ctx context.Context) ([]watukuytype.KeyInfo, error) {
		return partial, errors.New("redis: connection refused")
	}, func() time.Time { return testNow })
	want := `
# HELP watukuy_key_source_up 1 when the last read of the keys' status from Redis succeeded.
# TYPE watukuy_key_source_up gauge
watukuy_key_source_up 0
# HELP watukuy_outbox_pending Events in the key's outbox, committed and not yet acked.
# TYPE watukuy_outbox_pending gauge
watukuy_outbox_pending{partition="t_1",poller="orders"} 4
`
	// The scrape still succeeds, with the keys that could be read.
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "watukuy_key_source_up", "watukuy_outbox_pending"); err != nil {
		t.Error(err)
	}
}

func TestWatchKeysTimeout(t *testing.T) {
	c := newKeyCollector(func(ctx context.Context) ([]watukuytype.KeyInfo, error) {
		<-ctx.Done() // a hung Redis: the timeout (5s; shortened here) releases the scrape
		return nil, ctx.Err()
	}, time.Now)
	c.timeout = 100 * time.Millisecond
	start := time.Now()
	want := `
# HELP watukuy_key_source_up 1 when the last read of the keys' status from Redis succeeded.
# TYPE watukuy_key_source_up gauge
watukuy_key_source_up 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "watukuy_key_source_up"); err != nil {
		t.Error(err)
	}
	if d := time.Since(start); d < c.timeout || d > 5*time.Second {
		t.Errorf("scrape took %v, want about %v", d, c.timeout)
	}
}

// Duplicates and invalid UTF-8 in what the source lists never fail the scrape.
func TestWatchKeysDuplicatesAndBadLabels(t *testing.T) {
	keys := []watukuytype.KeyInfo{
		{Poller: "orders", Partition: "t_1", OutboxPending: 1},
		{Poller: "orders", Partition: "t_1", OutboxPending: 2},
		{Poller: "orders", Partition: "t_\xff", OutboxPending: 3, LastError: json.RawMessage(`{"message":"no code"}`)},
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newKeyCollector(func(ctx context.Context) ([]watukuytype.KeyInfo, error) { return keys, nil }, time.Now))
	want := `
# HELP watukuy_outbox_pending Events in the key's outbox, committed and not yet acked.
# TYPE watukuy_outbox_pending gauge
watukuy_outbox_pending{partition="t_1",poller="orders"} 1
watukuy_outbox_pending{partition="t_<BAD>",poller="orders"} 3
# HELP watukuy_last_error 1 for the code of the key's last error; absent after a successful cycle.
# TYPE watukuy_last_error gauge
watukuy_last_error{code="UNKNOWN",partition="t_<BAD>",poller="orders"} 1
`
	want = strings.ReplaceAll(want, "<BAD>", "\uFFFD")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "watukuy_outbox_pending", "watukuy_last_error"); err != nil {
		t.Error(err)
	}
}

func TestErrorCode(t *testing.T) {
	for raw, want := range map[string]string{
		``:                                 "",
		`null`:                             "",
		`{"code":"FETCH","phase":"fetch"}`: "FETCH",
		`{"code":""}`:                      "UNKNOWN",
		`[1,2]`:                            "UNKNOWN",
	} {
		code, ok := errorCode(json.RawMessage(raw))
		if code != want || ok != (want != "") {
			t.Errorf("errorCode(%q) = %q, %v; want %q", raw, code, ok, want)
		}
	}
}
