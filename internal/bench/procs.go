package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// proc is a child process of a measurement.
type proc struct {
	name string
	pid  int
	done chan struct{}
	wait func() error
}

// startChild starts a `bench child` process with a's settings; its output goes to a log
// file in dir.
func startChild(o Options, dir, name string, a childArgs) (*proc, error) {
	if o.Child == nil {
		return nil, errors.New("bench: this measurement runs worker processes and Options.Child is not set")
	}
	cmd := o.Child(a.flags()...)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	p := &proc{name: name, pid: cmd.Process.Pid, done: make(chan struct{})}
	var werr error
	go func() { werr = cmd.Wait(); _ = logf.Close(); close(p.done) }()
	p.wait = func() error { <-p.done; return werr }
	return p, nil
}

// stop sends SIGTERM and waits (SIGKILL after 15 s).
func (p *proc) stop() {
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// kill sends SIGKILL and waits until the process has exited.
func (p *proc) kill() {
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
}

// cpuSeconds is the user + system CPU time of process pid so far (/proc; 0 where missing).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:]) // the command may hold spaces
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// redisCPU is used_cpu_user + used_cpu_sys summed over the servers (every master of a cluster).
func redisCPU(ctx context.Context, rdb redis.UniversalClient) float64 {
	read := func(ctx context.Context, c *redis.Client) float64 {
		var sum float64
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, _ := strconv.ParseFloat(infoField(ctx, c, "cpu", f), 64)
			sum += v
		}
		return sum
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var total float64
		ch := make(chan float64, 16)
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { ch <- read(ctx, c); return nil })
		close(ch)
		for v := range ch {
			total += v
		}
		return total
	}
	return read(ctx, rdb.(*redis.Client))
}

// group is the processes of one run: schedulers and workers.
type group struct {
	procs []*proc
}

func (g *group) stop() {
	for _, p := range g.procs {
		p.stop()
	}
}

// startGroup starts schedulers and workers against e and waits until each has INCRed the
// ready key (or one exits).
func startGroup(ctx context.Context, o Options, e *env, dir string, schedulers, workers int, interval time.Duration, keys int, out bool) (*group, error) {
	g := &group{}
	counter := counterKey(e)
	base := childArgs{redis: e.url, prefix: e.prefix, queue: e.queue, counter: counter, keys: keys, concurrency: o.Concurrency, interval: interval}
	for i := range schedulers {
		a := base
		a.role = "scheduler"
		p, err := startChild(o, dir, fmt.Sprintf("scheduler%d", i+1), a)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	for i := range workers {
		a := base
		a.role = "worker"
		if out {
			a.out = filepath.Join(dir, fmt.Sprintf("worker%d.cycles", i+1))
		}
		p, err := startChild(o, dir, fmt.Sprintf("worker%d", i+1), a)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n, _ := e.rdb.Get(ctx, counter+":ready").Int()
		if n >= schedulers+workers {
			return g, nil
		}
		for _, p := range g.procs {
			select {
			case <-p.done:
				g.stop()
				return nil, fmt.Errorf("bench: %s exited at start: %v (log in %s)", p.name, p.wait(), dir)
			default:
			}
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("bench: %d of %d processes ready after a minute (logs in %s)", n, schedulers+workers, dir)
		}
		select {
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond): // the children's start has no event here
		}
	}
}

// seedKeys registers n keys of the bench poller (due every interval) and runs each key's
// first cycle, so every key has its state.
func seedKeys(ctx context.Context, e *env, n int, interval time.Duration) (*redisstore.Store, watukuytype.Poller, time.Duration, error) {
	st, err := e.store()
	if err != nil {
		return nil, watukuytype.Poller{}, 0, err
	}
	p := noopPoller(n, interval)
	eng, err := newEngine(st, "seed", p, watukuytype.Hooks{})
	if err != nil {
		return nil, p, 0, err
	}
	t := time.Now()
	if err := eng.Setup(ctx); err != nil {
		return nil, p, 0, fmt.Errorf("register %d keys: %w", n, err)
	}
	if _, err := runFirstCycles(ctx, eng, keysOf(p), 64); err != nil {
		return nil, p, 0, err
	}
	return st, p, time.Since(t), nil
}

