//go:build unix

package procchaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// failoverGrantWait bounds how long a failover waits, the replication link cut, for the next
// lease grant of the key (cycles start about once a second).
const failoverGrantWait = 3 * time.Second

// replSyncTimeout bounds the waits for a replica (synced, promoted); a replica that takes
// longer is an infrastructure failure.
const replSyncTimeout = 15 * time.Second

// prepareFailover readies a failover before it is aimed: the replica has everything the
// primary had (so the failover loses only the writes of its own window), and no 429 can be
// answered in that window nor has one been in the last Retry-After. A Retry-After window
// saved in a lost write is lost with it, and the next owner's request inside that window
// would be a G8 violation no Redis-backed scheduler can prevent; the fault is about fencing
// and re-fetching, not about that.
func (r *processRun) prepareFailover(ctx context.Context) error {
	if _, err := r.waitSynced(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for ctx.Err() == nil {
		quiet := r.apis.ordersSrv.PendingFaults() == 0
		if quiet {
			for _, q := range r.apis.ordersSrv.Requests() {
				if q.Status == http.StatusTooManyRequests && time.Since(q.Wall) <= processRetryAfter+100*time.Millisecond {
					quiet = false
				}
			}
		}
		if quiet {
			return nil
		}
		if time.Now().After(deadline) {
			r.logf("failover: a 429 is still pending or recent after 5s; failing over anyway")
			return nil
		}
		time.Sleep(20 * time.Millisecond) // the API's request log has no signal to wait on
	}
	return ctx.Err()
}

// failover fails the primary over to its replica and loses the writes of a random window, as
// a Sentinel failover after a network partition does: cut the replication link, wait (up to
// failoverGrantWait) for the key's next lease grant, which lands on the primary alone, let
// the processes write to the primary alone for 100–800 ms more, kill -9 the primary, promote
// the replica, move the processes' proxy to it, then start a fresh replica of the new
// primary and wait until it is synced. The lost grant makes its epoch repeat on the new
// primary, with another token; the cycle that held it is frozen (loseGrant) and resumes once
// the epoch was granted again (thawLostHolder): its writes must be fenced off by the token.
func (r *processRun) failover(ctx context.Context, rng *rand.Rand, at string) error {
	window := 100*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond)))
	old, next := r.db.primary, r.db.replica
	r.db.link.Cut()
	cutEpoch := r.leaseEpoch(ctx)
	r.logf("failover: replication link to %s cut%s; lease epoch %d; the processes write to %s alone from now on",
		next.name, at, cutEpoch, old.name)
	r.mu.Lock()
	r.db.failoverN++
	n := r.db.failoverN
	r.mu.Unlock()
	// MONITOR on the old primary finds the lost grant and records the writes the failover
	// loses, until the kill ends it.
	var frozen *osProc
	lostEpoch := int64(-1)
	mon, err := monitorScripts(old.addr(), filepath.Join(r.files.dir, "logs", fmt.Sprintf("monitor-failover-%d.log", n)))
	if err != nil {
		r.logf("failover: MONITOR on %s: %v (the lost grant's holder is not frozen)", old.name, err)
	} else {
		frozen, lostEpoch = r.loseGrant(ctx, mon, old, cutEpoch)
	}
	r.logf("failover: %s more of writes on %s alone", window.Round(time.Millisecond), old.name)
	if !r.sleep(ctx, window) {
		if mon != nil {
			_, _, _ = mon.stop(0)
		}
		return ctx.Err()
	}
	lost := int64(-1)
	if p, err := infoFields(ctx, old.c, "replication"); err == nil {
		if q, err := infoFields(ctx, next.c, "replication"); err == nil {
			lost = atoi64(p["master_repl_offset"]) - atoi64(q["master_repl_offset"])
		}
	}
	oldEpoch := r.leaseEpoch(ctx) // direct still dials the old primary
	old.kill()
	if mon != nil {
		_, _, _ = mon.stop(0)
	}
	r.logf("failover: kill -9 redis-server %s (the primary); %d bytes of its replication stream, writes acknowledged to the processes, never reached %s (logs/monitor-failover-%d.log)",
		old.name, lost, next.name, n)
	start := time.Now()
	if err := next.promote(ctx); err != nil {
		return err
	}
	r.logf("failover: REPLICAOF NO ONE on %s: role:master after %s", next.name, time.Since(start).Round(time.Millisecond))
	r.db.primaryAddr.Store(next.addr())
	switch newEpoch := r.leaseEpoch(ctx); {
	case oldEpoch < 0 || newEpoch < 0:
	case oldEpoch > newEpoch:
		repeat := fmt.Sprintf("epoch %d", oldEpoch)
		if oldEpoch > newEpoch+1 {
			repeat = fmt.Sprintf("epochs %d to %d", newEpoch+1, oldEpoch)
		}
		r.logf("failover: the key's lease epoch was %d on %s and is %d on %s: the next grants repeat %s (another token each)",
			oldEpoch, old.name, newEpoch, next.name, repeat)
		r.mu.Lock()
		r.rep.LostGrants += int(oldEpoch - newEpoch)
		r.mu.Unlock()
	default:
		r.logf("failover: the key's lease epoch is %d on both (no grant was lost)", newEpoch)
	}
	r.db.proxy.Retarget(next.addr())
	r.db.primary, r.db.replica = next, nil
	r.logf("failover: proxy retargeted to %s (%s), every connection dropped: the processes reconnect to the new primary, as Sentinel would move them",
		next.name, next.addr())
	if frozen != nil {
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			r.thawLostHolder(frozen, lostEpoch)
		}()
	}

	r.db.link.Retarget(next.addr())
	r.db.link.Restore()
	fresh, err := r.newServer(r.db.link.Addr())
	if err != nil {
		return err
	}
	if err := fresh.start(ctx); err != nil {
		return err
	}
	r.db.replica = fresh
	r.logf("failover: started %s on %s (empty data dir) as a replica of %s through the link proxy", fresh.name, fresh.addr(), next.name)
	start = time.Now()
	off, err := r.waitSynced(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.rep.Failovers++
	r.mu.Unlock()
	r.logf("failover: %s synced with %s (offset %d, its AOF rewritten) after %s", fresh.name, next.name, off, time.Since(start).Round(time.Millisecond))
	return nil
}

