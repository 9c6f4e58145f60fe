package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// world is one operator test: a private redis-server, a fake API, and an engine in the test
// that plays the worker. The CLI runs against the same Redis with --redis only (no --config),
// as an operator's would at 3 a.m.
type world struct {
	t   *testing.T
	b   redistest.Backend
	api *fakeapi.API
	eng *watukuy.Engine
}

func newWorld(t *testing.T) *world {
	t.Helper()
	b := redistest.Real(t)
	eng, err := watukuy.New(watukuy.Options{Redis: b.Client, InstanceID: "test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, b: b, api: fakeapi.New(), eng: eng}
}

// poller is a change-feed poller over the world's fake API, 10 items a page.
func (w *world) poller(name string, mod ...func(*watukuytype.Poller)) watukuytype.Poller {
	p := watukuytype.Poller{Name: name, Fetch: w.api.ChangeFeed(10), Version: watukuytype.Field("version"),
		Handler:  func(context.Context, watukuytype.Event) error { return nil },
		Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Minute},
		Delivery: watukuytype.Delivery{Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	for _, m := range mod {
		m(&p)
	}
	return p
}

func (w *world) register(ps ...watukuytype.Poller) {
	w.t.Helper()
	for _, p := range ps {
		if err := w.eng.Register(p); err != nil {
			w.t.Fatal(err)
		}
	}
}

// tick runs the due cycles and fails the test on any error.
func (w *world) tick() watukuytype.TickReport {
	w.t.Helper()
	rep, err := w.eng.Tick(context.Background(), time.Second)
	if err != nil || len(rep.Errors) > 0 {
		w.t.Fatalf("tick: %v %v", err, rep.Errors)
	}
	return rep
}

// cli runs a command against the world's Redis and returns stdout, stderr and the exit code
// Execute would use.
func (w *world) cli(args ...string) (string, string, int) {
	w.t.Helper()
	out, errb, err := run(w.t, append(args, "--redis", w.b.URL)...)
	if err != nil {
		errb += err.Error()
	}
	return out, errb, command.ExitCode(err)
}

// ok runs a command that must succeed.
func (w *world) ok(args ...string) string {
	w.t.Helper()
	out, errb, code := w.cli(args...)
	if code != command.ExitOK {
		w.t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errb)
	}
	return out
}

// fails runs a command that must exit with code and say want on stderr.
func (w *world) fails(code int, want string, args ...string) string {
	w.t.Helper()
	out, errb, got := w.cli(args...)
	if got != code || !strings.Contains(errb, want) {
		w.t.Fatalf("%v: exit %d (want %d), stderr does not say %q:\n%s\nstdout:\n%s", args, got, code, want, errb, out)
	}
	return errb
}

// startCLI runs a command in the background with ctx (cancel is Ctrl-C) and hands its stdout
// over line by line; the command blocks on a line until the test has read it. errc gets the
// command's error once stdout is drained.
func startCLI(t *testing.T, ctx context.Context, args ...string) (*bufio.Scanner, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	root := Root()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	root.SilenceErrors, root.SilenceUsage = true, true
	errc := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		_ = pw.Close()
		errc <- err
	}()
	t.Cleanup(func() { _ = pr.Close() }) // a failed test must not leave the command blocked
	return bufio.NewScanner(pr), errc
}

// next reads the next line of a background command, or fails.
func next(t *testing.T, s *bufio.Scanner) string {
	t.Helper()
	if !s.Scan() {
		t.Fatalf("the command ended early: %v", s.Err())
	}
	return s.Text()
}

// jsonOf decodes a command's --json output.
func jsonOf[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return v
}

func (w *world) hget(key, field string) string {
	return w.b.Client.HGet(context.Background(), key, field).Val()
}

// source is where the registry says a key comes from ("config" or "cli"), "" when it does
// not hold the key.
func (w *world) source(poller, partition string) string {
	w.t.Helper()
	s, err := redisstore.New(w.b.Client, redisstore.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	_, e, found, err := s.Lookup(context.Background(), watukuytype.Key{Poller: poller, Partition: partition})
	if err != nil {
		w.t.Fatal(err)
	}
	if !found {
		return ""
	}
	return e.Source
}

func (w *world) inspect(poller, partition string) watukuytype.KeyInfo {
	w.t.Helper()
	ki, err := w.eng.Inspect(context.Background(), watukuytype.Key{Poller: poller, Partition: partition})
	if err != nil {
		w.t.Fatal(err)
	}
	return ki
}

var wordRE = regexp.MustCompile(`\S+`)

// parseTable reads the aligned table whose header starts with first: every row is cut at the
// columns' header offsets. The table ends at a blank line or at the first line that does not
// fit the columns (a summary line), so a misaligned row shows up as a missing row.
func parseTable(t *testing.T, out, first string) []map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, first+" ") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("no table with column %s in:\n%s", first, out)
	}
	header := lines[start]
	locs := wordRE.FindAllStringIndex(header, -1)
	aligned := func(l string) bool {
		for _, loc := range locs[1:] {
			if loc[0] < len(l) && (l[loc[0]-1] != ' ' || l[loc[0]] == ' ' && strings.TrimSpace(l[loc[0]:]) != "") {
				return false
			}
		}
		return true
	}
	var rows []map[string]string
	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" || !aligned(l) {
			break
		}
		row := map[string]string{}
		for i, loc := range locs {
			if loc[0] >= len(l) {
				break
			}
			end := len(l)
			if i+1 < len(locs) && locs[i+1][0] < end {
				end = locs[i+1][0]
			}
			row[header[loc[0]:loc[1]]] = strings.TrimSpace(l[loc[0]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

// rowWhere returns the row whose columns have the given values, or fails.
func rowWhere(t *testing.T, rows []map[string]string, kv ...string) map[string]string {
	t.Helper()
next:
	for _, r := range rows {
		for i := 0; i < len(kv); i += 2 {
			if r[kv[i]] != kv[i+1] {
				continue next
			}
		}
		return r
	}
	t.Fatalf("no row with %v in %v", kv, rows)
	return nil
}

// detail reads a two-column table (inspect --partition) into a map.
func detail(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// trigger, pause and resume act on every partition without --partition, report the status
// afterwards, and change the state in Redis.
func TestTriggerPauseResume(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(2, "o", nil)
	w.register(w.poller("tenants", func(p *watukuytype.Poller) { p.Partitions = []string{"a", "b"} }))
	w.tick()
	ctx := context.Background()

	rows := parseTable(t, w.ok("pause", "--poller", "tenants"), "POLLER")
	if len(rows) != 2 || rows[0]["STATUS"] != "paused" || rows[1]["STATUS"] != "paused" {
		t.Fatalf("pause: %v", rows)
	}
	for _, p := range []string{"a", "b"} {
		if got := w.hget("wk:{tenants|"+p+"}:state", "paused"); got != "1" {
			t.Fatalf("partition %s paused = %q", p, got)
		}
	}
	sts := jsonOf[[]keyStatus](t, w.ok("resume", "--poller", "tenants", "--partition", "a", "--json"))
	if len(sts) != 1 || sts[0] != (keyStatus{"tenants", "a", "idle"}) {
		t.Fatalf("resume --json: %+v", sts)
	}
	if w.b.Client.HExists(ctx, "wk:{tenants|a}:state", "paused").Val() || w.hget("wk:{tenants|b}:state", "paused") != "1" {
		t.Fatal("resume of a touched b or missed a")
	}

	before := time.Now()
	out := w.ok("trigger", "--poller", "tenants", "--partition", "a")
	rowWhere(t, parseTable(t, out, "POLLER"), "POLLER", "tenants", "PARTITION", "a", "STATUS", "idle")
	if !strings.Contains(out, "triggered 1 key(s) of tenants: due now") {
		t.Fatalf("trigger: %s", out)
	}
	score := w.b.Client.ZScore(ctx, "wk:{global}:due:tenants", "tenants|a").Val()
	if w.hget("wk:{tenants|a}:state", "nextDue") != "0" || score > float64(time.Now().UnixMilli()) || score < float64(before.Add(-time.Second).UnixMilli()) {
		t.Fatalf("trigger: due score %v, nextDue %q", score, w.hget("wk:{tenants|a}:state", "nextDue"))
	}
	if rep := w.tick(); rep.Ran != 1 {
		t.Fatalf("after trigger the key should run once (b is paused): %+v", rep)
	}

	w.fails(command.ExitUsage, "--poller is required", "pause")
	w.fails(command.ExitUsage, `unknown poller "x"`, "trigger", "--poller", "x")
}

// exitCode maps errors as Execute does: usage errors and unknown pollers or partitions are 2,
// other failures 1.
func TestExitCode(t *testing.T) {
	nf := &watukuytype.NotFoundError{Poller: "x"}
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, command.ExitOK},
		{errors.New("redis down"), command.ExitFailed},
		{&watukuytype.ReplayUnavailableError{}, command.ExitFailed},
		{&watukuytype.ConfigError{Poller: "x"}, command.ExitFailed},
		{command.Usagef("--poller is required"), command.ExitUsage},
		{nf, command.ExitUsage},
		{fmt.Errorf("inspect: %w", nf), command.ExitUsage},
		{errors.New(`unknown command "x" for "watukuy"`), command.ExitUsage},
	} {
		if got := command.ExitCode(c.err); got != c.want {
			t.Errorf("command.ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	// Through the command tree: a bad flag value and an unknown command.
	if _, _, err := run(t, "parked", "ls", "--poller", "p", "--limit", "many"); command.ExitCode(err) != command.ExitUsage {
		t.Errorf("bad --limit: %v", err)
	}
	for _, args := range [][]string{{"nonsense"}, {"parked"}, {"partitions", "bogus"}} {
		if _, _, err := run(t, args...); command.ExitCode(err) != command.ExitUsage {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// The operator flags come from the command line only; settings still come from the
// environment.
func TestOperatorFlagsIgnoreTheEnvironment(t *testing.T) {
	b := redistest.Real(t)
	eng, _ := watukuy.New(watukuy.Options{Redis: b.Client})
	w := &world{t: t, b: b, api: fakeapi.New(), eng: eng}
	w.register(w.poller("tenants", func(p *watukuytype.Poller) { p.Partitions = []string{"a"} }))
	w.tick()
	t.Setenv("WATUKUY_REDIS_URL", b.URL)
	t.Setenv("WATUKUY_YES", "true")
	t.Setenv("WATUKUY_POLLER", "tenants")
	if _, _, err := run(t, "partitions", "delete", "--poller", "tenants", "--partition", "a"); command.ExitCode(err) != command.ExitUsage || !strings.Contains(err.Error(), "pass --yes") {
		t.Fatalf("WATUKUY_YES confirmed a delete: %v", err)
	}
	if _, _, err := run(t, "pause"); command.ExitCode(err) != command.ExitUsage {
		t.Fatalf("WATUKUY_POLLER named the poller: %v", err)
	}
}

// --json of the long-running commands means JSON logs; it contradicts --log-format console.
// dev's handler prints events as JSON lines.
func TestProcessJSON(t *testing.T) {
	if _, _, err := run(t, "run", "--json", "--log-format", "console"); command.ExitCode(err) != command.ExitUsage || !strings.Contains(err.Error(), "contradict") {
		t.Fatalf("run --json --log-format console: %v", err)
	}
	var b strings.Builder
	ev := watukuytype.Event{ID: "e1", Poller: "orders", Type: watukuytype.Created, Identity: "o1", Item: json.RawMessage(`{"id":"o1"}`)}
	if err := printEvents(&b, true)(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	got := jsonOf[watukuytype.Event](t, b.String())
	if got.ID != "e1" || got.Identity != "o1" || strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("dev --json event line: %q", b.String())
	}
}

// Looking at an empty database (a wrong --redis or --prefix) writes nothing into it.
func TestReadOnlyOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	out := w.ok("inspect", "--prefix", "typo")
	if !strings.Contains(out, "no keys") {
		t.Fatalf("inspect of an empty database: %s", out)
	}
	w.fails(command.ExitUsage, `unknown poller "orders"`, "pause", "--prefix", "typo", "--poller", "orders", "--partition", "")
	w.fails(command.ExitUsage, `unknown poller "orders"`, "inspect", "--prefix", "typo", "--poller", "orders", "--partition", "eu")
	if keys := w.b.Client.Keys(context.Background(), "typo:*").Val(); len(keys) != 0 {
		t.Fatalf("operator commands wrote %v into an empty database", keys)
	}
}
