package bench

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// ClaimRate measures the scheduler's claim + enqueue rate: o.DueKeys keys all due, claimed
// and enqueued by one queue.Scheduler (its defaults: batches of 100, 10 keys per task) until
// none is left, no worker running; next to raw asynq enqueues of o.DueKeys tasks with task IDs,
// one by one, on the same server.
func ClaimRate(ctx context.Context, o Options) (Result, error) {
	n := o.DueKeys
	r, t0 := start("claim-rate")
	r.Unit, r.BaselineOf = "keys/s", "raw asynq enqueues/s, same run"
	e, st, err := openStore(ctx, o, "claim")
	if err != nil {
		return r, err
	}
	defer e.close()
	eng, err := newEngine(st, "bench", noopPoller(n, 0), watukuytype.Hooks{})
	if err != nil {
		return r, err
	}
	if err := eng.Setup(ctx); err != nil { // every key due now
		return r, fmt.Errorf("register %d keys: %w", n, err)
	}
	client := asynq.NewClientFromRedisClient(e.rdb)
	raw, err := rawEnqueue(ctx, client, e.queue+"-raw", n)
	if err != nil {
		return r, err
	}
	sch := &queue.Enqueuer{Store: st, Client: client, Prefix: e.prefix, Queue: e.queue, Pollers: []string{pollerName}}
	t := time.Now()
	// A claim holds a key for its lease TTL + grace (32 s): a pass slower than that meets the
	// first keys due again, so the loop stops at n claimed, not at an empty claim.
	claimed := 0
	for claimed < n {
		got, err := sch.Once(ctx)
		if err != nil {
			return r, fmt.Errorf("claim after %d keys: %w", claimed, err)
		}
		if got == 0 {
			return r, fmt.Errorf("claimed %d of %d due keys", claimed, n)
		}
		claimed += got
	}
	took := time.Since(t)
	// The claim script alone, the same keys due again: how much of the time is the claim.
	if err := makeAllDue(ctx, e.rdb, st, partitions(n)); err != nil {
		return r, err
	}
	t, claims := time.Now(), 0
	for got := 0; got < n; claims++ {
		keys, err := st.ClaimDue(ctx, 100, 0, []string{pollerName})
		if err != nil {
			return r, fmt.Errorf("claim only: %w", err)
		}
		if len(keys) == 0 {
			return r, fmt.Errorf("claim only: %d of %d due keys", got, n)
		}
		got += len(keys)
	}
	claimOnly := time.Since(t)
	r.Value = float64(n) / took.Seconds()
	r.Baseline = raw
	r.Details = map[string]float64{"keys": float64(n), "claimSeconds": took.Seconds(), "claimOnlyKeysPerSecond": float64(n) / claimOnly.Seconds(),
		"claimScriptMsPerCall": claimOnly.Seconds() * 1000 / float64(max(1, claims))}
	r.Notes = fmt.Sprintf("%d due keys claimed (claim_due.lua, 100 a claim) and enqueued (10 keys a task) by one scheduler in %.1fs, no worker running; "+
		"the claims alone (no enqueue) took %.1fs, %.1f ms a claim of 100", n, took.Seconds(), claimOnly.Seconds(), claimOnly.Seconds()*1000/float64(max(1, claims)))
	r.Duration = time.Since(t0)
	return r, nil
}

// rawEnqueue enqueues n no-op tasks with task IDs one by one on queue and returns tasks/s.
func rawEnqueue(ctx context.Context, client *asynq.Client, q string, n int) (float64, error) {
	t := time.Now()
	for i := range n {
		task := asynq.NewTask("raw", nil, asynq.TaskID(fmt.Sprintf("raw:%d", i)), asynq.Queue(q), asynq.MaxRetry(0), asynq.Retention(0))
		if _, err := client.EnqueueContext(ctx, task); err != nil {
			return 0, fmt.Errorf("raw asynq enqueue %d on %s: %w", i, q, err)
		}
	}
	return float64(n) / time.Since(t).Seconds(), nil
}