// loseGrant waits (up to failoverGrantWait) for the key's next lease grant, which lands on
// the old primary alone, then (up to a second) for that cycle's first commit, and SIGSTOPs
// the holder right after it, mid-cycle: it resumes once the new primary has granted the
// same epoch again (thawLostHolder). It returns the frozen worker (nil when none) and the
// lost epoch (-1 when no grant came).
func (r *processRun) loseGrant(ctx context.Context, mon *scriptMonitor, old *redisServer, cutEpoch int64) (*osProc, int64) {
	type grant struct {
		owner, token string
		epoch        int64
	}
	granted := make(chan grant, 1)
	var armBegin func()
	armBegin = func() {
		mon.arm(isBegin, func() {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			snap, err := r.db.store.Inspect(ictx, processKey)
			cancel()
			if err != nil || snap.LeaseEpoch <= cutEpoch || snap.LeaseOwner == "" || !snap.LeaseExpires.After(snap.Now) {
				armBegin() // a Begin that granted nothing (not due, or leased)
				return
			}
			granted <- grant{owner: snap.LeaseOwner, token: r.leaseToken(ctx), epoch: snap.LeaseEpoch}
		})
	}
	armBegin()
	var g grant
	t := time.NewTimer(failoverGrantWait)
	defer t.Stop()
	select {
	case g = <-granted:
	case <-t.C:
		if mon.disarm() {
			r.logf("failover: no new grant within %s", failoverGrantWait)
			return nil, -1
		}
		g = <-granted
	case <-ctx.Done():
		if mon.disarm() {
			return nil, -1
		}
		g = <-granted
	}
	r.logf("failover: epoch %d (token %.6s) granted to %s on %s alone: a grant the failover loses", g.epoch, g.token, g.owner, old.name)

	committed := make(chan *osProc, 1)
	token := strconv.Quote(g.token)
	mon.arm(func(cmd string) bool {
		return strings.Contains(cmd, token) && scriptOf(cmd).name == "commit_poll"
	}, func() { committed <- r.freeze(g.owner) })
	var p *osProc
	t.Reset(time.Second)
	select {
	case p = <-committed:
	case <-t.C:
		if mon.disarm() {
			r.logf("failover: the cycle of epoch %d committed nothing within 1s; %s not frozen", g.epoch, g.owner)
			return nil, g.epoch
		}
		p = <-committed
	case <-ctx.Done():
		if mon.disarm() {
			return nil, g.epoch
		}
		p = <-committed
	}
	if p == nil {
		r.logf("failover: %s committed a page with epoch %d, but it is gone or already stopped", g.owner, g.epoch)
		return nil, g.epoch
	}
	r.logf("failover: %s committed a page with epoch %d on %s alone: SIGSTOP %s (pid %d) mid-cycle, until the new primary grants epoch %d again",
		g.owner, g.epoch, old.name, p.name, p.pid(), g.epoch)
	return p, g.epoch
}

