//go:build unix

package procchaos

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
)

// testWriter turns progress lines into t.Log lines.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func TestProcessChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs them as processes for about half a minute")
	}
	runProcessChaos(t, Options{})
}

func runProcessChaos(t *testing.T, o Options) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(redistest.RequireEnv) != "" {
			t.Fatalf("redis-server not found and %s is set: %v", redistest.RequireEnv, err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
	const seed = 20260101
	// The binaries are built first, outside the run's bound (a cold build cache takes a
	// minute). Then 20 s of faults (a little more when the first fault of every kind takes
	// longer), a quiesce of a few seconds and SIGTERM; the quiesce gives up early when no new
	// event arrives for 30 s.
	if o.BinDir == "" {
		o.BinDir = t.TempDir()
		bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err := BuildBinaries(bctx, o.BinDir)
		bcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 115*time.Second)
	defer cancel()
	start := time.Now()
	o.Seed, o.Duration, o.Workers, o.Log = seed, 20*time.Second, 3, testWriter{t}
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("seed %d, %s: %d changes, %d deliveries (%d unique, duplicate ratio %.2f); %d kills, %d stops, %d redis restarts, %d failovers (%d grants lost, %d token refusals), %d proxy faults, %d reply stalls (%d scripts re-sent, %d fenced), %d 429s; hot key: %d kills aimed between park and ack, %d right after a burst's commit, %d parked rows retried by the CLI; %d kills of the key's worker mid-fetch (next request after %s), %d stale redeliveries dropped, %d respawns",
		seed, time.Since(start).Round(time.Second), rep.Changes, rep.Deliveries, rep.UniqueEvents, rep.DuplicateRatio,
		rep.Kills, rep.Stops, rep.RedisRestarts, rep.Failovers, rep.LostGrants, rep.TokenRefusals, rep.ProxyFaults, rep.ReplyStalls, rep.ResentScripts, rep.ResentFenced,
		rep.Throttles, rep.HotParkKills, rep.HotCommitKills, rep.ParkedRetried, rep.HolderKills, rep.RecoveryText(), rep.StaleRedeliveries, rep.Respawns)
	for _, l := range rep.Lines() {
		t.Log(l)
	}
	if rep.Failed() {
		t.Errorf("seed %d: guarantees violated (lines above)", seed)
	}
	if !rep.Converged {
		t.Errorf("seed %d: the delivered state did not reach the API's final state", seed)
	}
	if rep.Kills < 1 || rep.Stops < 1 || rep.RedisRestarts < 1 || rep.Failovers < 1 || rep.ProxyFaults < 1 || rep.ReplyStalls < 1 || rep.ReceiverOutages < 1 {
		t.Errorf("seed %d: want at least one kill, stop, redis restart, failover, proxy fault, reply stall and receiver outage; got %d, %d, %d, %d, %d, %d, %d",
			seed, rep.Kills, rep.Stops, rep.RedisRestarts, rep.Failovers, rep.ProxyFaults, rep.ReplyStalls, rep.ReceiverOutages)
	}
	// The goal: a key whose worker is SIGKILLed mid-fetch is polled again within the
	// lease TTL + 5 s (R1 reports the same as a violation).
	if rep.HolderKills < 1 || len(rep.Recoveries) != rep.HolderKills {
		t.Errorf("seed %d: want at least one SIGKILL of the key's worker mid-fetch, each followed by a request of the key; got %d kills, %d recoveries",
			seed, rep.HolderKills, len(rep.Recoveries))
	}
	for i, d := range rep.Recoveries {
		if d > RecoveryGoal {
			t.Errorf("seed %d: mid-fetch SIGKILL %d: the key's next request came %v after it, goal %v", seed, i+1, d, RecoveryGoal)
		}
	}
	if rep.HotParkKills < 1 || rep.HotCommitKills < 1 || rep.ParkedRetried < 1 {
		t.Errorf("seed %d: want the hot key's worker killed after a park and after a burst's commit, and a parked row retried; got %d, %d, %d",
			seed, rep.HotParkKills, rep.HotCommitKills, rep.ParkedRetried)
	}
	if rep.Changes == 0 || rep.Deliveries == 0 {
		t.Errorf("seed %d: nothing happened: %d changes, %d deliveries", seed, rep.Changes, rep.Deliveries)
	}
	for _, g := range []string{"G1", "G2", "G3", "G4", "G6", "G8", "R1"} {
		if rep.NotMeasured[g] {
			t.Errorf("%s is not measured", g)
		}
	}
}