// NoopCycles measures no-op cycles per second through the scheduler, asynq and a worker in
// one process (o.NoopKeys keys whose fetch returns an empty page, all made due at once, three
// rounds; perTask keys per task), next to raw asynq no-op tasks with task IDs enqueued one by
// one and processed by a server of the same concurrency, in the same run.
func NoopCycles(ctx context.Context, o Options, perTask int) (Result, error) {
	n := o.NoopKeys
	r, t0 := start(fmt.Sprintf("noop-%dperTask", perTask))
	r.Unit, r.BaselineOf = "cycles/s", "raw asynq no-op tasks/s, same run"
	r.Goal = ">= 0.8x raw asynq"
	e, err := newEnv(ctx, o, "noop", false)
	if err != nil {
		return r, err
	}
	defer e.close()
	rawRedis0, rawGo0 := redisCPU(ctx, e.rdb), cpuSeconds(os.Getpid())
	rawTook, rawWaits, err := rawAsynq(ctx, e.rdb, e.queue+"-raw", n, o.Concurrency)
	if err != nil {
		return r, err
	}
	rawTasks := float64(3 * n) // rawAsynq runs three rounds
	raw := rawTasks / rawTook.Seconds()
	rawRedisUs, rawGoUs := (redisCPU(ctx, e.rdb)-rawRedis0)*1e6/rawTasks, (cpuSeconds(os.Getpid())-rawGo0)*1e6/rawTasks
	st, err := e.store()
	if err != nil {
		return r, err
	}
	rig, err := startNoopRig(ctx, o, perTask, e.queue, st, e.rdb, st, e.rdb)
	if err != nil {
		return r, err
	}
	defer rig.stop()
	const rounds = 3
	var busy, idleBusy, waits time.Duration
	redis0, go0 := redisCPU(ctx, e.rdb), cpuSeconds(os.Getpid())
	var idleRedis0, idleGo0 float64
	for round := range rounds {
		if round == 1 { // from here on every cycle is an idle key's
			idleRedis0, idleGo0 = redisCPU(ctx, e.rdb), cpuSeconds(os.Getpid())
		}
		if round > 0 {
			if err := makeAllDue(ctx, e.rdb, st, rig.poller.Partitions); err != nil {
				return r, err
			}
		}
		t := time.Now()
		wait, err := rig.round(ctx)
		if err != nil {
			return r, fmt.Errorf("round %d: %w", round, err)
		}
		busy += time.Since(t)
		waits += wait
		if round > 0 {
			idleBusy += time.Since(t)
		}
	}
	cycles, idle := float64(rounds*n), float64((rounds-1)*n)
	redisNow, goNow := redisCPU(ctx, e.rdb), cpuSeconds(os.Getpid())
	redisUs, goUs := (redisNow-redis0)*1e6/cycles, (goNow-go0)*1e6/cycles
	r.Value = cycles / busy.Seconds()
	r.Baseline = raw
	r.meet(r.Value >= 0.8*raw)
	// Each round starts with asynq's processor asleep on an empty queue (up to
	// TaskCheckInterval x 1.5): "active" counts from each round's first cycle (task) on, and
	// the CPU ratio is what a cycle costs the two cores next to a raw task, waits aside.
	active := cycles / (busy - waits).Seconds()
	rawActive := rawTasks / (rawTook - rawWaits).Seconds()
	r.Details = map[string]float64{"keys": float64(n), "rounds": rounds, "concurrency": float64(o.Concurrency), "perTask": float64(perTask),
		"redisCpuUs/cycle": redisUs, "processCpuUs/cycle": goUs, "wallUs/cycle": float64(busy.Microseconds()) / cycles,
		"raw:redisCpuUs/task": rawRedisUs, "raw:processCpuUs/task": rawGoUs,
		"idle:cycles/s": idle / idleBusy.Seconds(), "idle:redisCpuUs/cycle": (redisNow - idleRedis0) * 1e6 / idle,
		"idle:processCpuUs/cycle": (goNow - idleGo0) * 1e6 / idle,
		"startWaitMs/round":       waits.Seconds() * 1000 / rounds, "raw:startWaitMs/round": rawWaits.Seconds() * 1000 / rounds,
		"active:cycles/s": active, "raw:active:tasks/s": rawActive, "activeRatio": active / rawActive,
		"cpuRatio": (rawRedisUs + rawGoUs) / (redisUs + goUs)}
	r.Notes = fmt.Sprintf("%d keys x %d rounds, all due at once, scheduler (batches of 200, %d keys a task) + asynq server (concurrency %d) in one process; "+
		"the first round includes each key's first cycle", n, rounds, perTask, o.Concurrency)
	r.Duration = time.Since(t0)
	return r, nil
}

// noopRig is the no-op pipeline in one process: o.NoopKeys keys of a poller whose fetch
// returns an empty page, registered; an asynq server of o.Concurrency on workerRdb running
// their cycles with an engine on engStore; a scheduler on schedStore and schedRdb putting
// perTask keys in a task.
type noopRig struct {
	poller watukuytype.Poller
	sch    *queue.Enqueuer
	srv    *asynq.Server
	clock  *roundClock // the cycles that ran
}

