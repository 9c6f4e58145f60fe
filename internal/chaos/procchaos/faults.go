//go:build unix

package procchaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/queue"
)

type faultKind int

const (
	faultKill      faultKind = iota // a random worker outside the orders key's cycle
	faultKillFetch                  // the worker of the orders key's cycle, its request held at the API
	faultStop
	faultRedis
	faultDrop
	faultStall
	faultThrottle
	faultFailover
	faultReplyStall
	faultHot // the hot key's next stage (hotkey.go): poison burst, held burst, operator retry
	// faultReceiverDown: the webhook receiver answers 503 to everything for 2–6 s (30–120 s in
	// a run of more than 5 minutes): the keys' delivery is blocked while their cycles poll.
	faultReceiverDown
)

// faults runs the seeded timeline: first one fault of every kind (in a seeded order), all of
// them even past deadline, then faults drawn at random until deadline, each after a gap of
// 0.3–1.5 s.
func (r *processRun) faults(ctx context.Context, rng *rand.Rand, deadline time.Time) error {
	// The hot key's three stages follow each other whatever the order of their draws.
	plan := []faultKind{faultKill, faultKillFetch, faultStop, faultRedis, faultDrop, faultStall, faultThrottle, faultFailover, faultReplyStall,
		faultHot, faultHot, faultHot, faultReceiverDown}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	// Weights of the random draws after the plan.
	draw := []faultKind{faultKill, faultKillFetch, faultStop, faultRedis, faultDrop, faultDrop, faultStall, faultStall, faultThrottle,
		faultFailover, faultReplyStall, faultHot, faultReceiverDown}
	for i := 0; ; i++ {
		gap := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
		if !r.sleep(ctx, gap) {
			return ctx.Err()
		}
		if i >= len(plan) && !time.Now().Before(deadline) {
			return nil
		}
		k := draw[rng.IntN(len(draw))]
		if i < len(plan) {
			k = plan[i]
		}
		if err := r.inject(ctx, k, rng, deadline); err != nil {
			return err
		}
	}
}

// inFlight waits up to max for a cycle of the key in flight (a live lease) and returns its
// holder and epoch; ok is false when none showed up.
func (r *processRun) inFlight(ctx context.Context, max time.Duration) (owner string, epoch int64, ok bool) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		snap, err := r.db.store.Inspect(ictx, processKey)
		cancel()
		if err == nil && snap.LeaseOwner != "" && snap.LeaseExpires.After(snap.Now) {
			return snap.LeaseOwner, snap.LeaseEpoch, true
		}
		time.Sleep(5 * time.Millisecond) // polling another process's state: there is no signal to wait on
	}
	return "", 0, false
}

// cycleTaskActive reports whether the asynq task of the key's cycle is active, i.e. some
// worker has dequeued it (it may not hold the lease yet, or any more).
func (r *processRun) cycleTaskActive() bool {
	ti, err := r.db.ins.GetTaskInfo(queue.DefaultQueue, queue.TaskID(processPrefix, processKey))
	return err == nil && ti.State == asynq.TaskStateActive
}

// killTarget picks the worker to SIGKILL outside the key's cycle and says how it was chosen:
// it waits (up to 2 s) until no worker has the cycle's asynq task, then picks a random worker
// that is neither stopped nor the lease holder. (faultKillFetch kills the cycle's own worker,
// during its request: killFetch.)
func (r *processRun) killTarget(ctx context.Context, pick uint64) (int, string) {
	deadline := time.Now().Add(2 * time.Second)
	for r.cycleTaskActive() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond) // polling another process's state: there is no signal to wait on
	}
	owner := ""
	ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if snap, err := r.db.store.Inspect(ictx, processKey); err == nil && snap.LeaseExpires.After(snap.Now) {
		owner = snap.LeaseOwner
	}
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	var cands []int
	for i, w := range r.procs.workers {
		if !r.procs.stopped[w] && w.name != owner {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return -1, ""
	}
	return cands[pick%uint64(len(cands))], "a random worker outside the key's cycle"
}

// killWorker SIGKILLs the worker killTarget picks (pick is drawn by the caller, so the
// timeline stays seeded) and starts a new one; how, when set, says why in the log.
func (r *processRun) killWorker(ctx context.Context, pick uint64, how string) error {
	i, target := r.killTarget(ctx, pick)
	if i < 0 {
		r.logf("SIGKILL skipped: no worker to kill")
		return nil
	}
	if how == "" {
		how = target
	}
	r.mu.Lock()
	p := r.procs.workers[i]
	r.mu.Unlock()
	p.kill()
	if err := r.replaceWorker(i, p); err != nil {
		return err
	}
	r.mu.Lock()
	np := r.procs.workers[i]
	r.mu.Unlock()
	r.logf("SIGKILL %s (pid %d, %s); started %s (pid %d)", p.name, p.pid(), how, np.name, np.pid())
	return nil
}

