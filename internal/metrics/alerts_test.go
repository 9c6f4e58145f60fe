package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/watukuy/watukuy/watukuytype"
)

const alertsFile = "../../deploy/alerts.yaml"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exportedNames touches every metric of the package (every hook, and WatchKeys with a key that
// sets every gauge) and returns the metric names a PromQL expression may use: the gathered
// family names, plus _bucket, _sum and _count for histograms.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	NewRedis(reg)
	NewReloads(reg)
	m.SetPollers(valid(watukuytype.Poller{Name: "p"}))
	m.WatchKeys(reg, func(ctx context.Context) ([]watukuytype.KeyInfo, error) {
		now := time.Now()
		return []watukuytype.KeyInfo{{Poller: "p", Partition: "x", Circuit: "open", LeaseOwner: "w",
			LeaseExpires: at(now.Add(-time.Hour)), ThrottledUntil: at(now.Add(time.Hour)),
			LastError: json.RawMessage(`{"code":"CONFIG"}`), OutboxPending: 1, Parked: 1, Held: 1, LagMs: 1,
			FreshAt: at(now.Add(-time.Minute)), FreshnessMs: 60_000, OutboxOldestAt: at(now.Add(-time.Second)), OutboxOldestAgeMs: 1000}}, nil
	})
	k := watukuytype.Key{Poller: "p", Partition: "x"}
	h := m.Hooks(watukuytype.Hooks{})
	h.OnCycle(watukuytype.CycleReport{Key: k, Outcome: watukuytype.Ran, Events: 1}, time.Millisecond)
	h.OnFetch(k, "live", time.Millisecond, errors.New("x"))
	h.OnDelivered(k, watukuytype.Event{}, time.Millisecond)
	h.OnHandlerAttempt(k, watukuytype.Event{}, 1, time.Millisecond, watukuytype.HandlerError, errors.New("x"))
	h.OnParked(k, "poison", "id", "reason")
	h.OnCircuitOpen(k, time.Now(), errors.New("x"))
	h.OnThrottled(k, time.Now())
	h.OnLeaseLost(k, errors.New("x"))
	h.OnError(k, "fetch", errors.New("x"))
	h.OnDueRepaired(k)
	h.OnBudget(k, "shop", watukuytype.LaneLive, time.Millisecond, true)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+suffix] = true
			}
		}
	}
	return names
}

// Every metric the package documents is exported (a hook that stops updating its metric, or a
// renamed gauge, shows up here).
func TestExportedNames(t *testing.T) {
	names := exportedNames(t)
	for _, n := range []string{
		"watukuy_cycles_total", "watukuy_cycle_duration_seconds", "watukuy_events_emitted_total",
		"watukuy_events_delivered_total", "watukuy_delivery_latency_seconds", "watukuy_events_parked_total",
		"watukuy_handler_attempts_total", "watukuy_handler_duration_seconds",
		"watukuy_outbox_oldest_age_seconds", "watukuy_key_freshness_seconds",
		"watukuy_fetch_duration_seconds", "watukuy_fetch_errors_total", "watukuy_errors_total",
		"watukuy_lease_lost_total", "watukuy_circuit_opened_total", "watukuy_throttled_total", "watukuy_due_repaired_total",
		"watukuy_outbox_pending", "watukuy_parked", "watukuy_held", "watukuy_lag_seconds", "watukuy_circuit_open",
		"watukuy_throttled_until_seconds", "watukuy_last_error", "watukuy_lease_stale", "watukuy_paused",
		"watukuy_consecutive_failures", "watukuy_key_source_up", "watukuy_key_source_duration_seconds", "watukuy_build_info",
		"watukuy_budget_wait_seconds", "watukuy_budget_tokens_total", "watukuy_config_reloads_total",
		"watukuy_redis_up", "watukuy_redis_outages_total", "watukuy_redis_outage_seconds_total", "watukuy_redis_data_loss_total",
		"watukuy_circuit_open_since_seconds", "watukuy_poller_probe_every_seconds", "watukuy_poller_schedule_max_seconds",
	} {
		if !names[n] {
			t.Errorf("%s is not exported", n)
		}
	}
}

var metricName = regexp.MustCompile(`\bwatukuy_[a-zA-Z0-9_]*`)

// The alert rules use only metric names the package exports, and every rule is complete.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	names := exportedNames(t)
	used := map[string]bool{}
	alerts := map[string]bool{}
	rules := 0
	for _, g := range rf.Groups {
		if g.Name == "" {
			t.Error("a group has no name")
		}
		for _, r := range g.Rules {
			rules++
			if r.Alert == "" {
				t.Errorf("group %s: a rule has no alert name (expr %q)", g.Name, r.Expr)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("alert %s has no expr", r.Alert)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for: %v", r.Alert, err)
				}
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("alert %s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			for _, n := range metricName.FindAllString(r.Expr, -1) {
				used[n] = true
				if !names[n] {
					t.Errorf("alert %s uses %s, which the metrics package does not export", r.Alert, n)
				}
			}
		}
	}
	if rules == 0 {
		t.Fatalf("%s holds no rules", alertsFile)
	}
	// The rules the operations surface promises.
	for _, n := range []string{"watukuy_circuit_open_since_seconds", "watukuy_poller_probe_every_seconds", "watukuy_poller_schedule_max_seconds", "watukuy_lag_seconds", "watukuy_parked", "watukuy_outbox_pending",
		"watukuy_last_error", "watukuy_throttled_until_seconds", "watukuy_lease_stale",
		"watukuy_handler_attempts_total", "watukuy_key_freshness_seconds", "watukuy_budget_wait_seconds_bucket"} {
		if !used[n] {
			t.Errorf("no alert rule uses %s", n)
		}
	}
	var list []string
	for a := range alerts {
		list = append(list, a)
	}
	sort.Strings(list)
	t.Logf("%d alert rules: %s", rules, strings.Join(list, ", "))
}

// requirePromtoolEnv turns a missing promtool from a skip into a failure (CI sets it, and
// installs promtool from Debian's prometheus package), so a green run always includes the
// rules' unit tests.
const requirePromtoolEnv = "WATUKUY_REQUIRE_PROMTOOL"

// promtool, when installed, checks the rules' syntax and runs their unit tests
// (deploy/alerts_test.yaml).
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(requirePromtoolEnv) == "1" {
			t.Fatalf("promtool is not on PATH and %s=1 (apt-get install prometheus provides it)", requirePromtoolEnv)
		}
		t.Skip("promtool is not on PATH (apt-get install prometheus provides it)")
	}
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", "../../deploy/alerts_test.yaml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The drift check itself catches a name the package does not export.
func TestMetricNameScan(t *testing.T) {
	names := exportedNames(t)
	expr := `max by (poller) (watukuy_outbox_pendings) > 0 and rate(watukuy_cycle_duration_seconds_count[5m]) > 0`
	var unknown []string
	for _, n := range metricName.FindAllString(expr, -1) {
		if !names[n] {
			unknown = append(unknown, n)
		}
	}
	if strings.Join(unknown, ",") != "watukuy_outbox_pendings" {
		t.Errorf("unknown names = %v, want [watukuy_outbox_pendings]", unknown)
	}
}
