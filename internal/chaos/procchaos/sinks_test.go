//go:build unix

package procchaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/brokertest"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// The broker sinks under SIGKILL (sinkrun_test.go): 100 kills of the worker delivering a key, aimed
// at the moment the key's event reached the broker, then the broker must hold every committed
// event: once for NATS and PostgreSQL, at least once for RabbitMQ. WATUKUY_SINK_CHAOS_LOGS=1
// prints the processes' logs of a run that passed too.

func TestSinkChaosNATS(t *testing.T) {
	url := brokertest.NATS(t)
	runSinkTest(t, &natsTarget{url: url, stream: brokertest.Name(t)})
}

func TestSinkChaosAMQP(t *testing.T) {
	url := brokertest.AMQP(t)
	runSinkTest(t, &amqpTarget{url: url, name: brokertest.Name(t)})
}

func TestSinkChaosPostgres(t *testing.T) {
	url := brokertest.Postgres(t)
	runSinkTest(t, &pgTarget{url: url, schema: brokertest.Name(t)})
}

// runSinkTest builds the binaries, runs runSinkChaos against target and fails on every
// problem it reports.
func runSinkTest(t *testing.T, target sinkTarget) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(redistest.RequireEnv) != "" {
			t.Fatalf("redis-server not found and %s is set: %v", redistest.RequireEnv, err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := target.Remove(ctx); err != nil {
			t.Errorf("remove what the run created at the broker: %v", err)
		}
	})
	o := sinkOptions{Target: target, Dir: t.TempDir(), BinDir: t.TempDir(), Kills: 100, KillFor: 100 * time.Second,
		Quiesce: 60 * time.Second, Logf: t.Logf}
	if testing.Short() {
		o.Kills = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := BuildBinaries(ctx, o.BinDir); err != nil {
		t.Fatal(err)
	}
	rep, err := runSinkChaos(ctx, o)
	for _, l := range rep.Lines() {
		t.Log(l)
	}
	for _, s := range rep.LogSamples {
		t.Logf("log: %s", s)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("WATUKUY_SINK_CHAOS_LOGS") != "" {
			printSinkLogs(t, rep.Logs)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

// printSinkLogs prints the tails of the scheduler's log and of the last workers' (the earlier
// ones were killed mid-cycle), without the debug lines.
func printSinkLogs(t *testing.T, logs []string) {
	var workers []string
	for _, p := range logs {
		if strings.HasPrefix(filepath.Base(p), "scheduler-") {
			b, _ := os.ReadFile(p)
			t.Logf("--- %s (last 4000 bytes):\n%s", filepath.Base(p), lastOf(withoutDebug(string(b)), 4000))
		} else {
			workers = append(workers, p)
		}
	}
	for _, p := range workers[max(0, len(workers)-sinkWorkers):] {
		b, _ := os.ReadFile(p)
		t.Logf("--- %s (last 4000 bytes):\n%s", filepath.Base(p), lastOf(withoutDebug(string(b)), 4000))
	}
}

// TestSinkCheck: the check finds what the chaos runs look for — a committed event missing,
// an unknown one, a duplicate where the broker stores once, events out of commit order, a
// message id that is not the event's — and accepts duplicates where delivery is at least once.
func TestSinkCheck(t *testing.T) {
	k := watukuytype.Key{Poller: "orders", Partition: "p0"}
	committed := []committedEvent{{k, "ev_a", "ord-1"}, {k, "ev_b", "ord-1"}, {k, "ev_c", "ord-2"}}
	ev := func(id string) storedEvent {
		return storedEvent{MessageID: id, ID: id, Poller: k.Poller, Partition: k.Partition}
	}
	cases := []struct {
		name   string
		stored []storedEvent
		exact  bool
		want   string // in a problem; "" for none
	}{
		{"exact", []storedEvent{ev("ev_a"), ev("ev_c"), ev("ev_b")}, true, ""},
		{"missing", []storedEvent{ev("ev_a"), ev("ev_c")}, true, "1 of 3 committed events are not at the broker"},
		{"unknown", []storedEvent{ev("ev_a"), ev("ev_b"), ev("ev_c"), ev("ev_x")}, true, "in no replay log"},
		{"duplicate", []storedEvent{ev("ev_a"), ev("ev_b"), ev("ev_b"), ev("ev_c")}, true, "holds 1 duplicates"},
		{"duplicate at least once", []storedEvent{ev("ev_a"), ev("ev_b"), ev("ev_a"), ev("ev_b"), ev("ev_c")}, false, ""},
		{"order", []storedEvent{ev("ev_b"), ev("ev_a"), ev("ev_c")}, true, "out of commit order"},
		{"message id", []storedEvent{ev("ev_a"), {MessageID: "ev_z", ID: "ev_b", Poller: k.Poller, Partition: k.Partition}, ev("ev_c")}, true, "another id"},
	}
	for _, c := range cases {
		var rep sinkReport
		checkSink(&rep, committed, c.stored, c.exact)
		got := strings.Join(rep.Problems, "\n")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: problems %q, want none", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: problems %q, want one with %q", c.name, got, c.want)
		}
	}
}
