package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/buildinfo"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// run executes the command tree with args and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := Root()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	root.SilenceErrors, root.SilenceUsage = true, true
	err := root.Execute()
	return out.String(), errb.String(), err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "watukuy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tick runs the due cycles of a config file's pollers against a real Redis, prints the
// report (human and --json) and delivers through the stdout sink.
func TestTick(t *testing.T) {
	b := redistest.Real(t)
	api := fakeapi.New()
	api.PutMany(3, "o", map[string]any{"total": 1})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	cfg := writeConfig(t, fmt.Sprintf(`pollers:
  - name: orders
    request: {url: %s/list}
    items: data
    version: version
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery: {stdout: {}}
`, srv.URL))
	t.Setenv("WATUKUY_REDIS_URL", b.URL) // the environment supplies --redis
	out, _, err := run(t, "tick", "--config", cfg, "--log-format", "console")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[3], "ran 1") || !strings.Contains(lines[3], "events 3") {
		t.Fatalf("tick output:\n%s", out)
	}
	var ev struct{ Type, Identity string }
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev.Type != "created" {
		t.Fatalf("the stdout sink line %q: %v", lines[0], err)
	}
	api.Put("o0001", map[string]any{"total": 2})
	// Make the key due now, as a trigger does.
	if err := b.Client.HSet(t.Context(), "wk:{orders|}:state", "nextDue", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.ZAdd(t.Context(), "wk:{global}:due:orders", redisZ("orders|")).Err(); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "tick", "--config", cfg, "--json")
	if err != nil {
		t.Fatal(err)
	}
	last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
	var rep struct {
		Ran, Events, Delivered int
		Errors                 []string
	}
	if err := json.Unmarshal([]byte(last), &rep); err != nil || rep.Ran != 1 || rep.Events != 1 || rep.Delivered != 1 {
		t.Fatalf("tick --json: %q (%v)", last, err)
	}
	// Nothing due: the tick says when the next key is.
	out, _, err = run(t, "tick", "--config", cfg, "--log-format", "console")
	if err != nil || !strings.Contains(out, "ran 0") || !strings.Contains(out, "nothing ran: the next key due is orders") {
		t.Fatalf("a tick with nothing due: %q (%v)", out, err)
	}
}

// A broken config file is reported with file:line and field, and nothing runs.
func TestConfigErrorsNameFileLineField(t *testing.T) {
	cfg := writeConfig(t, "pollers:\n  - name: orders\n    request: {url: http://x}\n    cursor: {strategy: sideways}\n    delivery: {stdout: {}}\n")
	_, _, err := run(t, "tick", "--config", cfg, "--redis", "redis://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), filepath.Base(cfg)+":4:") || !strings.Contains(err.Error(), "cursor.strategy") {
		t.Fatalf("err = %v", err)
	}
}

// A missing Redis URL and a bad flag are usage errors that say what to do.
func TestUsageErrors(t *testing.T) {
	t.Setenv("WATUKUY_REDIS_URL", "")
	os.Unsetenv("WATUKUY_REDIS_URL")
	_, _, err := run(t, "tick", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	if err == nil || !strings.Contains(err.Error(), "--config") && !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing config: %v", err)
	}
	if _, _, err := run(t, "tick", "--log-format", "xml", "--redis", "redis://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "json or console") {
		t.Fatalf("bad log format: %v", err)
	}
	if _, _, err := run(t, "tick", "--no-such-flag"); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
}

func redisZ(member string) redis.Z { return redis.Z{Score: 0, Member: member} }

// listPoller starts a fake API with two items and returns the config entry of a snapshotDiff
// poller over it, named name, that prints its events to stdout.
func listPoller(t *testing.T) func(name string) string {
	api := fakeapi.New()
	api.PutMany(2, "o", nil)
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	t.Cleanup(srv.Close)
	return func(name string) string {
		return fmt.Sprintf(`  - name: %s
    request: {url: %s/list}
    items: data
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery: {stdout: {}}
`, name, srv.URL)
	}
}

