package watukuy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/watukuy/watukuy/internal/metrics"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// Delivery pressure and stalls are visible: failed handler attempts,
// the oldest undelivered event, handler latency, degraded keys and freshness, as inspect and
// the metrics show them.

// observed is an engine of env e with the metrics package's hooks, and the metrics it feeds
// (WatchKeys over InspectAll included).
func (e *env) observed(p watukuytype.Poller) (*Engine, *prometheus.Registry) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	e.n++
	eng, err := newEngine(Options{Redis: e.b.Client, InstanceID: fmt.Sprintf("observed-%d", e.n), Hooks: m.Hooks(watukuytype.Hooks{})}, seams{clock: e.clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := eng.Register(p); err != nil {
		e.t.Fatal(err)
	}
	m.WatchKeys(reg, func(ctx context.Context) ([]watukuytype.KeyInfo, error) { return eng.InspectAll(ctx, "") })
	return eng, reg
}

// sample reads one series of reg: the value of a counter or gauge, the sample count of a
// histogram; ok is false when the series is not exported.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// Every attempt of the handler is counted by its result, whether or not the event is later
// parked: two failures then a success count 2 failed attempts and 1 ok, and no cycle fails
// (errors_total stays 0, as it always did). Each attempt's duration is observed.
func TestHandlerAttemptsCounted(t *testing.T) {
	var status atomic.Int32 // what the webhook receiver answers
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	wh, err := sink.NewWebhook(sink.Webhook{URL: srv.URL, Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))}})
	if err != nil {
		t.Fatal(err)
	}
	// Each handler fails its first two calls as the case says and succeeds on the third.
	for _, tc := range []struct {
		name    string
		result  string // label of the two failed attempts
		handler func(calls *atomic.Int32) watukuytype.Handler
	}{
		{"handler error", "error", func(calls *atomic.Int32) watukuytype.Handler {
			return func(ctx context.Context, ev watukuytype.Event) error {
				if calls.Add(1) <= 2 {
					return errors.New("downstream said no")
				}
				return nil
			}
		}},
		{"webhook 500", "error", func(calls *atomic.Int32) watukuytype.Handler {
			return func(ctx context.Context, ev watukuytype.Event) error {
				status.Store(http.StatusInternalServerError)
				if calls.Add(1) > 2 {
					status.Store(http.StatusOK)
				}
				return wh.Handle(ctx, ev)
			}
		}},
		{"panic", "panic", func(calls *atomic.Int32) watukuytype.Handler {
			return func(ctx context.Context, ev watukuytype.Event) error {
				if calls.Add(1) <= 2 {
					panic("handler bug")
				}
				return nil
			}
		}},
		{"timeout", "timeout", func(calls *atomic.Int32) watukuytype.Handler {
			return func(ctx context.Context, ev watukuytype.Event) error {
				if calls.Add(1) <= 2 {
					return fmt.Errorf("sink: timed out: %w", context.DeadlineExceeded)
				}
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachLight(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				putN(e, 1)
				var calls atomic.Int32
				name := strings.ReplaceAll(tc.name, " ", "_")
				eng, reg := e.observed(e.poller(func(p *watukuytype.Poller) {
					p.Name, p.Handler, p.Delivery.Attempts, p.Delivery.RetryHorizon = name, tc.handler(&calls), 3, -1
				}))
				rep := eng.RunCycle(t.Context(), watukuytype.Key{Poller: name})
				if rep.Err != nil || rep.Delivered != 1 || rep.Parked != 0 {
					t.Fatalf("%s: cycle: %+v", tc.name, rep)
				}
				for result, want := range map[string]float64{tc.result: 2, "ok": 1} {
					if got, _ := sample(t, reg, "watukuy_handler_attempts_total", map[string]string{"poller": name, "result": result}); got != want {
						t.Errorf("%s: handler_attempts_total{result=%q} = %v, want %v", tc.name, result, got, want)
					}
				}
				if got, _ := sample(t, reg, "watukuy_handler_duration_seconds", map[string]string{"poller": name}); got != 3 {
					t.Errorf("%s: handler_duration_seconds observations = %v, want 3", tc.name, got)
				}
				if got, _ := sample(t, reg, "watukuy_errors_total", map[string]string{"poller": name, "phase": "handler"}); got != 0 {
					t.Errorf("%s: errors_total{phase=handler} = %v: no cycle failed", tc.name, got)
				}
			})
		})
	}
}

