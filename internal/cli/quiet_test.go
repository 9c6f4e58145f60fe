package cli

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// unsetEnv makes name unset for the test (t.Setenv restores it afterwards).
func unsetEnv(t *testing.T, name string) {
	t.Setenv(name, "")
	os.Unsetenv(name)
}

// An operator command run from a project directory does not read ./watukuy.yaml: the file
// may name variables only the workers have. It reads it with --config, or when the file is
// where the Redis URL is; the commands that run pollers read it by default.
// Not parallel: it changes the working directory.
func TestOperatorCommandsLeaveTheConfigFileAlone(t *testing.T) {
	unsetEnv(t, "WATUKUY_REDIS_URL")
	unsetEnv(t, "WATUKUY_CONFIG")
	unsetEnv(t, "WATUKUY_TEST_WORKER_TOKEN")
	b := redistest.Miniredis(t)
	dir := t.TempDir()
	body := fmt.Sprintf(`redis: %s
pollers:
  - name: orders
    request: {url: "http://127.0.0.1:1/orders", headers: {Authorization: "Bearer ${WATUKUY_TEST_WORKER_TOKEN}"}}
    cursor: {strategy: snapshotDiff}
    delivery: {stdout: {}}
`, b.URL)
	if err := os.WriteFile(dir+"/watukuy.yaml", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)

	for _, args := range [][]string{
		{"inspect", "--redis", b.URL},
		{"inspect", "--redis", b.URL, "--json"},
		{"partitions", "ls", "--redis", b.URL, "--poller", "orders"},
	} {
		out, errb, err := run(t, args...)
		if err != nil && !errors.As(err, new(*watukuytype.NotFoundError)) { // no worker registered orders: partitions ls says so
			t.Fatalf("%v from a project directory: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, errb)
		}
		if err != nil && strings.Contains(err.Error(), "WATUKUY_TEST_WORKER_TOKEN") {
			t.Fatalf("%v read ./watukuy.yaml: %v", args, err)
		}
	}

	const unset = `environment variable "WATUKUY_TEST_WORKER_TOKEN" is not set`
	for _, tc := range []struct {
		args []string
		also string
	}{
		{[]string{"inspect", "--redis", b.URL, "--config", "watukuy.yaml"}, ""}, // given: read
		{[]string{"inspect"}, "read for its redis: URL"},                        // the URL is in the file
		{[]string{"tick", "--redis", b.URL}, ""},                                // tick runs the file's pollers
	} {
		if _, _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), unset) || !strings.Contains(err.Error(), tc.also) {
			t.Fatalf("%v: %v, want the config's error %q (and %q)", tc.args, err, unset, tc.also)
		}
	}
}

// dev's Redis (miniredis, which has no CONFIG) raises no eviction alarm: operator commands
// say nothing, and tick runs without --allow-eviction, saying at info that the policy could
// not be read. A Redis that does evict still warns and refuses (internal/app).
func TestNoEvictionAlarmOnMiniredis(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	cfg := listedOrders(t, 2)

	_, errb, err := run(t, "tick", "--redis", b.URL, "--config", cfg)
	if err != nil {
		t.Fatalf("tick against miniredis: %v\n%s", err, errb)
	}
	if !strings.Contains(errb, `"level":"info"`) || !strings.Contains(errb, "maxmemory-policy could not be read") || strings.Contains(errb, `"level":"warn"`) || strings.Contains(errb, "eviction allowed") {
		t.Fatalf("tick's log against miniredis, want one info line on the unread policy:\n%s", errb)
	}
	for _, args := range [][]string{{"inspect"}, {"trigger", "--poller", "orders"}} {
		if out, errb, err := run(t, append(args, "--redis", b.URL)...); err != nil || errb != "" {
			t.Fatalf("%v against miniredis: %v\nstdout:\n%s\nstderr, want nothing:\n%s", args, err, out, errb)
		}
	}
}

