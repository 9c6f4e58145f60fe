//go:build unix

package procchaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/watukuytype"
)

// The process run's other two keys: a hot ordering key with a poison event, and items without
// a version whose content comes back.
var (
	// hotKey is the poller whose items hot-h0000… share the ordering key hotGroup (their field
	// group): a burst of hotBurst changes becomes hotBurst events of one ordering key. Its
	// hot-y identities change often and have their own ordering keys.
	hotKey = watukuytype.Key{Poller: "hot"}
	// fpKey is the poller without a version: its items' field n takes one of three values, so
	// content goes A→B→A, and identities are deleted and created again.
	fpKey = watukuytype.Key{Poller: "fp"}
)

const (
	hotGroup    = "H"
	hotBurst    = 650 // more than one outbox read (512) of the ordering key
	hotYs       = 3
	hotAttempts = 3 // delivery.attempts of the hot poller: the poison event is parked after 3 failures
	// hotPoison is the identity whose burst version the receiver refuses (500) until the
	// operator's retry: the events of hotGroup before it are delivered, those after it held.
	hotPoison = "hot-h0100"
	fpIDs     = 8
	// hotAimWait bounds the waits of a hot-key fault for what it aims at (the poison event's
	// attempts and park, a burst's commit).
	hotAimWait = 10 * time.Second
	// hotHeldTries bounds the bursts a held-burst fault puts to land its kill.
	hotHeldTries = 3
	// rewindGap is how soon after a delivery of an ordering key an older event of that key may
	// not follow: within one cycle a key's events go out in commit order, and a new cycle
	// after a death starts when the dead cycle's claim ends, a lease TTL and core.ClaimGrace
	// after its last renewal (more than a second).
	rewindGap = 250 * time.Millisecond
)

// hotState is the hot key's fault stages and the receiver's poison (r.recv.mu).
type hotState struct {
	stage  int // next hot fault: 0 poison burst, 1 held burst, 2 operator retry
	bursts []map[string]int
	// poison names the change the receiver refuses ("" none): identity and version.
	poisonID, poisonVersion string
	poisonFails             int
	failed                  chan struct{} // a refusal of the poison event (buffered 1)
	parkKills               int           // SIGKILLs that landed between park and ack
	commitKills             int           // SIGKILLs right after a burst's commit
	retries                 int           // parked rows the CLI retried
}

// RunConfig is the process run's config: OrdersConfig plus the hot poller (timestamp
// pages of up to 1000 items committed in one script, ordering key from the item's group,
// three attempts before an event is parked) over hotURL, and the fp poller (token cursor with
// tombstones, no version: the fingerprint of field n) over fpURL.
func RunConfig(redisURL, prefix, apiURL, hotURL, fpURL, hookURL string, leaseTTL time.Duration) string {
	hook := fmt.Sprintf(`{url: %s/hook, secret: "${HOOK_SECRET}", timeout: 5s}`, hookURL)
	return OrdersConfig(redisURL, prefix, apiURL, hookURL, leaseTTL) + fmt.Sprintf(`  - name: hot
    request: {url: %s/items, timeout: 5s}
    items: data
    version: version
    cursor: {strategy: timestamp, field: updated_at, param: updated_since, limitParam: limit, limit: 1000, hasMore: has_more, tieBreaker: after_id}
    schedule: {min: 100ms, max: 500ms}
    commit: {maxItems: 1000}
    leaseTTL: %s
    delivery:
      webhook: %s
      concurrency: 4
      orderingKey: group
      attempts: %d
      retry: {horizon: none}
  - name: fp
    request: {url: %s/sync, timeout: 5s}
    items: data
    fingerprint: [n]
    cursor: {strategy: token, param: cursor, next: next_cursor, deleted: deleted, hasMore: has_more, limitParam: limit, limit: 20}
    schedule: {min: 100ms, max: 500ms}
    leaseTTL: %s
    delivery:
      webhook: %s
      concurrency: 4
`, hotURL, leaseTTL, hook, hotAttempts, fpURL, leaseTTL, hook)
}

// hotOrderingKey is the hot poller's ordering key of an event, as orderingKey: group makes it.
func hotOrderingKey(ev watukuytype.Event) string {
	var it struct {
		Group *string `json:"group"`
	}
	if ev.Type != watukuytype.Deleted && json.Unmarshal(ev.Item, &it) == nil && it.Group != nil {
		return *it.Group
	}
	return ev.Identity
}