// The age of the oldest undelivered event: set while an event waits in the outbox (the
// handler is down), gone once it is acked. Ages count by the Redis server's clock, which
// stamps the outbox entries: miniredis' is moved, a real server's is waited for.
func TestOutboxOldestAge(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 1)
		if b.Mini != nil {
			b.Mini.SetTime(time.Now())
		}
		down := errors.New("handler down")
		e.rec.setFail(func(watukuytype.Event) error { return down })
		eng, reg := e.observed(e.poller(func(p *watukuytype.Poller) {
			p.Delivery.Poison = watukuytype.PoisonHalt
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
		}))
		ctx := t.Context()
		key := watukuytype.Key{Poller: "orders"}
		if rep := eng.RunCycle(ctx, key); rep.Events != 1 || rep.Delivered != 0 {
			t.Fatalf("cycle with the handler down: %+v", rep)
		}
		if b.Mini != nil {
			b.Mini.SetTime(time.Now().Add(90 * time.Second))
		}
		var ki watukuytype.KeyInfo
		for deadline := time.Now().Add(5 * time.Second); ; {
			var err error
			if ki, err = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
				t.Fatal(err)
			}
			if ki.OutboxOldestAgeMs > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Millisecond) // a real server's clock: at least a millisecond must pass
		}
		if ki.OutboxPending != 1 || ki.OutboxOldestAt == nil || ki.OutboxOldestAgeMs <= 0 {
			t.Fatalf("pending event: outbox %d, oldest at %v, age %dms", ki.OutboxPending, ki.OutboxOldestAt, ki.OutboxOldestAgeMs)
		}
		if b.Mini != nil && ki.OutboxOldestAgeMs < 90_000 {
			t.Fatalf("age %dms, want >= 90s (miniredis' clock moved 90s)", ki.OutboxOldestAgeMs)
		}
		js, _ := json.Marshal(ki)
		if !strings.Contains(string(js), `"outboxOldestAgeMs":`) || !strings.Contains(string(js), `"outboxOldestAt":`) {
			t.Fatalf("--json lacks the oldest event: %s", js)
		}
		if age, ok := sample(t, reg, "watukuy_outbox_oldest_age_seconds", map[string]string{"poller": "orders"}); !ok || age <= 0 {
			t.Fatalf("outbox_oldest_age_seconds = %v (exported %v), want > 0", age, ok)
		}

		e.rec.setFail(nil)
		if err := eng.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		if rep := eng.RunCycle(ctx, key); rep.Delivered != 1 {
			t.Fatalf("cycle with the handler back: %+v", rep)
		}
		ki, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.OutboxPending != 0 || ki.OutboxOldestAt != nil || ki.OutboxOldestAgeMs != 0 {
			t.Fatalf("after the ack: outbox %d, oldest at %v, age %dms", ki.OutboxPending, ki.OutboxOldestAt, ki.OutboxOldestAgeMs)
		}
		js, _ = json.Marshal(ki)
		if strings.Contains(string(js), "outboxOldest") {
			t.Fatalf("--json still shows an oldest event: %s", js)
		}
		if age, _ := sample(t, reg, "watukuy_outbox_oldest_age_seconds", map[string]string{"poller": "orders"}); age != 0 {
			t.Fatalf("outbox_oldest_age_seconds = %v after the ack, want 0", age)
		}
	})
}

// scripted is a custom-cursor API whose next answer a test sets: a page of items, a cursor
// stall, or nothing new.
type scripted struct {
	seq  atomic.Int64
	next atomic.Value // func(req FetchRequest) (Page, error)
}

func (s *scripted) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	return s.next.Load().(func(watukuytype.FetchRequest) (watukuytype.Page, error))(req)
}

