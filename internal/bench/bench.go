// Package bench holds watukuy's benchmark measurements: Redis bytes per idle key
// and per tracked item, the scheduler's claim + enqueue rate, due-time lateness with worker
// processes, no-op cycles per second next to raw asynq, scale-out over worker processes and a
// Redis Cluster, two schedulers with one SIGKILLed, and what the data layout keeps independent
// of a deployment's size: an operator's look at a key and a partitions add next to the
// poller's partition count, the longest script of operations on large states, and the keys
// partitions that came and went leave behind. Each measurement is a function that
// returns a Result holding its figure next to a baseline from the same run (or a design
// baseline where none can be run); Run runs a selection. The measurements start their own
// redis-server processes (internal/redisproc) unless Options.RedisURL names a server, and
// their worker and scheduler processes through Options.Child (`watukuy bench child`, or a
// test binary that re-executes itself). The servers a measurement starts log their slow
// commands, and every result reports the longest script they ran (slowlog.go).
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
)

// Result is one measured figure next to its baseline.
type Result struct {
	// Name identifies the measurement (what --only selects).
	Name string `json:"name"`
	// Value is the figure, in Unit.
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Baseline is the figure Value is compared with, in Unit, and BaselineOf says what it
	// is (raw asynq measured in the same run, or a design baseline where none can be run).
	Baseline   float64 `json:"baseline"`
	BaselineOf string  `json:"baselineOf"`
	// Goal is the measurement's goal in words ("<= 400"), empty when it has none; Met says
	// whether Value meets it (absent without a goal).
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
	// Notes says how it was measured and what limits it.
	Notes string `json:"notes,omitempty"`
	// Details are further figures of the same run (a breakdown, CPU seconds, counts).
	Details map[string]float64 `json:"details,omitempty"`
	// Duration is how long the measurement took, setup included.
	Duration time.Duration `json:"durationNs"`
	// Load1 is the machine's 1-minute load average when the measurement started (the
	// machine may be shared).
	Load1 float64 `json:"loadAvg1AtStart"`
	// LongestScript names the longest Lua script the measurement's own Redis servers ran
	// (their slowlog, setup included), whose duration is Details["longestScriptMs"] (0 and
	// no name when none took slowlogThreshold); neither on a shared server (--redis).
	LongestScript string `json:"longestScript,omitempty"`
}

// Report is a whole run: the results and what they ran on.
type Report struct {
	Started   time.Time `json:"started"`
	GoVersion string    `json:"goVersion"`
	CPUs      int       `json:"cpus"`
	Redis     string    `json:"redis"`
	Options   Options   `json:"options"`
	Results   []Result  `json:"results"`
}

// Options select the measurements and their sizes. Zero fields take the defaults of
// Defaults (the sizes of a large deployment).
type Options struct {
	// Only names the measurements to run (see Names); empty runs all.
	Only []string `json:"only,omitempty"`
	// Keys is the large idle-key count of the memory measurement (also run at 10,000).
	Keys int `json:"keys"`
	// SmallKeys is the small idle-key count of the memory measurement.
	SmallKeys int `json:"smallKeys"`
	// Items is the tracked-item count of the bytes-per-item measurement.
	Items int `json:"items"`
	// DueKeys is the key count of the claim rate and the lateness runs.
	DueKeys int `json:"dueKeys"`
	// Interval is how often each key of the lateness run is due.
	Interval time.Duration `json:"intervalNs"`
	// LatenessFor is how long the lateness run lasts after its warm-up.
	LatenessFor time.Duration `json:"latenessForNs"`
	// NoopKeys is the key count of the no-op and scale-out runs (cycles per round).
	NoopKeys int `json:"noopKeys"`
	// Workers are the worker process counts of the scale-out run.
	Workers []int `json:"workers"`
	// FailoverKeys, FailoverInterval and FailoverFor size the two-scheduler run; the first
	// scheduler is SIGKILLed at a third of FailoverFor.
	FailoverKeys     int           `json:"failoverKeys"`
	FailoverInterval time.Duration `json:"failoverIntervalNs"`
	FailoverFor      time.Duration `json:"failoverForNs"`
	// FailoverTail is how long the run goes on after FailoverFor, so a key whose claim the
	// killed scheduler held (lease TTL + grace, 32 s by default) is seen served, late.
	FailoverTail time.Duration `json:"failoverTailNs"`
	// Concurrency is the asynq concurrency of each worker (and of raw asynq).
	Concurrency int `json:"concurrency"`
	// RegistryKeys is the partition count of the registry-costs run (also run at 10).
	RegistryKeys int `json:"registryKeys"`
	// ParkedOutbox, HeldEvents, ClaimKeys, DeleteItems and Tombstones size the states of the
	// longest-script run: the pending events of other ordering keys beside a retried poison
	// event, the events held behind a retried poison event, the keys in a claimed due set, the
	// tracked items of a deleted partition and the tombstones expiring together.
	ParkedOutbox int `json:"parkedOutbox"`
	HeldEvents   int `json:"heldEvents"`
	ClaimKeys    int `json:"claimKeys"`
	DeleteItems  int `json:"deleteItems"`
	Tombstones   int `json:"tombstones"`
	// ChurnKeys is how many partitions the churn run adds, polls and deletes.
	ChurnKeys int `json:"churnKeys"`
	// RedisURL, when set, is the server every measurement uses instead of starting its own
	// (the cluster run still starts its own cluster); memory figures then include whatever
	// else changes on it.
	RedisURL string `json:"redisURL,omitempty"`
	// Dir holds the servers' directories and the children's files; default a temporary one.
	Dir string `json:"-"`
	// Child returns the command of a child process with the given `bench child` arguments;
	// the measurements with processes need it.
	Child func(args ...string) *exec.Cmd `json:"-"`
	// Log receives progress lines; nil logs nothing.
	Log zerolog.Logger `json:"-"`

	// slow collects the longest script of the measurement running (Run sets it).
	slow *slowest
}