// mutateOthers changes the hot key's hot-y identities and the fp items (content among three
// values, deletes and re-creates) on each tick of mutate.
func (r *processRun) mutateOthers(rng *rand.Rand) {
	now := time.Now().UTC()
	r.apis.hot.SetNow(now)
	r.apis.fp.SetNow(now)
	if rng.IntN(4) == 0 {
		r.apis.hot.Put("hot-y"+strconv.Itoa(rng.IntN(hotYs)), map[string]any{"n": rng.IntN(1000)})
	}
	if rng.IntN(2) == 0 {
		id := "fp-" + strconv.Itoa(rng.IntN(fpIDs))
		if rng.IntN(6) == 0 {
			r.apis.fp.Delete(id)
		} else {
			r.apis.fp.Put(id, map[string]any{"n": rng.IntN(3)})
		}
	}
}

// hotBurstPut makes a burst: hotBurst items of hotGroup and then every hot-y item, in one
// step of the API (one page, one commit; the hot-y events follow the held ones in the
// outbox). The items carry the burst's number, so MONITOR can tell its commit.
func (r *processRun) hotBurstPut() (n int, versions map[string]int) {
	r.recv.mu.Lock()
	n = len(r.hot.bursts) + 1
	r.recv.mu.Unlock()
	ids := make([]string, 0, hotBurst+hotYs)
	for i := range hotBurst {
		ids = append(ids, fmt.Sprintf("hot-h%04d", i))
	}
	for i := range hotYs {
		ids = append(ids, "hot-y"+strconv.Itoa(i))
	}
	r.apis.hot.SetNow(time.Now().UTC())
	vs := r.apis.hot.PutEach(ids, func(id string) map[string]any {
		if strings.HasPrefix(id, "hot-h") {
			return map[string]any{"group": hotGroup, "burst": hotBurstMark(n)}
		}
		return map[string]any{"n": n}
	})
	versions = map[string]int{}
	for i, id := range ids[:hotBurst] {
		versions[id] = vs[i]
	}
	r.recv.mu.Lock()
	r.hot.bursts = append(r.hot.bursts, versions)
	r.recv.mu.Unlock()
	return n, versions
}

// hotBurstMark is the value of burst n's field burst.
func hotBurstMark(n int) string { return fmt.Sprintf("hot-burst-%d", n) }

// refusePoison reports whether the receiver answers this delivery 500: the hot key's poison
// event while the poison is on. Each refusal is counted and signalled.
func (r *processRun) refusePoison(ev watukuytype.Event) bool {
	r.recv.mu.Lock()
	defer r.recv.mu.Unlock()
	h := &r.hot
	if h.poisonID == "" || ev.Poller != hotKey.Poller || ev.Identity != h.poisonID || ev.Version != h.poisonVersion {
		return false
	}
	h.poisonFails++
	select {
	case h.failed <- struct{}{}:
	default:
	}
	return true
}

// hotFault injects the hot key's next stage: a burst with a poison event whose park is
// followed at once by a SIGKILL of its worker (between park and ack); a burst while the key
// is held whose committer is killed right after the commit (more held entries in the outbox
// than one read, then the hot-y events behind them); the operator's `watukuy parked retry`
// once the receiver accepts the poison event, with a worker killed meanwhile.
func (r *processRun) hotFault(ctx context.Context, rng *rand.Rand) error {
	r.mu.Lock()
	stage := r.hot.stage
	r.hot.stage = (stage + 1) % 3
	r.mu.Unlock()
	switch stage {
	case 0:
		return r.hotPoisonBurst(ctx)
	case 1:
		return r.hotHeldBurst(ctx)
	default:
		return r.hotRetry(ctx, rng)
	}
}