// spreadDue makes the keys due evenly over [from, from+interval): nextDue in each state and
// the due set's score, as the keys' own cycles would have left them in a steady state.
func spreadDue(ctx context.Context, rdb redis.UniversalClient, st *redisstore.Store, parts []string, from time.Time, interval time.Duration) error {
	for i := 0; i < len(parts); i += 5000 {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+5000, len(parts)); j++ {
				k := watukuytype.Key{Poller: pollerName, Partition: parts[j]}
				at := from.Add(time.Duration(int64(interval) * int64(j) / int64(len(parts)))).UnixMilli()
				p.HSet(ctx, st.Key(k, "state"), statehash.NextDue, at)
				p.ZAdd(ctx, st.DueKey(k.Poller), redis.Z{Score: float64(at), Member: k.String()})
			}
			return nil
		}); err != nil {
			return fmt.Errorf("spread due times: %w", err)
		}
	}
	return nil
}

// counterKey counts the workers' cycles (and, at ":ready", the processes ready), under one
// hash tag so a cluster takes both.
func counterKey(e *env) string { return e.prefix + ":{bench}:cycles" }

// cycleLog is what the workers' --out files recorded: per cycle its key, the due time it
// served and its start, in ms.
type cycleLog struct {
	key        string
	due, start int64
}

func readCycles(dir string) ([]cycleLog, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "worker*.cycles"))
	var out []cycleLog
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 3 {
				continue
			}
			due, _ := strconv.ParseInt(fs[1], 10, 64)
			st, _ := strconv.ParseInt(fs[2], 10, 64)
			out = append(out, cycleLog{fs[0], due, st})
		}
		_ = fh.Close()
	}
	return out, nil
}

// lateStats are the lateness figures of the cycles whose due time is in [from, to).
type lateStats struct {
	samples, doubles int
	unserved         int // keys of want with no cycle in the window
	p50, p99, worst  time.Duration
	served           map[string]int // cycles per key in the window
}

func lateness(cycles []cycleLog, from, to time.Time, want int) lateStats {
	st := lateStats{served: map[string]int{}}
	seen := map[string]bool{}
	var late []int64
	for _, c := range cycles {
		if c.due < from.UnixMilli() || c.due >= to.UnixMilli() {
			continue
		}
		id := c.key + "@" + strconv.FormatInt(c.due, 10)
		if seen[id] {
			st.doubles++ // the same due time of the same key served twice
			continue
		}
		seen[id] = true
		st.served[c.key]++
		late = append(late, max(0, c.start-c.due))
	}
	slices.Sort(late)
	st.samples = len(late)
	st.unserved = max(0, want-len(st.served))
	if len(late) > 0 {
		pct := func(q float64) time.Duration {
			return time.Duration(late[min(len(late)-1, int(q*float64(len(late))))]) * time.Millisecond
		}
		st.p50, st.p99, st.worst = pct(0.50), pct(0.99), time.Duration(late[len(late)-1])*time.Millisecond
	}
	return st
}

// waitUntil waits until t or ctx's end.
func waitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// dueRun is a run of keys due every interval, their due times spread evenly from from on,
// served by scheduler and worker processes that log each cycle's due time and start.
type dueRun struct {
	e    *env
	g    *group
	dir  string
	from time.Time
	seed time.Duration // registering the keys and running their first cycles
}