// Defaults are the sizes of a large deployment.
func Defaults() Options {
	return Options{Keys: 1_000_000, SmallKeys: 10_000, Items: 100_000, DueKeys: 100_000, Interval: time.Minute,
		LatenessFor: 2 * time.Minute, NoopKeys: 10_000, Workers: []int{1, 2, 4},
		FailoverKeys: 10_000, FailoverInterval: 10 * time.Second, FailoverFor: 30 * time.Second, FailoverTail: core.DefaultLeaseTTL + core.ClaimGrace + 2*time.Second, Concurrency: 32,
		RegistryKeys: 100_000, ParkedOutbox: 100_000, HeldEvents: 10_000, ClaimKeys: 1_000_000, DeleteItems: 100_000, Tombstones: 100_000,
		ChurnKeys: 1000}
}

func (o *Options) defaults() {
	d := Defaults()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&o.Keys, d.Keys)
	set(&o.SmallKeys, d.SmallKeys)
	set(&o.Items, d.Items)
	set(&o.DueKeys, d.DueKeys)
	setD(&o.Interval, d.Interval)
	setD(&o.LatenessFor, d.LatenessFor)
	set(&o.NoopKeys, d.NoopKeys)
	set(&o.FailoverKeys, d.FailoverKeys)
	setD(&o.FailoverInterval, d.FailoverInterval)
	setD(&o.FailoverFor, d.FailoverFor)
	setD(&o.FailoverTail, d.FailoverTail)
	set(&o.Concurrency, d.Concurrency)
	set(&o.RegistryKeys, d.RegistryKeys)
	set(&o.ParkedOutbox, d.ParkedOutbox)
	set(&o.HeldEvents, d.HeldEvents)
	set(&o.ClaimKeys, d.ClaimKeys)
	set(&o.DeleteItems, d.DeleteItems)
	set(&o.Tombstones, d.Tombstones)
	set(&o.ChurnKeys, d.ChurnKeys)
	if len(o.Workers) == 0 {
		o.Workers = d.Workers
	}
}

// measurement is one selectable measurement.
type measurement struct {
	name string
	run  func(ctx context.Context, o Options) ([]Result, error)
}

func measurements() []measurement {
	return []measurement{
		{"idle-bytes", func(ctx context.Context, o Options) ([]Result, error) {
			small, err := IdleKeyBytes(ctx, o, o.SmallKeys)
			if err != nil || o.Keys == o.SmallKeys {
				return []Result{small}, err
			}
			big, err := IdleKeyBytes(ctx, o, o.Keys)
			return []Result{small, big}, err
		}},
		{"item-bytes", one(ItemBytes)},
		{"item-bytes-payloads", one(ItemBytesPayloads)},
		{"patch-page", one(PatchPage)},
		{"claim-rate", one(ClaimRate)},
		{"noop", perTask(NoopCycles)},
		{"idle-costs", perTask(IdleCycleCosts)},
		{"lateness", one(Lateness)},
		{"scale-out", ScaleOut},
		{"two-schedulers", one(TwoSchedulers)},
		{"registry-costs", RegistryCosts},
		{"longest-script", LongestScripts},
		{"churn", one(Churn)},
	}
}