// tick --poller runs only the named pollers of the config; a name the config lacks is a usage
// error that lists the known ones.
func TestTickOnlyNamedPollers(t *testing.T) {
	b := redistest.Real(t)
	poller := listPoller(t)
	cfg := writeConfig(t, "pollers:\n"+poller("orders")+poller("customers"))
	out, _, err := run(t, "tick", "--config", cfg, "--redis", b.URL, "--poller", "customers", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Ran, Events int }
	last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
	if err := json.Unmarshal([]byte(last), &rep); err != nil || rep.Ran != 1 || rep.Events != 2 {
		t.Fatalf("tick --poller customers: %q (%v)", last, err)
	}
	if n, _ := b.Client.Exists(t.Context(), "wk:{orders|}:items").Result(); n != 0 {
		t.Fatal("tick --poller customers ran orders")
	}
	_, _, err = run(t, "tick", "--config", cfg, "--redis", b.URL, "--poller", "nope")
	if command.ExitCode(err) != command.ExitUsage || !strings.Contains(err.Error(), `known: "orders", "customers"`) {
		t.Fatalf("unknown --poller: exit %d, %v", command.ExitCode(err), err)
	}
}

// drain reads a background command's remaining output after Ctrl-C and returns its error.
func drain(s *bufio.Scanner, errc <-chan error) error {
	for s.Scan() {
	}
	return <-errc
}

// run: a scheduler and a worker in one process against a real Redis deliver the config's
// pollers to the stdout sink; Ctrl-C stops it cleanly.
func TestRunCommand(t *testing.T) {
	b := redistest.Real(t)
	api := fakeapi.New()
	api.PutMany(3, "o", nil)
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	cfg := writeConfig(t, fmt.Sprintf(`pollers:
  - name: orders
    request: {url: %s/list}
    items: data
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery: {stdout: {}}
`, srv.URL))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lines, errc := startCLI(t, ctx, "run", "--config", cfg, "--redis", b.URL, "--listen", "off")
	seen := map[string]bool{}
	for len(seen) < 3 {
		ev := jsonOf[watukuytype.Event](t, next(t, lines))
		if ev.Type != watukuytype.Created || ev.Poller != "orders" {
			t.Fatalf("run delivered %+v", ev)
		}
		seen[ev.Identity] = true
	}
	if n, _ := b.Client.HLen(ctx, "wk:{orders|}:items").Result(); n != 3 {
		t.Fatalf("run tracked %d items, want 3", n)
	}
	cancel()
	if err := drain(lines, errc); err != nil {
		t.Fatalf("run after Ctrl-C: %v", err)
	}
}

// dev: the embedded Redis and demo shop; the banner names the Redis URL (operator commands
// work against it), events print as readable lines, or as JSON lines with --json.
func TestDevCommand(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprint("json=", asJSON), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			args := []string{"dev", "--listen", "off"}
			if asJSON {
				args = append(args, "--json")
			}
			lines, errc := startCLI(t, ctx, args...)
			created := map[string]int{}
			url, version := "", ""
			for created["orders"] < 5 || created["customers"] < 5 {
				l := next(t, lines)
				switch {
				case strings.HasPrefix(l, "version "):
					version = strings.TrimSpace(strings.TrimPrefix(l, "version"))
				case asJSON:
					ev := jsonOf[watukuytype.Event](t, l)
					if ev.Type == watukuytype.Created {
						created[ev.Poller]++
					}
				case strings.HasPrefix(l, "redis "):
					url = strings.TrimSpace(strings.TrimPrefix(l, "redis"))
				case strings.Contains(l, " created "):
					created[strings.Fields(l)[1]]++
				}
			}
			if want := buildinfo.Read().String(); !asJSON && version != want {
				t.Errorf("dev's banner names the build %q, want %q", version, want)
			}
			if !asJSON { // events came, so the keys are registered
				out, _, err := run(t, "inspect", "--redis", url, "--json")
				if err != nil || !strings.Contains(out, `"poller":"orders"`) {
					t.Fatalf("inspect against dev's Redis %q: %v\n%s", url, err, out)
				}
			}
			cancel()
			if err := drain(lines, errc); err != nil {
				t.Fatalf("dev after Ctrl-C: %v", err)
			}
		})
	}
}