// valid answers one new valid item, invalid n new items without an identity, quiet nothing
// new, stall a cursor stall.
func (s *scripted) valid(watukuytype.FetchRequest) (watukuytype.Page, error) {
	n := s.seq.Add(1)
	return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":"o%d","version":"%d"}`, n, n))}, Next: fmt.Sprint(n)}, nil
}

func (s *scripted) invalid(n int) func(watukuytype.FetchRequest) (watukuytype.Page, error) {
	return func(watukuytype.FetchRequest) (watukuytype.Page, error) {
		var items []json.RawMessage
		for i := 0; i < n; i++ {
			items = append(items, json.RawMessage(fmt.Sprintf(`{"name":"nameless %d","version":"1"}`, s.seq.Add(1))))
		}
		return watukuytype.Page{Items: items, Next: fmt.Sprint(s.seq.Load())}, nil
	}
}

func (s *scripted) quiet(req watukuytype.FetchRequest) (watukuytype.Page, error) {
	return watukuytype.Page{Next: req.Cursor}, nil
}

func (s *scripted) stall(req watukuytype.FetchRequest) (watukuytype.Page, error) {
	return watukuytype.Page{}, &watukuytype.CursorStallError{Key: req.Key, Cursor: req.Cursor, Msg: "a full page of one timestamp"}
}

// lastErrorCode reads the code of ki's lastError ("" when none).
func lastErrorCode(ki watukuytype.KeyInfo) string {
	var le watukuytype.LastError
	_ = json.Unmarshal(ki.LastError, &le)
	return string(le.Code)
}