// perTask runs f at 10 keys a task, then at 1.
func perTask(f func(ctx context.Context, o Options, perTask int) (Result, error)) func(ctx context.Context, o Options) ([]Result, error) {
	return func(ctx context.Context, o Options) ([]Result, error) {
		var out []Result
		for _, per := range []int{10, 1} {
			r, err := f(ctx, o, per)
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
		return out, nil
	}
}

func one(f func(ctx context.Context, o Options) (Result, error)) func(ctx context.Context, o Options) ([]Result, error) {
	return func(ctx context.Context, o Options) ([]Result, error) {
		r, err := f(ctx, o)
		return []Result{r}, err
	}
}

// Names lists the measurements Run knows, in the order it runs them.
func Names() []string {
	var out []string
	for _, m := range measurements() {
		out = append(out, m.name)
	}
	return out
}

// Run runs the measurements of o.Only (all when empty), one after another, and returns
// their results; it stops at the first that fails.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	for _, n := range o.Only {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("bench: unknown measurement %q (known: %s)", n, strings.Join(Names(), ", "))
		}
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "watukuy-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	rep := &Report{Started: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Redis: redisVersion(ctx, o), Options: o}
	for _, m := range measurements() {
		if len(o.Only) > 0 && !slices.Contains(o.Only, m.name) {
			continue
		}
		o.Log.Info().Str("measurement", m.name).Msg("bench: starting")
		o.slow = &slowest{}
		rs, err := m.run(ctx, o)
		o.slow.note(rs)
		rep.Results = append(rep.Results, rs...)
		if err != nil {
			return rep, fmt.Errorf("bench: %s: %w", m.name, err)
		}
		for _, r := range rs {
			o.Log.Info().Str("measurement", r.Name).Float64("value", r.Value).Str("unit", r.Unit).Float64("baseline", r.Baseline).Dur("took", r.Duration).Msg("bench: done")
		}
	}
	return rep, nil
}

// redisVersion is the redis-server version the run uses.
func redisVersion(ctx context.Context, o Options) string {
	if o.RedisURL != "" {
		rdb, err := connect(ctx, o.RedisURL)
		if err != nil {
			return ""
		}
		defer rdb.Close()
		return infoField(ctx, rdb, "server", "redis_version")
	}
	out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// start begins a result: its name, the load average now and the start time.
func start(name string) (Result, time.Time) {
	return Result{Name: name, Load1: loadAvg()}, time.Now()
}

// meet sets Met from ok.
func (r *Result) meet(ok bool) { r.Met = &ok }

// loadAvg is the 1-minute load average (0 where /proc/loadavg is missing).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// PrintTable writes the results as a table: each figure next to its baseline.
func PrintTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tVALUE\tBASELINE\tRATIO\tGOAL\tMET\tLONGEST SCRIPT\tLOAD\tTOOK")
	for _, r := range rep.Results {
		ratio := "-"
		if r.Baseline != 0 {
			ratio = fmt.Sprintf("%.2fx", r.Value/r.Baseline)
		}
		met := "-"
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*r.Met]
		}
		goal := r.Goal
		if goal == "" {
			goal = "-"
		}
		script := "-"
		if v, ok := r.Details["longestScriptMs"]; ok && r.LongestScript != "" {
			script = fmt.Sprintf("%s ms (%s)", num(v), r.LongestScript)
		} else if ok {
			script = fmt.Sprintf("< %s ms", num(millis(slowlogThreshold)))
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s (%s)\t%s\t%s\t%s\t%s\t%.2f\t%s\n", r.Name, num(r.Value), r.Unit, num(r.Baseline), r.BaselineOf,
			ratio, goal, met, script, r.Load1, r.Duration.Round(100*time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Results {
		if r.Notes != "" {
			fmt.Fprintf(w, "\n%s: %s\n", r.Name, r.Notes)
		}
		if len(r.Details) > 0 {
			keys := make([]string, 0, len(r.Details))
			for k := range r.Details {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + "=" + num(r.Details[k])
			}
			fmt.Fprintf(w, "  %s\n", strings.Join(parts, " "))
		}
	}
	return nil
}

// num formats a figure with at most 3 significant decimals.
func num(v float64) string {
	switch {
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1 || v <= -1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// benchTimeout bounds a read or write of the bench's clients: registering a million keys is
// one pipeline of two million commands, whose write outlasted go-redis' default 3 s on a
// loaded machine.
const benchTimeout = time.Minute

// connect opens a client from a redis://, unix:// or redis+cluster:// URL.
func connect(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	var c redis.UniversalClient
	if rest, ok := strings.CutPrefix(rawURL, "redis+cluster://"); ok {
		opt, err := redis.ParseClusterURL("redis://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redis URL %s: %w", rawURL, err)
		}
		opt.PoolSize = 128
		opt.ReadTimeout, opt.WriteTimeout = benchTimeout, benchTimeout
		c = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis URL %s: %w", rawURL, err)
		}
		opt.PoolSize = 128 // the seeding runs many cycles at once
		opt.ReadTimeout, opt.WriteTimeout = benchTimeout, benchTimeout
		c = redis.NewClient(opt)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis at %s: %w", rawURL, err)
	}
	return c, nil
}

// infoField reads one field of an INFO section (of the first node for a cluster client).
func infoField(ctx context.Context, rdb redis.UniversalClient, section, field string) string {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	return fieldOf(info, field)
}

// fieldOf is field's value in an INFO reply ("" when absent).
func fieldOf(info, field string) string {
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

// Metrics are the result's figures for testing.B.ReportMetric: the value under its unit, the
// baseline under "baseline-" and the unit, and the details under their names (no spaces).
func (r Result) Metrics() map[string]float64 {
	m := map[string]float64{r.Unit: r.Value, "baseline-" + r.Unit: r.Baseline}
	for k, v := range r.Details {
		m[strings.ReplaceAll(k, " ", "_")] = v
	}
	return m
}