// With no --log-level nothing below info is logged (the HTTP request lines are debug), each
// line names its poller once, and an operator command logs in console form, never JSON.
func TestLogLevelAndForm(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	cfg := listedOrders(t, 2)

	_, errb, err := run(t, "tick", "--redis", b.URL, "--config", cfg)
	if err != nil || strings.Contains(errb, "http request") || strings.Contains(errb, `"level":"debug"`) {
		t.Fatalf("tick with no --log-level: %v, want no debug line:\n%s", err, errb)
	}
	fresh := redistest.Miniredis(t) // every key due again
	_, errb, err = run(t, "tick", "--redis", fresh.URL, "--config", cfg, "--log-level", "debug")
	var requests int
	for _, l := range strings.Split(errb, "\n") {
		if strings.Contains(l, `"message":"http request"`) {
			requests++
			if n := strings.Count(l, `"poller":`); n != 1 {
				t.Fatalf("the poller field %d times in %s", n, l)
			}
		}
	}
	if err != nil || requests == 0 {
		t.Fatalf("tick --log-level debug: %v, %d request lines:\n%s", err, requests, errb)
	}
	if _, _, err := run(t, "tick", "--redis", b.URL, "--config", cfg, "--log-level", "loud"); command.ExitCode(err) != command.ExitUsage || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Fatalf("--log-level loud: %v", err)
	}

	_, errb, err = run(t, "inspect", "--redis", b.URL, "--log-level", "debug")
	if err != nil || !strings.Contains(errb, "maxmemory-policy could not be read") || strings.Contains(errb, "{\"level\"") {
		t.Fatalf("inspect's log, want console lines:\n%v\n%s", err, errb)
	}
}

// go-redis's own lines (a failed dial, retried) go to the command's log at debug, so the
// operator sees one clean error on stderr. Not parallel: go-redis has one logger per process.
func TestRedisDialErrorIsSaidOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "redis://" + l.Addr().String()
	l.Close()
	_, errb, err := run(t, "inspect", "--redis", dead)
	if err == nil || !strings.Contains(err.Error(), "does not answer") || errb != "" {
		t.Fatalf("inspect on a dead Redis: %v\nstderr, want nothing:\n%s", err, errb)
	}
	_, errb, _ = run(t, "inspect", "--redis", dead, "--log-level", "debug")
	if !strings.Contains(errb, "failed to dial") || !strings.Contains(errb, "from=") {
		t.Fatalf("inspect --log-level debug on a dead Redis: go-redis's lines are not in the log:\n%s", errb)
	}
}

// --help states each command's own default log format: json for the processes, console for
// dev and the operator commands.
func TestLogFormatDefaults(t *testing.T) {
	t.Parallel()
	for use, want := range map[string]string{"worker": "json", "scheduler": "json", "run": "json", "tick": "json",
		"dev": "console", "inspect": "console", "validate": "console", "backfill": "console"} {
		cmd, _, err := Root().Find([]string{use})
		if err != nil {
			t.Fatal(err)
		}
		if f := cmd.Flags().Lookup("log-format"); f == nil || f.DefValue != want || !strings.Contains(cmd.Flags().FlagUsages(), `(default "`+want+`")`) {
			t.Fatalf("%s --log-format: default %v, want %s", use, f, want)
		}
	}
}

// validate --probe names the key once: the line says which probe failed, the error why.
func TestProbeFailureSaysItOnce(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	cfg := writeConfig(t, fmt.Sprintf(`pollers:
  - name: widgets
    request: {url: %s/items}
    items: data
    cursor: {strategy: snapshotDiff, param: page}
    delivery: {stdout: {}}
`, srv.URL))
	out, _, err := run(t, "validate", "--config", cfg, "--probe")
	want := "probe widgets: FAILED: HTTP 500 from " + srv.URL + "/items?page=1\n"
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(out, want) {
		t.Fatalf("validate --probe on an API answering 500: %v, want the line %q in:\n%s", err, want, out)
	}
}

// listedOrders serves n orders from a fake API, for as long as the test runs, and writes a
// config polling them as a full listing into the stdout sink.
func listedOrders(t *testing.T, n int) string {
	t.Helper()
	api := fakeapi.New()
	api.PutMany(n, "o", map[string]any{"total": 1})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	t.Cleanup(srv.Close)
	return writeConfig(t, fmt.Sprintf(`pollers:
  - name: orders
    request: {url: %s/list}
    items: data
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery: {stdout: {}}
`, srv.URL))
}
