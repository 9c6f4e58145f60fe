//go:build unix

package procchaos

import (
	"context"
	"fmt"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/fakeapi"
)

// The mid-fetch kill (killFetch): RecoveryGoal bounds the time from the SIGKILL of the key's
// cycle's worker to the key's next request (R1); recoveryWait is how long the run waits for
// that request; killFetchAimWait bounds the wait for a request to hold; fetchHold is how long
// the API holds it, past the poller's request timeout (5 s), so it is outstanding when its
// worker dies.
const (
	RecoveryGoal     = processLeaseTTL + 5*time.Second
	recoveryWait     = RecoveryGoal + 15*time.Second
	killFetchAimWait = 8 * time.Second
	fetchHold        = time.Minute
)

// killFetch SIGKILLs the worker running the orders key's cycle while its request is
// outstanding at the API, and measures the key's recovery: the time from the SIGKILL to the
// key's next request at the API, by any worker (R1: at most RecoveryGoal). It waits (up to
// processStopFor) until no worker is SIGSTOPped, so that only the lease's holder sends
// requests (a cycle confirms its lease before each request; a worker frozen by a stop or a
// failover resumes fenced), lets a queued 429 be answered, then has the API hold the key's
// next /items request (a Fault with a Delay) and, after hold (drawn within a lease TTL, so
// that kills land anywhere in the lease keeper's renewal period), kills the lease's holder,
// who sent it. The timeline waits for the key's next request (up to recoveryWait), so no
// other fault adds to the time: the dead worker's lease lapses, the key's claim, held on by
// each renewal, ends a lease TTL and core.ClaimGrace after the last one, and the scheduler
// enqueues a new task for the key whose task is active with nobody holding its lease.
func (r *processRun) killFetch(ctx context.Context, hold time.Duration) error {
	for until := time.Now().Add(processStopFor + time.Second); time.Now().Before(until); {
		r.mu.Lock()
		stopped := len(r.procs.stopped)
		r.mu.Unlock()
		if stopped == 0 && r.apis.ordersSrv.PendingFaults() == 0 {
			break
		}
		if !r.sleep(ctx, 10*time.Millisecond) { // polling other processes: there is no signal to wait on
			return ctx.Err()
		}
	}
	from := len(r.apis.ordersSrv.Requests())
	r.apis.ordersSrv.Inject(fakeapi.Fault{Path: "/items", Delay: fetchHold})
	held := -1
	var heldAt time.Time
	for deadline := time.Now().Add(killFetchAimWait); held < 0; {
		reqs := r.apis.ordersSrv.Requests()
		for i := from; i < len(reqs) && held < 0; i++ {
			if reqs[i].Held && reqs[i].Status == 0 {
				held, heldAt = i, reqs[i].Wall
			}
		}
		if held >= 0 {
			break
		}
		if time.Now().After(deadline) {
			r.apis.ordersSrv.ClearFaults() // only the hold is queued: nothing else injects meanwhile
			r.logf("SIGKILL mid-fetch skipped: no request of %s to hold within %s", processKey.Poller, killFetchAimWait)
			return nil
		}
		if !r.sleep(ctx, 5*time.Millisecond) { // polling the API's request log: there is no signal to wait on
			return ctx.Err()
		}
	}
	if !r.sleep(ctx, time.Until(heldAt.Add(hold))) {
		return ctx.Err()
	}
	if q := r.apis.ordersSrv.Requests()[held]; q.Status != 0 {
		r.logf("SIGKILL mid-fetch skipped: the held request was answered %d before the kill", q.Status)
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	snap, err := r.db.store.Inspect(ictx, processKey)
	cancel()
	r.mu.Lock()
	i := -1
	for j, w := range r.procs.workers {
		if err == nil && w.name == snap.LeaseOwner && snap.LeaseExpires.After(snap.Now) && !r.procs.stopped[w] {
			i = j
		}
	}
	if i < 0 {
		r.mu.Unlock()
		r.logf("SIGKILL mid-fetch skipped: the held request's cycle has no live lease of a running worker (owner %q, %v)", snap.LeaseOwner, err)
		return nil
	}
	p := r.procs.workers[i]
	r.mu.Unlock()
	killed := time.Now()
	p.kill()
	if err := r.replaceWorker(i, p); err != nil {
		return err
	}
	r.mu.Lock()
	r.rep.HolderKills++
	np := r.procs.workers[i]
	r.mu.Unlock()
	r.logf("SIGKILL %s (pid %d, the holder of the key's cycle, epoch %d, its request to /items held at the API for %s); started %s (pid %d)",
		p.name, p.pid(), snap.LeaseEpoch, killed.Sub(heldAt).Round(time.Millisecond), np.name, np.pid())
	rc := chaos.Recovery{Instance: p.name, Key: processKey, Killed: killed, Waited: recoveryWait, Goal: RecoveryGoal}
	for deadline := killed.Add(recoveryWait); rc.Next.IsZero() && time.Now().Before(deadline); {
		if !r.sleep(ctx, 10*time.Millisecond) { // polling the API's request log: there is no signal to wait on
			return ctx.Err()
		}
		reqs := r.apis.ordersSrv.Requests()
		for _, q := range reqs[held+1:] {
			if q.Path == "/items" && q.Wall.After(killed) {
				rc.Next = q.Wall
				break
			}
		}
	}
	r.rec.Recovered(rc)
	took, ok := rc.Took()
	if !ok {
		r.logf("recovery: no request of %s within %s of the SIGKILL of %s (goal %s)", processKey.Poller, recoveryWait, p.name, RecoveryGoal)
		return nil
	}
	r.mu.Lock()
	r.rep.Recoveries = append(r.rep.Recoveries, took)
	r.mu.Unlock()
	who := ""
	ictx, cancel = context.WithTimeout(ctx, time.Second)
	if snap, err := r.db.store.Inspect(ictx, processKey); err == nil && snap.LeaseOwner != "" {
		who = fmt.Sprintf(" (epoch %d held by %s)", snap.LeaseEpoch, snap.LeaseOwner)
	}
	cancel()
	r.logf("recovery: %s requested again %s after the SIGKILL of %s%s; goal %s", processKey.Poller, took.Round(time.Millisecond), p.name, who, RecoveryGoal)
	return nil
}
