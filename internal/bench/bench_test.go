package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/redistest"
)

// childEnv makes the test binary a bench child process (TestMain).
const childEnv = "WATUKUY_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := Child(ctx, os.Args[1:], os.Stderr)
		stop()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testChild starts this test binary as a bench child.
func testChild(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return cmd
}

// Tiny is every measurement at a size that runs in seconds.
func Tiny(tb testing.TB) Options {
	return Options{Keys: 300, SmallKeys: 200, Items: 500, DueKeys: 300, Interval: 2 * time.Second, LatenessFor: 2 * time.Second,
		NoopKeys: 200, Workers: []int{1, 2}, FailoverKeys: 200, FailoverInterval: 2 * time.Second, FailoverFor: 3 * time.Second,
		FailoverTail: 2 * time.Second, Concurrency: 8, RegistryKeys: 300, ParkedOutbox: 300, HeldEvents: 200, ClaimKeys: 2000, DeleteItems: 500,
		Tombstones: 2500, ChurnKeys: 20, Dir: tb.TempDir(), Child: testChild, Log: zerolog.Nop()}
}

// TestRunTiny runs every measurement at a tiny size on its own redis-servers and checks the
// results are sane: a positive figure and baseline each, goals judged, the longest script
// reported, and the JSON round trips. The churn run waits out the deletion marks' TTL.
func TestRunTiny(t *testing.T) {
	redistest.Real(t) // skips, or fails with WATUKUY_REQUIRE_REAL_REDIS=1, without redis-server
	rep, err := Run(t.Context(), Tiny(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.Name] = true
		if r.Value <= 0 && r.Unit != "s" || r.Value < 0 {
			t.Errorf("%s: value %v %s", r.Name, r.Value, r.Unit)
		}
		if r.Baseline <= 0 && r.Unit != "s" || r.BaselineOf == "" {
			t.Errorf("%s: baseline %v (%q)", r.Name, r.Baseline, r.BaselineOf)
		}
		if r.Goal != "" && r.Met == nil {
			t.Errorf("%s: goal %q not judged", r.Name, r.Goal)
		}
		if r.Duration <= 0 {
			t.Errorf("%s: duration %v", r.Name, r.Duration)
		}
		if _, ok := r.Details["longestScriptMs"]; !ok {
			t.Errorf("%s: no longestScriptMs", r.Name)
		}
	}
	for _, want := range []string{"idle-bytes-200", "idle-bytes-300", "item-bytes", "item-bytes-payloads", "patch-page", "claim-rate", "noop-10perTask", "noop-1perTask",
		"lateness-p99", "scale-redis-server-1w", "scale-redis-server-2w", "scale-cluster3-1w", "scale-cluster3-2w", "two-schedulers-kill",
		"inspect-bytes-300", "api-keys-ms-300", "status-page-ms-300", "add-bytes-300", "longest-script-parked-retry", "longest-script-held-retry",
		"longest-script-claim", "longest-script-delete", "longest-script-tombstones", "churn-keys"} {
		if !seen[want] {
			t.Errorf("no result %s", want)
		}
	}
	for _, r := range rep.Results {
		switch r.Name {
		case "idle-bytes-200":
			if r.Details["B/key:state"] <= 0 || r.Details["B/key:due:bench"] <= 0 {
				t.Errorf("idle key breakdown lacks state or due: %v", r.Details)
			}
		case "lateness-p99", "two-schedulers-kill":
			if r.Details["cyclesServed"] <= 0 || r.Details["doubles"] != 0 {
				t.Errorf("%s: served %v, doubles %v", r.Name, r.Details["cyclesServed"], r.Details["doubles"])
			}
		case "idle-bytes-300":
			if r.Details["B/key:registry"] <= 0 || r.Details["B/key:registry-index"] <= 0 || r.Details["B/key:keys"] != 0 {
				t.Errorf("idle key breakdown lacks the registry: %v", r.Details)
			}
		case "noop-10perTask", "noop-1perTask":
			// A round's first cycle (task) ends after the round started; from it on, the
			// throughput is at least the whole round's.
			d := r.Details
			if d["startWaitMs/round"] <= 0 || d["raw:startWaitMs/round"] <= 0 || d["active:cycles/s"] < r.Value ||
				d["raw:active:tasks/s"] < r.Baseline || d["cpuRatio"] <= 0 {
				t.Errorf("%s: waits, active throughput or CPU ratio off: %v", r.Name, d)
			}
		case "longest-script-tombstones":
			if r.Details["scriptMs:commit_poll"] <= 0 {
				t.Errorf("%s: no commit_poll traced: %v", r.Name, r.Details)
			}
		case "item-bytes-payloads":
			if r.Details["payloadsHashB/item"] < r.Details["itemJSONBytes"] || r.Value <= r.Baseline {
				t.Errorf("%s: payloads %v B/item for items of %v B, %v B/item against %v without: %v", r.Name, r.Details["payloadsHashB/item"],
					r.Details["itemJSONBytes"], r.Value, r.Baseline, r.Details)
			}
		case "patch-page":
			if r.Details["timeRatio"] <= 0 || r.Details["cycleSeconds"] <= 0 || r.Details["cycleSecondsPlain"] <= 0 {
				t.Errorf("%s: %v", r.Name, r.Details)
			}
		case "churn-keys":
			if r.Details["keysWithMarks"] < r.Details["partitionsChurned"] || r.Details["retiredEpoch"] <= 0 {
				t.Errorf("%s: %v", r.Name, r.Details)
			}
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != len(rep.Results) || back.Results[0].Value != rep.Results[0].Value || back.Results[0].Load1 != rep.Results[0].Load1 {
		t.Errorf("JSON did not round trip: %+v", back.Results)
	}
	buf.Reset()
	if err := PrintTable(&buf, rep); err != nil || !bytes.Contains(buf.Bytes(), []byte("claim-rate")) {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
	t.Log("\n" + buf.String())
}

func TestRunUnknown(t *testing.T) {
	if _, err := Run(context.Background(), Options{Only: []string{"nope"}}); err == nil {
		t.Fatal("an unknown measurement ran")
	}
}

// BenchmarkMeasurements runs each measurement (a sub-benchmark per name, as `watukuy bench
// --only NAME`) at small sizes: 2,000 keys, lateness over 10 s of keys due every 5 s, a
// registry of 20,000 partitions, states of 2,000 to 100,000 for the longest scripts, 200
// partitions churned. `watukuy bench`'s defaults are the sizes of a large deployment.
func BenchmarkMeasurements(b *testing.B) {
	redistest.Real(b)
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				o := Options{Only: []string{name}, Keys: 20_000, SmallKeys: 2000, Items: 10_000, DueKeys: 2000, Interval: 5 * time.Second,
					LatenessFor: 10 * time.Second, NoopKeys: 2000, Workers: []int{1, 2}, FailoverKeys: 2000, FailoverInterval: 5 * time.Second,
					FailoverFor: 15 * time.Second, FailoverTail: 2 * time.Second, Concurrency: 32, RegistryKeys: 20_000, ParkedOutbox: 10_000, HeldEvents: 2000,
					ClaimKeys: 100_000, DeleteItems: 10_000, Tombstones: 10_000, ChurnKeys: 200, Dir: b.TempDir(), Child: testChild, Log: zerolog.Nop()}
				rep, err := Run(b.Context(), o)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range rep.Results {
					for unit, v := range r.Metrics() {
						b.ReportMetric(v, r.Name+":"+unit)
					}
				}
			}
		})
	}
}

// BenchmarkIdleKeyBytes: Redis memory per idle key (what `watukuy bench --only idle-bytes`
// runs): one poller of WATUKUY_BENCH_KEYS partitions (default 10,000) on a private redis-server, each key's first cycle run (an empty page); the
// used_memory the second half of the keys added, per key (the average over all keys, with the
// database's fixed part, in "averageB/key"), and the MEMORY USAGE breakdown by Redis key kind
// ("B/key:state", "B/key:due:bench", ...). Goal: <= 400 bytes.
func BenchmarkIdleKeyBytes(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("WATUKUY_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	redistest.Real(b) // skips, or fails with WATUKUY_REQUIRE_REAL_REDIS=1, without redis-server
	for i := 0; i < b.N; i++ {
		r, err := IdleKeyBytes(b.Context(), Options{Dir: b.TempDir()}, n)
		if err != nil {
			b.Fatal(err)
		}
		for unit, v := range r.Metrics() {
			b.ReportMetric(v, unit)
		}
	}
}