// hotPoisonBurst: the poison's version is the next burst's; the MONITOR trigger on the hot
// key's park script kills its worker as Redis answers it, before the ack that follows.
func (r *processRun) hotPoisonBurst(ctx context.Context) error {
	r.loadScript(ctx, "park")
	mon, err := monitorScripts(r.db.primary.addr(), filepath.Join(r.files.dir, "logs", "monitor-hot-poison.log"))
	if err != nil {
		r.logf("hot: MONITOR on %s: %v (the park is not aimed at)", r.db.primary.name, err)
	}
	r.recv.mu.Lock()
	r.hot.failed = make(chan struct{}, 1)
	r.hot.poisonID = hotPoison
	r.hot.poisonVersion = strconv.Itoa(r.apis.hot.Final()[hotPoison] + 1)
	r.recv.mu.Unlock()
	// The worker retrying the poison event is known before it parks it: the kill then takes
	// microseconds, and lands before the ack that follows the park's reply.
	var target atomic.Pointer[osProc]
	killed := make(chan string, 1)
	if mon != nil {
		mon.arm(func(cmd string) bool { return isScript(cmd, "park") && strings.Contains(cmd, hotTag) }, func() {
			if p := target.Load(); p != nil && p.signal(syscall.SIGKILL) == nil {
				killed <- p.name
				return
			}
			killed <- r.killHolder(hotKey)
		})
	}
	r.recv.mu.Lock()
	failed := r.hot.failed
	r.recv.mu.Unlock()
	go func() {
		select {
		case <-failed:
		case <-time.After(hotAimWait):
			return
		}
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		snap, err := r.db.store.Inspect(ictx, hotKey)
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, w := range r.procs.workers {
			if err == nil && w.name == snap.LeaseOwner && !r.procs.stopped[w] {
				w.expect.Store(true) // the harness replaces it (afterHotKill), not the respawn
				target.Store(w)
			}
		}
	}()
	n, _ := r.hotBurstPut()
	r.logf("hot: burst %d, %d changes of ordering key %s then %d others; the receiver refuses %s v%s (the poison event) until the operator's retry",
		n, hotBurst, hotGroup, hotYs, hotPoison, r.hot.poisonVersion)
	if mon == nil {
		return nil
	}
	defer mon.stop(0)
	who, err := r.awaitAimedKill(ctx, mon, killed, "no park of the poison event")
	if who == "" {
		return err
	}
	return r.afterHotKill(ctx, who, "as Redis answered its park of the poison event (before the ack of the events delivered before it)", &r.hot.parkKills)
}

// hotHeldBurst: a burst while the key is held; its committer is killed as Redis answers the
// commit, so the burst's events wait in the outbox: hotBurst held ones, then the hot-y ones.
// A commit whose cycle ended before the kill (no worker holds the key by then) leaves
// nothing to aim at: another burst is tried, up to hotHeldTries.
func (r *processRun) hotHeldBurst(ctx context.Context) error {
	for try := 1; try <= hotHeldTries; try++ {
		who, n, fired, err := r.hotHeldBurstOnce(ctx)
		if who != "" {
			return r.afterHotKill(ctx, who, fmt.Sprintf("as Redis answered its commit of burst %d (before it delivered or held anything)", n), &r.hot.commitKills)
		}
		if err != nil || !fired {
			return err
		}
	}
	return nil
}

// hotHeldBurstOnce puts one burst and waits for its commit's kill: the killed worker ("" when
// none was), the burst's number, and whether its commit was seen.
func (r *processRun) hotHeldBurstOnce(ctx context.Context) (who string, n int, fired bool, err error) {
	r.recv.mu.Lock()
	n = len(r.hot.bursts) + 1
	r.recv.mu.Unlock()
	r.loadScript(ctx, "commit_poll")
	mon, err := monitorScripts(r.db.primary.addr(), filepath.Join(r.files.dir, "logs", fmt.Sprintf("monitor-hot-%d.log", n)))
	if err != nil {
		r.logf("hot: MONITOR on %s: %v (the commit is not aimed at)", r.db.primary.name, err)
	}
	killed := make(chan string, 1)
	var seen atomic.Bool
	if mon != nil {
		mark := hotBurstMark(n)
		mon.arm(func(cmd string) bool {
			return isScript(cmd, "commit_poll") && strings.Contains(cmd, hotTag) && strings.Contains(cmd, mark)
		}, func() {
			seen.Store(true)
			who := r.killHolder(hotKey)
			if who == "" {
				r.logf("hot: burst %d: no worker held the key when its commit was answered; nothing killed", n)
			}
			killed <- who
		})
	}
	r.hotBurstPut()
	r.logf("hot: burst %d while %s is held (%d parked), %d changes then %d others", n, hotGroup, r.parkedCount(ctx), hotBurst, hotYs)
	if mon == nil {
		return "", n, false, nil
	}
	defer mon.stop(0)
	who, err = r.awaitAimedKill(ctx, mon, killed, fmt.Sprintf("no commit of burst %d", n))
	return who, n, seen.Load(), err
}

