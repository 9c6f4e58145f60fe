package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

const (
	dashboardFile = "../../deploy/grafana-dashboard.json"
	deployReadme  = "../../deploy/README.md"
)

// dashboardExempt lists the metric families deploy/README.md documents that no dashboard panel
// has to show, each with the reason. It is empty: every documented family has a panel. Add a
// family here only with a reason (e.g. "watukuy_build_info": "an info metric, not a signal"),
// rather than let the dashboard fall behind a new metric unnoticed.
var dashboardExempt = map[string]string{}

// dashPanel is the part of a Grafana panel the checks read; a row holds its panels in Panels
// when it is collapsed (an open row's panels follow it at the top level).
type dashPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

type dashVariable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

type dashboardDoc struct {
	Title         string      `json:"title"`
	SchemaVersion int         `json:"schemaVersion"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []dashVariable `json:"list"`
	} `json:"templating"`
}

// query is a variable's query, whether Grafana stored it as a string or as {"query": ...}.
func (v dashVariable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// metricFamily maps a name a PromQL expression may use to its family: a histogram's _bucket,
// _sum and _count to the histogram, any other name to itself.
func metricFamily(n string, names map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(n, suffix); ok && names[f] && names[f+"_bucket"] {
			return f
		}
	}
	return n
}

// checkDashboard checks a Grafana dashboard's JSON against the exported metric names (from
// exportedNames) and the families the operator documentation lists (documented). It returns
// the families the panels use and one line per problem: invalid JSON, no panels, a panel
// without a query, a name the metrics package does not export (naming the panel), no metric
// at all, a documented family no panel uses (unless exempt), a stale exemption, and missing
// datasource / poller template variables.
func checkDashboard(raw []byte, names map[string]bool, documented []string, exempt map[string]string) (used map[string]bool, problems []string) {
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var d dashboardDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		add("not valid JSON: %v", err)
		return nil, problems
	}
	if d.Title == "" {
		add("the dashboard has no title")
	}
	if d.SchemaVersion == 0 {
		add("the dashboard has no schemaVersion")
	}
	if len(d.Panels) == 0 {
		add("the dashboard has no panels")
	}
	used = map[string]bool{}
	check := func(where, expr string) {
		if strings.Count(expr, "(") != strings.Count(expr, ")") {
			add("%s: unbalanced parentheses in %q", where, expr)
		}
		for _, n := range metricName.FindAllString(expr, -1) {
			if !names[n] {
				add("%s uses %s, which the metrics package does not export", where, n)
				continue
			}
			used[metricFamily(n, names)] = true
		}
	}
	ids := map[int]string{}
	var walk func(ps []dashPanel, in string)
	walk = func(ps []dashPanel, in string) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %q (id %d%s)", p.Title, p.ID, in)
			if prev, dup := ids[p.ID]; dup {
				add("%s: id %d is also panel %q's", where, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				walk(p.Panels, fmt.Sprintf(", in row %q", p.Title))
				continue
			}
			if p.Title == "" {
				add("%s has no title", where)
			}
			if len(p.Targets) == 0 {
				add("%s has no targets", where)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					add("%s: target %s has no expr", where, tg.RefID)
					continue
				}
				check(where, tg.Expr)
			}
		}
	}
	walk(d.Panels, "")

	vars := map[string]dashVariable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
		if q := v.query(); v.Type == "query" {
			check(fmt.Sprintf("variable %s", v.Name), q)
		}
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || v.query() != "prometheus" {
		add("no datasource variable of type datasource with query prometheus")
	}
	if v, ok := vars["poller"]; !ok || v.Type != "query" || !strings.Contains(v.query(), "label_values(watukuy_cycles_total, poller)") {
		add("no poller variable with the query label_values(watukuy_cycles_total, poller)")
	}

	if len(used) == 0 {
		add("the dashboard uses no watukuy metric")
	}
	for _, f := range documented {
		if !used[f] && exempt[f] == "" {
			add("no panel uses %s, which deploy/README.md documents: add a panel, or an exception with its reason to dashboardExempt", f)
		}
	}
	for f := range exempt {
		if used[f] {
			add("%s is exempt from the dashboard but a panel uses it: drop the exception", f)
		} else if !names[f] {
			add("%s is exempt from the dashboard but the metrics package does not export it", f)
		}
	}
	sort.Strings(problems)
	return used, problems
}

// documentedFamilies returns the exported metric families deploy/README.md names (its tables
// and the lines that document the reload counter, the key source and the build info).
func documentedFamilies(t *testing.T, names map[string]bool) []string {
	t.Helper()
	readme, err := os.ReadFile(deployReadme)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, n := range metricName.FindAllString(string(readme), -1) {
		if names[n] && metricFamily(n, names) == n {
			set[n] = true
		}
	}
	var list []string
	for n := range set {
		list = append(list, n)
	}
	sort.Strings(list)
	return list
}

// deploy/grafana-dashboard.json queries only metrics the package exports, and shows every
// metric deploy/README.md documents.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	names := exportedNames(t)
	documented := documentedFamilies(t, names)
	if len(documented) < 30 {
		t.Fatalf("deploy/README.md documents %d exported metric families, want the whole table (30 or more)", len(documented))
	}
	used, problems := checkDashboard(raw, names, documented, dashboardExempt)
	for _, p := range problems {
		t.Errorf("%s: %s", dashboardFile, p)
	}
	t.Logf("the dashboard uses %d metric families; deploy/README.md documents %d", len(used), len(documented))
}

// The checks themselves: a misspelt name in a collapsed row's panel, a panel without a query,
// a documented family no panel shows, a stale exemption, and a dashboard without metrics.
func TestGrafanaDashboardCheck(t *testing.T) {
	names := exportedNames(t)
	vars := `"templating": {"list": [
		{"name": "datasource", "type": "datasource", "query": "prometheus"},
		{"name": "poller", "type": "query", "query": {"query": "label_values(watukuy_cycles_total, poller)"}}]}`
	raw := `{"title": "t", "schemaVersion": 39, ` + vars + `, "panels": [
		{"id": 1, "type": "timeseries", "title": "Lag", "targets": [{"refId": "A", "expr": "max by (poller) (watukuy_lag_seconds)"}]},
		{"id": 2, "type": "row", "title": "Delivery", "collapsed": true, "panels": [
			{"id": 3, "type": "timeseries", "title": "Latency", "targets": [
				{"refId": "A", "expr": "histogram_quantile(0.99, sum by (le) (rate(watukuy_delivery_latency_seconds_bucket[5m])))"},
				{"refId": "B", "expr": "sum(rate(watukuy_events_delivred_total[5m]))"}]},
			{"id": 4, "type": "stat", "title": "Empty", "targets": [{"refId": "A", "expr": " "}]}]}]}`
	documented := []string{"watukuy_lag_seconds", "watukuy_delivery_latency_seconds", "watukuy_cycles_total", "watukuy_parked"}
	used, problems := checkDashboard([]byte(raw), names, documented, map[string]string{"watukuy_lag_seconds": "test"})
	want := []string{
		`no panel uses watukuy_parked, which deploy/README.md documents: add a panel, or an exception with its reason to dashboardExempt`,
		`panel "Empty" (id 4, in row "Delivery"): target A has no expr`,
		`panel "Latency" (id 3, in row "Delivery") uses watukuy_events_delivred_total, which the metrics package does not export`,
		`watukuy_lag_seconds is exempt from the dashboard but a panel uses it: drop the exception`,
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	// The variable's query counts as a use; the histogram's _bucket counts for its family.
	for _, f := range []string{"watukuy_lag_seconds", "watukuy_delivery_latency_seconds", "watukuy_cycles_total"} {
		if !used[f] {
			t.Errorf("%s not counted as used (used: %v)", f, used)
		}
	}

	_, problems = checkDashboard([]byte(`{"title": "t", "schemaVersion": 39, "panels": [{"id": 1, "type": "timeseries", "title": "x", "targets": [{"refId": "A", "expr": "up"}]}]}`), names, nil, nil)
	for _, w := range []string{"the dashboard uses no watukuy metric", "no datasource variable", "no poller variable"} {
		if !strings.Contains(strings.Join(problems, "\n"), w) {
			t.Errorf("a dashboard without metrics or variables: problems %q, want one with %q", problems, w)
		}
	}
	if _, problems = checkDashboard([]byte(`{"panels": [`), names, nil, nil); len(problems) != 1 || !strings.HasPrefix(problems[0], "not valid JSON") {
		t.Errorf("invalid JSON: problems %q", problems)
	}
}