// startDueRun seeds n keys due every interval, starts the processes, then spreads the keys'
// due times over one interval from a second later. The caller closes dr.e.
func startDueRun(ctx context.Context, o Options, name string, n int, interval time.Duration, schedulers, workers int) (*dueRun, error) {
	e, err := newEnv(ctx, o, name, false)
	if err != nil {
		return nil, err
	}
	dr := &dueRun{e: e}
	if dr.dir, err = os.MkdirTemp(o.Dir, name+"-procs-"); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	st, p, seed, err := seedKeys(ctx, e, n, interval)
	if err == nil {
		// The seeding cycles ran unclaimed, so their due entries still say "due at
		// registration": a scheduler started now would claim every key at once, and a
		// not-due Begin's due write, landing after the spread below, would put back the
		// seeding's due time (and the first keys would be served up to an interval late).
		// Nothing is due while the processes start.
		dr.seed = seed
		err = spreadDue(ctx, e.rdb, st, p.Partitions, time.Now().Add(time.Hour), interval)
	}
	if err == nil {
		dr.g, err = startGroup(ctx, o, e, dr.dir, schedulers, workers, interval, n, true)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	dr.from = time.Now().Add(time.Second)
	if err := spreadDue(ctx, e.rdb, st, p.Partitions, dr.from, interval); err != nil {
		dr.g.stop()
		e.close()
		return nil, err
	}
	return dr, nil
}

// Lateness measures due-time lateness: o.DueKeys keys due every o.Interval, their due times
// spread evenly, served by one scheduler and three worker processes for o.LatenessFor. A
// cycle's lateness is its start minus the due time its key's state recorded (nextDue, read
// by the worker just before the cycle). Value: p99; baseline: p50 of the same run.
func Lateness(ctx context.Context, o Options) (Result, error) {
	n := o.DueKeys
	r, t0 := start("lateness-p99")
	r.Unit, r.BaselineOf, r.Goal = "s", "p50, same run", "p99 < 1 s"
	dr, err := startDueRun(ctx, o, "lateness", n, o.Interval, 1, 3)
	if err != nil {
		return r, err
	}
	defer dr.e.close()
	e, g, dir, from := dr.e, dr.g, dr.dir, dr.from
	cpu0, stats0 := cpuOf(ctx, e, g), commandStats(ctx, e.rdb)
	to := from.Add(o.LatenessFor)
	err = waitUntil(ctx, to.Add(2*time.Second)) // the last due times' cycles end
	cpu1, stats1 := cpuOf(ctx, e, g), commandStats(ctx, e.rdb)
	g.stop()
	if err != nil {
		return r, err
	}
	cycles, err := readCycles(dir)
	if err != nil {
		return r, err
	}
	ls := lateness(cycles, from, to, n)
	expected := int(int64(n) * int64(o.LatenessFor) / int64(o.Interval))
	if ls.samples == 0 {
		return r, fmt.Errorf("no cycle served a due time in the window (logs in %s)", dir)
	}
	r.Value, r.Baseline = ls.p99.Seconds(), ls.p50.Seconds()
	r.meet(ls.p99 < time.Second && ls.unserved == 0)
	r.Details = map[string]float64{"keys": float64(n), "p50": ls.p50.Seconds(), "p99": ls.p99.Seconds(), "max": ls.worst.Seconds(),
		"cyclesServed": float64(ls.samples), "cyclesExpected": float64(expected), "doubles": float64(ls.doubles), "keysUnserved": float64(ls.unserved), "seedSeconds": dr.seed.Seconds()}
	addCPU(r.Details, cpu0, cpu1)
	first, last := lateness(cycles, from, from.Add(o.LatenessFor/5), 0), lateness(cycles, to.Add(-o.LatenessFor/5), to, 0)
	r.Details["p50FirstFifth"], r.Details["p50LastFifth"] = first.p50.Seconds(), last.p50.Seconds()
	r.Details["demandPerSecond"] = float64(n) / o.Interval.Seconds()
	r.Details["servedPerSecond"] = float64(ls.samples) / o.LatenessFor.Seconds()
	for cmd, us := range stats1 {
		if share := (us - stats0[cmd]) / 1e6 / wallOf(cpu0, cpu1); share >= 0.01 {
			r.Details["redisCoreShare:"+cmd] = share
		}
	}
	r.Notes = fmt.Sprintf("%d keys due every %v, due times spread evenly, 1 scheduler + 3 worker processes (concurrency %d) for %v; "+
		"lateness = cycle start - the state's nextDue; %d due times served in the window (about %d expected: a fixed schedule counts the next due time from the cycle's end), "+
		"%d keys never served, %d due times served twice; details: each process's share of one core over the run, "+
		"Redis' share of a core per command (INFO commandstats, those of 1%% or more), p50 of the first and last fifth of the window (a growing backlog), demand and served cycles/s",
		n, o.Interval, o.Concurrency, o.LatenessFor, ls.samples, expected, ls.unserved, ls.doubles)
	r.Duration = time.Since(t0)
	return r, nil
}

// cpuOf is the CPU seconds so far of each child process and of Redis.
func cpuOf(ctx context.Context, e *env, g *group) map[string]float64 {
	m := map[string]float64{"redis(INFO)": redisCPU(ctx, e.rdb)}
	for _, p := range g.procs {
		m[p.name] = cpuSeconds(p.pid)
	}
	m["wall"] = float64(time.Now().UnixNano()) / 1e9
	return m
}

// wallOf is the seconds between two cpuOf readings.
func wallOf(before, after map[string]float64) float64 { return after["wall"] - before["wall"] }

// commandStats is the usec Redis spent per command (INFO commandstats; every master of a
// cluster summed).
func commandStats(ctx context.Context, rdb redis.UniversalClient) map[string]float64 {
	out := map[string]float64{}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return out
	}
	for _, l := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(l, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				out[name], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return out
}

// addCPU puts each process's share of one core over the interval into d ("cpu:worker1": 0.8).
func addCPU(d map[string]float64, before, after map[string]float64) {
	wall := after["wall"] - before["wall"]
	for k, v := range after {
		if k != "wall" && wall > 0 {
			d["cpu:"+k] = (v - before[k]) / wall
		}
	}
}