// awaitAimedKill waits up to hotAimWait for the kill mon fires; "" when the aimed script did not
// run in time (missed is logged) or ctx ended.
func (r *processRun) awaitAimedKill(ctx context.Context, mon *scriptMonitor, killed <-chan string, missed string) (string, error) {
	t := time.NewTimer(hotAimWait)
	defer t.Stop()
	select {
	case who := <-killed:
		return who, nil
	case <-t.C:
		if mon.disarm() {
			r.logf("hot: %s within %s", missed, hotAimWait)
			return "", nil
		}
		return <-killed, nil
	case <-ctx.Done():
		mon.disarm()
		return "", ctx.Err()
	}
}

// hotRetry: the receiver accepts the poison event from now on, a worker is SIGKILLed while
// the operator lists the parked rows and retries them with the CLI binary.
func (r *processRun) hotRetry(ctx context.Context, rng *rand.Rand) error {
	r.recv.mu.Lock()
	r.hot.poisonID = ""
	r.recv.mu.Unlock()
	pick := rng.Uint64()
	done := make(chan struct{})
	go func() { // the operator's commands run while a worker dies
		defer close(done)
		r.killWorker(ctx, pick, "a random worker, during the operator's parked retry")
	}()
	n, err := r.retryParked(ctx)
	<-done
	if err != nil {
		r.logf("hot: operator: %v", err)
	}
	r.logf("hot: operator retried %d parked row(s) with `watukuy parked retry`", n)
	return nil
}

// hotTag is the hash tag of the hot key's Redis keys, in every script call of the key.
var hotTag = "{" + hotKey.String() + "}"

// loadScript loads one of watukuy's scripts into the primary's script cache (a restarted or
// promoted server has lost it): a worker's EVALSHA then runs at once, and MONITOR does not
// show a first EVALSHA that failed with NOSCRIPT before the script ran.
func (r *processRun) loadScript(ctx context.Context, name string) {
	src, err := luascripts.Source(name)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err = r.db.direct.ScriptLoad(ctx, src).Err()
	}
	if err != nil {
		r.logf("hot: SCRIPT LOAD %s: %v", name, err)
	}
}

// isScript tells a MONITOR line's command that runs watukuy's script name.
func isScript(cmd, name string) bool {
	return (strings.HasPrefix(cmd, `"evalsha" `) || strings.HasPrefix(cmd, `"eval" `)) && scriptOf(cmd).name == name
}