// replaceWorker starts a new worker in slot i for p, which the harness SIGKILLed (and waited
// for), and counts the kill.
func (r *processRun) replaceWorker(i int, p *osProc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs.stopped, p)
	delete(r.procs.stoppedAt, p)
	r.procs.killed[p.name] = time.Now()
	np, err := r.startLocked("worker")
	if err != nil {
		return err
	}
	r.procs.workers[i] = np
	r.rep.Kills++
	return nil
}

// aimWait is how long a fault waits for a cycle in flight before it fires anyway: a fault
// between two cycles tests little. replyStallAimWait is the reply stall's, for a cycle whose
// holder is not SIGSTOPped (a stop lasts 5 s; a key whose cycle died comes back a lease TTL
// and core.ClaimGrace after its last renewal, about 4 s).
const (
	aimWait           = time.Second
	replyStallAimWait = 4 * time.Second
)

// inFlightRunning is inFlight for a cycle whose holder is not SIGSTOPped.
func (r *processRun) inFlightRunning(ctx context.Context, max time.Duration) (owner string, epoch int64, ok bool) {
	deadline := time.Now().Add(max)
	for {
		owner, epoch, ok = r.inFlight(ctx, time.Until(deadline))
		if !ok {
			return owner, epoch, ok
		}
		r.mu.Lock()
		stopped := false
		for p := range r.procs.stopped {
			stopped = stopped || p.name == owner
		}
		r.mu.Unlock()
		if !stopped {
			return owner, epoch, true
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state: there is no signal to wait on
	}
}

func (r *processRun) inject(ctx context.Context, k faultKind, rng *rand.Rand, deadline time.Time) error {
	if k == faultFailover {
		if err := r.prepareFailover(ctx); err != nil {
			return err
		}
	}
	// Every fault but the kills is aimed at a cycle in flight (see killTarget and killFetch for
	// the kills). The reply stall waits longer, for a cycle whose holder runs (not SIGSTOPped):
	// the scripts it sends next are the ones whose replies get lost.
	at := ""
	var owner string
	if k != faultKill && k != faultKillFetch && k != faultThrottle && k != faultHot && k != faultReceiverDown {
		var epoch int64
		var ok bool
		if k == faultReplyStall {
			owner, epoch, ok = r.inFlightRunning(ctx, replyStallAimWait)
		} else {
			owner, epoch, ok = r.inFlight(ctx, aimWait)
		}
		if ok {
			at = fmt.Sprintf(" (mid-cycle: epoch %d held by %s)", epoch, owner)
		} else {
			at = " (between cycles)"
		}
	}
	switch k {
	case faultKill:
		return r.killWorker(ctx, rng.Uint64(), "")
	case faultKillFetch:
		return r.killFetch(ctx, time.Duration(rng.Int64N(int64(processLeaseTTL))))
	case faultHot:
		return r.hotFault(ctx, rng)
	case faultReceiverDown:
		d := 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
		if r.o.Duration > 5*time.Minute {
			d = 30*time.Second + time.Duration(rng.Int64N(int64(90*time.Second)))
		}
		r.mu.Lock()
		r.rep.ReceiverOutages++
		r.mu.Unlock()
		r.logf("receiver: down (503 to every delivery) for %s", d.Round(time.Millisecond))
		r.recv.down.Store(true)
		ok := r.sleep(ctx, d)
		r.recv.down.Store(false)
		r.logf("receiver: up again")
		if !ok {
			return ctx.Err()
		}
	case faultStop:
		r.mu.Lock()
		var p *osProc
		var cands []*osProc
		for _, w := range r.procs.workers {
			if r.procs.stopped[w] {
				continue
			}
			cands = append(cands, w)
			if w.name == owner {
				p = w // the cycle's holder: its writes after waking must be fenced
			}
		}
		pick := rng.IntN(max(len(cands), 1)) // drawn either way, so the timeline stays seeded
		if p == nil && len(cands) > 0 {
			p = cands[pick]
		}
		if p == nil {
			r.mu.Unlock()
			return nil
		}
		if err := p.signal(syscall.SIGSTOP); err != nil {
			r.mu.Unlock()
			r.logf("SIGSTOP %s: %v", p.name, err)
			return nil
		}
		r.procs.stopped[p] = true
		r.procs.stoppedAt[p] = time.Now()
		r.rep.Stops++
		r.mu.Unlock()
		r.logf("SIGSTOP %s (pid %d) for %s%s", p.name, p.pid(), processStopFor, at)
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			t := time.NewTimer(processStopFor)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.quiesce:
			}
			r.mu.Lock()
			r.contLocked(p)
			r.mu.Unlock()
		}()
	case faultRedis:
		down := 100*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))
		r.db.primary.kill()
		r.logf("kill -9 redis-server %s (the primary)%s; down for %s", r.db.primary.name, at, down.Round(time.Millisecond))
		r.sleep(ctx, down)
		if err := r.db.primary.start(ctx); err != nil {
			return err
		}
		r.mu.Lock()
		r.rep.RedisRestarts++
		r.mu.Unlock()
		r.logf("redis-server %s restarted (AOF replayed); %s resyncs with it", r.db.primary.name, r.db.replica.name)
	case faultFailover:
		return r.failover(ctx, rng, at)
	case faultReplyStall:
		return r.replyStall(ctx, rng, at)
	case faultDrop:
		n := r.db.proxy.DropAll()
		r.mu.Lock()
		r.rep.ProxyFaults++
		r.mu.Unlock()
		r.logf("proxy: dropped %d connections%s", n, at)
	case faultStall:
		d := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		r.db.proxy.Stall(d)
		r.mu.Lock()
		r.rep.ProxyFaults++
		r.mu.Unlock()
		r.logf("proxy: stalled for %s%s", d.Round(time.Millisecond), at)
		if !r.sleep(ctx, d) {
			return ctx.Err()
		}
	case faultThrottle:
		r.apis.ordersSrv.Inject(fakeapi.Fault{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(int(processRetryAfter / time.Second))})
		r.logf("api: the next request is answered 429, Retry-After: 1")
	}
	return nil
}

