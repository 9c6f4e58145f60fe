package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScaleOut measures no-op cycles per second with each count of o.Workers worker processes
// (and one scheduler process), on one redis-server and on a local three-master Redis Cluster
// the bench starts: o.NoopKeys keys made due at once, two rounds per count, the time until
// the workers counted every cycle. Each figure's baseline is the one-worker figure on the
// same Redis; Details hold each process's share of a core and Redis' (INFO cpu).
func ScaleOut(ctx context.Context, o Options) ([]Result, error) {
	var out []Result
	for _, cluster := range []bool{false, true} {
		rs, err := scaleOn(ctx, o, cluster)
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func scaleOn(ctx context.Context, o Options, cluster bool) ([]Result, error) {
	backend := "redis-server"
	if cluster {
		backend = "cluster3"
	}
	n := o.NoopKeys
	e, err := newEnv(ctx, o, "scale-"+backend, cluster)
	if err != nil {
		return nil, err
	}
	defer e.close()
	st, p, _, err := seedKeys(ctx, e, n, 0)
	if err != nil {
		return nil, err
	}
	counter := counterKey(e)
	var out []Result
	var one float64
	for _, w := range o.Workers {
		r, t0 := start(fmt.Sprintf("scale-%s-%dw", backend, w))
		r.Unit, r.BaselineOf = "cycles/s", "1 worker process, same Redis, same run"
		dir, err := os.MkdirTemp(o.Dir, fmt.Sprintf("scale-%s-%dw-", backend, w))
		if err != nil {
			return out, fmt.Errorf("bench: %w", err)
		}
		if err := e.rdb.Del(ctx, counter, counter+":ready").Err(); err != nil {
			return out, fmt.Errorf("reset %s: %w", counter, err)
		}
		g, err := startGroup(ctx, o, e, dir, 1, w, 0, n, false)
		if err != nil {
			return out, err
		}
		// One untimed round first: the processes' first claims and connections.
		const rounds = 2
		var busy time.Duration
		var cpu0 map[string]float64
		for round := range rounds + 1 {
			if round == 1 {
				cpu0, busy = cpuOf(ctx, e, g), 0
			}
			if err := makeAllDue(ctx, e.rdb, st, p.Partitions); err != nil {
				g.stop()
				return out, err
			}
			t := time.Now()
			e.rdb.Publish(ctx, st.WakeChannel(), "bench") // the scheduler claims now, not after its idle sleep
			if err := waitCount(ctx, e.rdb, counter, int64((round+1)*n)); err != nil {
				g.stop()
				return out, fmt.Errorf("%s, %d workers, round %d: %w (logs in %s)", backend, w, round, err, dir)
			}
			busy += time.Since(t)
		}
		cpu1 := cpuOf(ctx, e, g)
		g.stop()
		r.Value = float64(rounds*n) / busy.Seconds()
		if w == o.Workers[0] {
			one = r.Value
		}
		r.Baseline = one
		r.Details = map[string]float64{"keys": float64(n), "workers": float64(w), "rounds": rounds}
		addCPU(r.Details, cpu0, cpu1)
		r.Notes = fmt.Sprintf("%s: %d keys made due at once x %d timed rounds (after one untimed), 1 scheduler + %d worker processes (concurrency %d each); "+
			"details: each process's share of one core over the rounds (cpu:redis(INFO) summed over the servers); the machine has %d cores",
			backend, n, rounds, w, o.Concurrency, runtime.NumCPU())
		r.Duration = time.Since(t0)
		out = append(out, r)
	}
	return out, nil
}

// waitCount polls the workers' cycle counter until it reaches want (bounded): the children
// report through Redis, the only channel they share with the bench.
func waitCount(ctx context.Context, rdb redis.UniversalClient, counter string, want int64) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, _ := rdb.Get(ctx, counter).Int64()
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d cycles counted after 5 minutes", got, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TwoSchedulers runs two scheduler processes and two worker processes over o.FailoverKeys
// keys due every o.FailoverInterval for o.FailoverFor, SIGKILLs the first scheduler a third
// of the way in, and checks from the workers' cycle logs that no key's due time was served
// twice and how late the cycles were. Value: the worst lateness after the kill; baseline:
// the worst before it.
func TwoSchedulers(ctx context.Context, o Options) (Result, error) {
	n := o.FailoverKeys
	r, t0 := start("two-schedulers-kill")
	r.Unit, r.BaselineOf, r.Goal = "s", "worst lateness before the kill, same run", "0 doubles, worst <= 2 s"
	dr, err := startDueRun(ctx, o, "failover", n, o.FailoverInterval, 2, 2)
	if err != nil {
		return r, err
	}
	defer dr.e.close()
	g, dir, from := dr.g, dr.dir, dr.from
	killAt := from.Add(o.FailoverFor / 3)
	to := from.Add(o.FailoverFor)
	if err := waitUntil(ctx, killAt); err != nil {
		g.stop()
		return r, err
	}
	g.procs[0].kill() // scheduler1, mid-run
	err = waitUntil(ctx, to.Add(o.FailoverTail))
	g.stop()
	if err != nil {
		return r, err
	}
	cycles, err := readCycles(dir)
	if err != nil {
		return r, err
	}
	// Due times in [from, to), each served whenever it was, up to FailoverTail after to.
	before, after, all := lateness(cycles, from, killAt, 0), lateness(cycles, killAt, to, 0), lateness(cycles, from, to, n)
	expected := int(int64(n) * int64(o.FailoverFor) / int64(o.FailoverInterval))
	r.Value, r.Baseline = after.worst.Seconds(), before.worst.Seconds()
	r.meet(all.doubles == 0 && all.worst <= 2*time.Second && all.unserved == 0)
	r.Details = map[string]float64{"keys": float64(n), "doubles": float64(all.doubles), "cyclesServed": float64(all.samples),
		"cyclesExpected": float64(expected), "keysUnserved": float64(all.unserved), "p99AfterKill": after.p99.Seconds(), "worst": all.worst.Seconds()}
	r.Notes = fmt.Sprintf("%d keys due every %v for %v (cycles seen until %v later), 2 scheduler + 2 worker processes, scheduler1 SIGKILLed at %v; "+
		"a double is a key's due time (its state's nextDue) served by two cycles: %d; %d due times served (about %d expected), %d keys never served",
		n, o.FailoverInterval, o.FailoverFor, o.FailoverTail, o.FailoverFor/3, all.doubles, all.samples, expected, all.unserved)
	r.Duration = time.Since(t0)
	return r, nil
}