// killHolder SIGKILLs the worker holding key's lease at once (it runs on MONITOR's reader,
// right as Redis answered the holder): every running worker is SIGSTOPped first, for the
// microseconds it takes to read the lease, and the others SIGCONTed after. It returns the
// killed worker's name ("" when none held it).
func (r *processRun) killHolder(key watukuytype.Key) string {
	r.mu.Lock()
	var frozen []*osProc
	for _, w := range r.procs.workers {
		if !r.procs.stopped[w] && w.signal(syscall.SIGSTOP) == nil {
			frozen = append(frozen, w)
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	snap, err := r.db.store.Inspect(ctx, key)
	cancel()
	who := ""
	for _, w := range frozen {
		if err == nil && w.name == snap.LeaseOwner {
			w.expect.Store(true) // the harness replaces it (afterHotKill), not the respawn
			_ = w.signal(syscall.SIGKILL)
			who = w.name
		}
	}
	for _, w := range frozen {
		if w.name != who {
			_ = w.signal(syscall.SIGCONT)
		}
	}
	return who
}

// afterHotKill replaces the worker killHolder killed and logs what the kill left: parked
// rows, held entries and the outbox of the hot key.
func (r *processRun) afterHotKill(ctx context.Context, who, when string, count *int) error {
	if who == "" {
		r.logf("hot: no worker held the key %s; nothing killed", when)
		return nil
	}
	r.mu.Lock()
	i := -1
	for j, w := range r.procs.workers {
		if w.name == who {
			i = j
		}
	}
	if i < 0 {
		r.mu.Unlock()
		return nil
	}
	p := r.procs.workers[i]
	r.mu.Unlock()
	p.kill()
	if err := r.replaceWorker(i, p); err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	snap, err := r.db.store.Inspect(ictx, hotKey)
	if err == nil {
		r.mu.Lock()
		*count++
		r.mu.Unlock()
		r.logf("hot: SIGKILL %s (pid %d) %s: %d parked, %d held, %d entries in the outbox", who, p.pid(), when, snap.Parked, snap.Held, snap.OutboxLen)
	}
	return nil
}

// parkedCount is the hot key's parked rows (-1 when unknown).
func (r *processRun) parkedCount(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	snap, err := r.db.store.Inspect(ctx, hotKey)
	if err != nil {
		return -1
	}
	return snap.Parked
}

// cli runs the CLI binary as an operator does, against the processes' Redis URL.
func (r *processRun) cli(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	args = append(args, "--redis", r.db.url, "--prefix", processPrefix)
	cmd := exec.CommandContext(ctx, filepath.Join(r.files.binDir, "watukuy"), args...)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return out, fmt.Errorf("watukuy %s: %w: %s", strings.Join(args[:2], " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return out, fmt.Errorf("watukuy %s: %w", strings.Join(args[:2], " "), err)
	}
	return out, nil
}

// retryParked lists the hot key's parked rows with `watukuy parked ls --json` and retries
// them with `watukuy parked retry`, trying again (up to 3 times) when a command fails (the
// key's lease busy, Redis faulted); it returns how many rows were retried.
func (r *processRun) retryParked(ctx context.Context) (int, error) {
	var last error
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		out, err := r.cli(ctx, "parked", "ls", "--poller", hotKey.Poller, "--json")
		if err != nil {
			last = err
			continue
		}
		var rows []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(out, &rows); err != nil {
			return 0, fmt.Errorf("parked ls --json: %w: %s", err, out)
		}
		if len(rows) == 0 {
			return 0, nil
		}
		ids := make([]string, len(rows))
		for i, row := range rows {
			ids[i] = row.ID
		}
		if _, err := r.cli(ctx, "parked", "retry", "--poller", hotKey.Poller, "--ids", strings.Join(ids, ",")); err != nil {
			last = err
			continue
		}
		r.mu.Lock()
		r.hot.retries += len(ids)
		r.mu.Unlock()
		return len(ids), nil
	}
	return 0, last
}

// checkHot adds the hot key's own checks to a report. G1: every change of a burst reaches
// the receiver (held events are released by the retry, none is lost; bursts are seconds apart
// and each is committed before the next). G4: per ordering key, a delivery never follows a
// newer one of its key by less than rewindGap (a retry that requeues the poison event ahead
// of an older event of its key: x2, x1).
func (r *processRun) checkHot(rep *chaos.Report) {
	ds := r.rec.Deliveries()
	got := map[string]bool{}
	for _, d := range ds {
		if d.Event.Poller == hotKey.Poller {
			got[d.Event.Identity+"@"+d.Event.Version] = true
		}
	}
	r.recv.mu.Lock()
	bursts := r.hot.bursts
	r.recv.mu.Unlock()
	delete(rep.NotMeasured, "G1")
	for b, vs := range bursts {
		var missing []string
		for id, v := range vs {
			if !got[id+"@"+strconv.Itoa(v)] {
				missing = append(missing, id+" v"+strconv.Itoa(v))
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			rep.Violations["G1"] = append(rep.Violations["G1"], chaos.Violation{Key: hotKey,
				Detail: fmt.Sprintf("burst %d: %d changes never delivered, e.g. %s", b+1, len(missing), strings.Join(missing[:min(3, len(missing))], ", "))})
		}
	}
	type last struct {
		seq string
		at  time.Time
		ev  watukuytype.Event
	}
	prev := map[string]last{}
	for _, d := range ds {
		ev := d.Event
		if ev.Poller != hotKey.Poller {
			continue
		}
		ok := hotOrderingKey(ev)
		if p, has := prev[ok]; has && chaos.SeqLess(ev.Seq, p.seq) && d.At.Sub(p.at) < rewindGap {
			rep.Violations["G4"] = append(rep.Violations["G4"], chaos.Violation{Key: hotKey, Detail: fmt.Sprintf(
				"ordering key %s: %s v%s (seq %s) delivered %s after %s v%s (seq %s), a newer event of its key",
				ok, ev.Identity, ev.Version, ev.Seq, d.At.Sub(p.at).Round(time.Microsecond), p.ev.Identity, p.ev.Version, p.seq)})
		}
		prev[ok] = last{ev.Seq, d.At, ev}
	}
}