// replyStall holds every reply of Redis back (the proxy's StallReplies) for 0.25–1.25 s longer
// than the processes' read timeout, requests still reaching Redis: a script sent in the first
// 0.25–1.25 s runs, its client gives up on the reply and re-sends it (go-redis retries a read
// timeout), unless the cycle's lease keeper has cancelled the cycle by then. The stall starts
// as MONITOR on the primary shows the cycle reading the rows of a page it fetched (LoadRows):
// the page's commit, a fenced script with a write id, follows within a millisecond, so its
// reply is held (or, when the stall wins the race, the rows' reply is). MONITOR also records
// which scripts ran twice (logs/monitor-<n>.log).
func (r *processRun) replyStall(ctx context.Context, rng *rand.Rand, at string) error {
	d := r.db.readTimeout + 250*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
	r.mu.Lock()
	r.rep.ReplyStalls++
	n := r.rep.ReplyStalls
	r.mu.Unlock()
	how := ""
	mon, err := monitorScripts(r.db.primary.addr(), filepath.Join(r.files.dir, "logs", fmt.Sprintf("monitor-%d.log", n)))
	if err != nil {
		r.logf("MONITOR on %s: %v (re-sent scripts not counted)", r.db.primary.name, err)
		r.db.proxy.StallReplies(d)
	} else {
		fired := make(chan struct{})
		rows := `"hmget" ` + strconv.Quote(processPrefix+":{"+processKey.String()+"}:items")
		mon.arm(func(cmd string) bool { return strings.HasPrefix(cmd, rows) }, func() {
			// Let the rows' reply pass (Redis writes it with this MONITOR line); the commit
			// goes out some 0.3 ms after it.
			for t0 := time.Now(); time.Since(t0) < rowsReplyPass; {
			}
			r.db.proxy.StallReplies(d)
			close(fired)
		})
		t := time.NewTimer(2 * time.Second)
		select {
		case <-fired:
			how = ", started as the cycle read the rows of a page (its commit follows)"
		case <-t.C:
			if mon.disarm() {
				r.db.proxy.StallReplies(d)
				how = ", started with no page read within 2s"
			} else {
				<-fired
				how = ", started as the cycle read the rows of a page (its commit follows)"
			}
		case <-ctx.Done():
			mon.disarm()
			t.Stop()
			_, _, _ = mon.stop(0)
			return ctx.Err()
		}
		t.Stop()
	}
	started := time.Now()
	r.logf("proxy: replies held for %s%s, requests still executed (the processes' read timeout is %s: their scripts run, the replies are lost, go-redis re-sends them)%s",
		d.Round(time.Millisecond), how, r.db.readTimeout, at)
	if !r.sleep(ctx, time.Until(started.Add(d))) {
		if mon != nil {
			_, _, _ = mon.stop(0)
		}
		return ctx.Err()
	}
	r.logf("proxy: replies flow again")
	if mon == nil {
		return nil
	}
	name := r.db.primary.name
	// A re-send goes out a read timeout after its first send, and within a retry backoff (at
	// most 512 ms) of that: each has reached Redis a second after the stall.
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		time.Sleep(time.Second)
		resent, fenced, byName := mon.stop(r.db.readTimeout - 250*time.Millisecond)
		r.mu.Lock()
		r.rep.ResentScripts += resent
		r.rep.ResentFenced += fenced
		r.mu.Unlock()
		r.logf("MONITOR on %s during reply stall %d (logs/monitor-%d.log): %d scripts ran twice (the same arguments from another connection, a read timeout later), %d of them fenced: %s",
			name, n, n, resent, fenced, countsText(byName))
	}()
	return nil
}

// rowsReplyPass is how long the reply stall waits after MONITOR showed a page's rows being
// read, for their reply to pass the proxy before the stall: a busy wait, since a timer's
// delay is not that precise.
const rowsReplyPass = 150 * time.Microsecond