func startNoopRig(ctx context.Context, o Options, perTask int, q string, engStore *redisstore.Store, workerRdb redis.UniversalClient,
	schedStore *redisstore.Store, schedRdb redis.UniversalClient) (*noopRig, error) {
	g := &noopRig{poller: noopPoller(o.NoopKeys, 0), clock: newRoundClock(o.NoopKeys)}
	eng, err := newEngine(engStore, "bench", g.poller, watukuytype.Hooks{OnCycle: func(rep watukuytype.CycleReport, _ time.Duration) {
		if rep.Outcome == watukuytype.Ran {
			g.clock.ran()
		}
	}})
	if err != nil {
		return nil, err
	}
	if err := eng.Setup(ctx); err != nil {
		return nil, fmt.Errorf("register %d keys: %w", o.NoopKeys, err)
	}
	g.srv = asynq.NewServerFromRedisClient(workerRdb, queue.ServerConfig(o.Concurrency, time.Second, q, zerolog.Nop()))
	if err := g.srv.Start(queue.Handler(eng, zerolog.Nop())); err != nil {
		return nil, fmt.Errorf("asynq server: %w", err)
	}
	g.sch = &queue.Enqueuer{Store: schedStore, Client: asynq.NewClientFromRedisClient(schedRdb), Prefix: schedStore.Prefix(), Queue: q,
		Pollers: []string{pollerName}, Batch: 200, PerTask: perTask}
	return g, nil
}

// round claims and enqueues every due key, then waits until n more cycles ran. It returns how
// long after its start the round's first cycle ended.
func (g *noopRig) round(ctx context.Context) (time.Duration, error) {
	t := time.Now()
	for {
		got, err := g.sch.Once(ctx)
		if err != nil {
			return 0, err
		}
		if got == 0 {
			break
		}
	}
	return g.clock.wait(ctx, t, "cycles")
}

func (g *noopRig) stop() { g.srv.Shutdown() }

// makeAllDue makes every key due at once (untimed): nextDue 0 and score 0.
func makeAllDue(ctx context.Context, rdb redis.UniversalClient, st *redisstore.Store, parts []string) error {
	for i := 0; i < len(parts); i += 5000 {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, part := range parts[i:min(i+5000, len(parts))] {
				k := watukuytype.Key{Poller: pollerName, Partition: part}
				p.HSet(ctx, st.Key(k, "state"), statehash.NextDue, "0")
				p.ZAdd(ctx, st.DueKey(k.Poller), redis.Z{Score: 0, Member: k.String()})
			}
			return nil
		}); err != nil {
			return fmt.Errorf("make keys due: %w", err)
		}
	}
	return nil
}

// rawAsynq measures asynq alone: n no-op tasks with task IDs, enqueued one by one on q and
// processed by a server of the given concurrency, three rounds. It returns how long they took
// and, of that, the rounds' waits before their first task ran.
func rawAsynq(ctx context.Context, rdb redis.UniversalClient, q string, n, concurrency int) (took, waits time.Duration, err error) {
	clock := newRoundClock(n)
	srv := asynq.NewServerFromRedisClient(rdb, queue.ServerConfig(concurrency, time.Second, q, zerolog.Nop()))
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		clock.ran()
		return nil
	})); err != nil {
		return 0, 0, fmt.Errorf("raw asynq server: %w", err)
	}
	defer srv.Shutdown()
	client := asynq.NewClientFromRedisClient(rdb)
	start := time.Now()
	const rounds = 3
	for round := range rounds {
		t := time.Now()
		for i := range n {
			task := asynq.NewTask("raw", nil, asynq.TaskID(fmt.Sprintf("raw:%d:%d", round, i)), asynq.Queue(q), asynq.MaxRetry(0), asynq.Retention(0))
			if _, err := client.EnqueueContext(ctx, task); err != nil {
				return 0, 0, fmt.Errorf("raw asynq enqueue on %s: %w", q, err)
			}
		}
		wait, err := clock.wait(ctx, t, "tasks")
		if err != nil {
			return 0, 0, fmt.Errorf("raw asynq: %w", err)
		}
		waits += wait
	}
	return time.Since(start), waits, nil
}

// roundClock counts the runs (cycles or tasks) of rounds of n each and times when each
// round's first one ended.
type roundClock struct {
	n     int64
	done  atomic.Int64
	first atomic.Int64  // unix ns: the end of the current round's first run
	all   chan struct{} // every n-th run
}

func newRoundClock(n int) *roundClock { return &roundClock{n: int64(n), all: make(chan struct{}, 1)} }

// ran counts one run.
func (c *roundClock) ran() {
	d := c.done.Add(1)
	if (d-1)%c.n == 0 {
		c.first.Store(time.Now().UnixNano())
	}
	if d%c.n == 0 {
		c.all <- struct{}{}
	}
}

// wait waits for the end of the round that started at t and returns how long after t its
// first run ended: the time its first task waited for asynq's processor.
func (c *roundClock) wait(ctx context.Context, t time.Time, what string) (time.Duration, error) {
	select {
	case <-c.all:
		return time.Unix(0, c.first.Load()).Sub(t), nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("%d of %d %s ran", c.done.Load()%c.n, c.n, what)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