// freeze SIGSTOPs the worker named owner (not already stopped) and returns it, or nil.
func (r *processRun) freeze(owner string) *osProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.procs.workers {
		if w.name != owner || r.procs.stopped[w] {
			continue
		}
		if err := w.signal(syscall.SIGSTOP); err != nil {
			return nil
		}
		r.procs.stopped[w] = true
		r.procs.stoppedAt[w] = time.Now()
		return w
	}
	return nil
}

// thawLostHolder waits (up to thawWait) until the key's lease epoch on the new primary has
// reached epoch, then SIGCONTs p: its writes carry that epoch and the token of a grant the
// failover lost.
func (r *processRun) thawLostHolder(p *osProc, epoch int64) {
	const thawWait = 8 * time.Second
	deadline := time.Now().Add(thawWait)
	for time.Now().Before(deadline) && !r.finished.Load() {
		select {
		case <-r.quiesce:
			deadline = time.Time{}
			continue
		case <-time.After(20 * time.Millisecond): // polling another process's state: there is no signal to wait on
		}
		if r.leaseEpoch(context.Background()) >= epoch {
			owner := ""
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if snap, err := r.db.store.Inspect(ctx, processKey); err == nil {
				owner = snap.LeaseOwner
			}
			cancel()
			r.logf("failover: the new primary granted epoch %d again (to %s, token %.6s): %s resumes with that epoch and the lost grant's token, and must be refused by the token",
				epoch, owner, r.leaseToken(context.Background()), p.name)
			break
		}
	}
	r.mu.Lock()
	r.contLocked(p)
	r.mu.Unlock()
}

// staleEpoch is the fence's refusal as the processes log it.
var staleEpoch = regexp.MustCompile(`LEASE_LOST epoch (\d+) is stale \(current (\d+)\)`)

// tokenRefusals counts the log lines of the workers that show a write refused by the lease
// token alone: "epoch N is stale (current N)", the epoch granted again after a failover.
func (r *processRun) tokenRefusals() int {
	logs, _ := filepath.Glob(filepath.Join(r.files.dir, "logs", "worker-*.log"))
	n := 0
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m := staleEpoch.FindStringSubmatch(line); m != nil && m[1] == m[2] {
				n++
				r.logf("%s: %s", filepath.Base(path), strings.TrimSpace(ansi.ReplaceAllString(line, "")))
			}
		}
	}
	return n
}

// ansi matches the colour codes of the processes' console logs.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")