// Freshness and degraded keys. After one good cycle, a key goes through three more cycles a
// minute apart. A quiet API stays fresh (freshness 0); a CURSOR_STALL loop and pages whose
// items all lack their identity (71 parked, the cursor moving past them) go stale by a minute
// a cycle, the latter degraded with INVALID_ITEMS (kept through a cycle with nothing new).
// A cycle with a valid item makes the key fresh and healthy again.
func TestFreshnessAndDegraded(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name   string
			answer func(s *scripted) []func(watukuytype.FetchRequest) (watukuytype.Page, error) // the three cycles' answers
			stale  bool                                                                         // freshness grows a minute a cycle
			status string                                                                       // after the three cycles
			code   string                                                                       // lastError code after them
		}{
			{"quiet", func(s *scripted) []func(watukuytype.FetchRequest) (watukuytype.Page, error) {
				return []func(watukuytype.FetchRequest) (watukuytype.Page, error){s.quiet, s.quiet, s.quiet}
			}, false, "idle", ""},
			{"cursor stall", func(s *scripted) []func(watukuytype.FetchRequest) (watukuytype.Page, error) {
				return []func(watukuytype.FetchRequest) (watukuytype.Page, error){s.stall, s.stall, s.stall}
			}, true, "failing", "CURSOR_STALL"},
			{"all invalid", func(s *scripted) []func(watukuytype.FetchRequest) (watukuytype.Page, error) {
				return []func(watukuytype.FetchRequest) (watukuytype.Page, error){s.invalid(71), s.invalid(3), s.quiet}
			}, true, "degraded", "INVALID_ITEMS"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				s := &scripted{}
				s.next.Store(s.valid)
				name := strings.ReplaceAll(tc.name, " ", "_")
				eng, reg := e.observed(e.poller(func(p *watukuytype.Poller) {
					p.Name, p.Fetch = name, s.fetch
				}))
				ctx := t.Context()
				key := watukuytype.Key{Poller: name}
				cycle := func(answer func(watukuytype.FetchRequest) (watukuytype.Page, error)) watukuytype.KeyInfo {
					t.Helper()
					s.next.Store(answer)
					if err := eng.Trigger(ctx, watukuytype.Key{Poller: name, Partition: ""}); err != nil {
						t.Fatal(err)
					}
					if rep := eng.RunCycle(ctx, key); rep.Outcome != watukuytype.Ran {
						t.Fatalf("cycle: %+v", rep)
					}
					ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: name, Partition: ""})
					if err != nil {
						t.Fatal(err)
					}
					return ki
				}
				ki := cycle(s.valid)
				if ki.FreshAt == nil || ki.FreshnessMs != 0 || ki.Status != "idle" {
					t.Fatalf("after a good cycle: freshAt %v, freshness %dms, status %s", ki.FreshAt, ki.FreshnessMs, ki.Status)
				}
				fresh := *ki.FreshAt
				for i, answer := range tc.answer(s) {
					e.clock.Advance(time.Minute)
					ki = cycle(answer)
					want := int64(0)
					if tc.stale {
						want = int64(i+1) * time.Minute.Milliseconds()
					}
					if ki.FreshnessMs != want {
						t.Fatalf("cycle %d: freshness %dms, want %dms (freshAt %v, the good cycle at %v; lastError %s)", i+1, ki.FreshnessMs, want, ki.FreshAt, fresh, ki.LastError)
					}
					if got, _ := sample(t, reg, "watukuy_key_freshness_seconds", map[string]string{"poller": name}); got != float64(want)/1000 {
						t.Fatalf("cycle %d: key_freshness_seconds = %v, want %v", i+1, got, float64(want)/1000)
					}
				}
				if string(ki.Status) != tc.status || lastErrorCode(ki) != tc.code {
					t.Fatalf("status %s, lastError %s; want %s, %q", ki.Status, ki.LastError, tc.status, tc.code)
				}
				js, _ := json.Marshal(ki)
				if !strings.Contains(string(js), `"status":"`+tc.status+`"`) || !strings.Contains(string(js), fmt.Sprintf(`"freshnessMs":%d`, ki.FreshnessMs)) {
					t.Fatalf("--json: %s", js)
				}
				if tc.code != "" {
					if got, _ := sample(t, reg, "watukuy_last_error", map[string]string{"poller": name, "code": tc.code}); got != 1 {
						t.Fatalf("last_error{code=%s} = %v", tc.code, got)
					}
				}
				if tc.code == "INVALID_ITEMS" {
					if ki.ParkedInvalid != 74 || !strings.Contains(string(ki.LastError), "no identity") {
						t.Fatalf("parked invalid %d, lastError %s", ki.ParkedInvalid, ki.LastError)
					}
				}

				// A valid item: fresh and healthy again.
				e.clock.Advance(time.Minute)
				ki = cycle(s.valid)
				if ki.FreshnessMs != 0 || ki.Status != "idle" || ki.LastError != nil {
					t.Fatalf("after a valid cycle: freshness %dms, status %s, lastError %s", ki.FreshnessMs, ki.Status, ki.LastError)
				}
			})
		}
	})
}

// A degraded key whose parked invalid items an operator dealt with (discarded here) is no
// longer degraded, and its next cycle (nothing new) makes it fresh again; while an invalid
// row is left, it stays degraded.
func TestDegradedClearedByOperator(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		s := &scripted{}
		eng, _ := e.observed(e.poller(func(p *watukuytype.Poller) { p.Fetch = s.fetch }))
		ctx := t.Context()
		s.next.Store(s.invalid(2))
		eng.RunCycle(ctx, watukuytype.Key{Poller: "orders"})
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Status != "degraded" || ki.FreshAt != nil || ki.FreshnessMs != -1 {
			t.Fatalf("all invalid from the start: status %s, freshAt %v, freshness %d", ki.Status, ki.FreshAt, ki.FreshnessMs)
		}
		rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "invalid")
		if err != nil || len(rows) != 2 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		s.next.Store(s.quiet)
		for i, row := range rows {
			if _, err := eng.Parked().Discard(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, row.ID); err != nil {
				t.Fatal(err)
			}
			eng.RunCycle(ctx, watukuytype.Key{Poller: "orders"}) // discard triggers the key
			ki, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
			if last := i == len(rows)-1; last != (ki.Status == "idle") || last != (ki.FreshnessMs == 0) {
				t.Fatalf("after %d of %d discards: status %s, lastError %s, freshness %d", i+1, len(rows), ki.Status, ki.LastError, ki.FreshnessMs)
			}
		}
	})
}
