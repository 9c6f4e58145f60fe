//go:build unix

package procchaos

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytype"
)

// TestReceiverOutage: the webhook receiver is down (503 to every delivery) for
// WATUKUY_RECEIVER_OUTAGE (default 20 s; the chaos run's outages are minutes) while the API
// changes under a scheduler and a worker. A try that fails in a cycle that had delivered
// events before the outage began counts as the events' (a 5xx while others deliver), and
// their next try comes after delivery.retry's first wait (5 to 10 s); that one, with nothing
// delivered, blocks the key (whose tries are then capped at the schedule's 500 ms): the
// outage outlasts it. The key's delivery is blocked, with the
// receiver's error, and nothing is parked; polling goes on; when the receiver is back every
// event is delivered, in order (the process chaos checks), with no operator action.
func TestReceiverOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs them as processes for about 40 s")
	}
	outage := envDuration(t, "WATUKUY_RECEIVER_OUTAGE", 20*time.Second)
	r := newRecoveryRun(t, 100*time.Millisecond, 500*time.Millisecond, "scheduler", "worker")
	r.waitPolling(15 * time.Second)
	time.Sleep(time.Second) // delivering under load

	ctx := context.Background()
	state := processPrefix + ":{orders|}:state"
	r.hookDown.Store(true)
	wentDown := time.Now()
	var blocked struct {
		Error string `json:"error"`
	}
	seen := false
	for time.Since(wentDown) < outage {
		if v, err := r.redis.c.HGet(ctx, state, "blocked").Result(); err == nil && json.Unmarshal([]byte(v), &blocked) == nil {
			seen = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !seen || !strings.Contains(blocked.Error, "HTTP 503") {
		t.Errorf("the key's delivery never showed blocked with the receiver's error during the outage (last: %q)", blocked.Error)
	}
	if _, ok := r.firstRequest(wentDown.Add(outage/2), time.Second, func(q fakeapi.Request) bool { return q.Path == "/items" }); !ok {
		t.Errorf("no poll in the second half of the outage: polling must go on while delivery is blocked")
	}
	if n := r.redis.c.ZCard(ctx, processPrefix+":{orders|}:parked-ids").Val(); n != 0 {
		t.Errorf("%d events parked during the outage, want none", n)
	}
	r.hookDown.Store(false)
	backAt := time.Now()
	time.Sleep(2 * time.Second) // delivering under load again
	r.stopChanges()
	truth := map[watukuytype.Key]chaos.Truth{processKey: chaos.TruthOf(r.api)}
	converged := r.waitConverged(truth, 30*time.Second)
	t.Logf("receiver down %s: blocked with %q; converged %v within %s of its return", outage, blocked.Error, converged, time.Since(backAt).Round(time.Millisecond))
	if !converged {
		t.Errorf("the delivered state did not reach the API's within 30s of the receiver's return")
	}
	if n := r.redis.c.ZCard(ctx, processPrefix+":{orders|}:parked-ids").Val(); n != 0 {
		t.Errorf("%d events parked, want none", n)
	}
	if v, err := r.redis.c.HExists(ctx, state, "blocked").Result(); err != nil || v {
		t.Errorf("still blocked after the receiver's return (%v)", err)
	}
	r.alive()
	r.shutdown()
	r.check(truth)
}
