package queue

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// recordingRunner records the keys whose cycles a worker ran.
type recordingRunner struct {
	mu   sync.Mutex
	keys []watukuytype.Key
	ran  chan struct{}
}

func (r *recordingRunner) RunCycles(ctx context.Context, keys []watukuytype.Key) []watukuytype.CycleReport {
	var reps []watukuytype.CycleReport
	for _, key := range keys {
		r.mu.Lock()
		r.keys = append(r.keys, key)
		r.mu.Unlock()
		r.ran <- struct{}{}
		reps = append(reps, watukuytype.CycleReport{Key: key, Outcome: watukuytype.Ran})
	}
	return reps
}

func keys(n int) []watukuytype.Key {
	ks := make([]watukuytype.Key, n)
	for i := range ks {
		ks[i] = watukuytype.Key{Poller: "p", Partition: fmt.Sprintf("k%02d", i)}
	}
	return ks
}

// pollerP is the pollers hash entry of poller "p", as workers write it: a scheduler without
// a poller filter claims for the pollers it lists.
var pollerP = map[string][]byte{"p": []byte(`{"poller":"p"}`)}

// entries makes registry entries of ks, as workers write them.
func entries(ks []watukuytype.Key) []watukuytype.Key { return ks }

// Two schedulers claim concurrently; every due key is enqueued once, and a key already
// queued is not queued again.
func TestSchedulersEnqueueEachKeyOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "q"})
		if err := st.Register(ctx, pollerP, entries(keys(30))); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		total := 0
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(b.Client), Prefix: "q", Batch: 4, PerTask: 1,
					OnEnqueued: func(n int) { mu.Lock(); total += n; mu.Unlock() }}
				for {
					n, err := s.Once(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if n == 0 {
						return
					}
				}
			}()
		}
		wg.Wait()
		insp := asynq.NewInspectorFromRedisClient(b.Client)
		info, err := insp.GetQueueInfo(DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		if total != 30 || info.Pending != 30 {
			t.Fatalf("enqueued %d, pending %d; want 30 each", total, info.Pending)
		}
		// The same keys due again while their tasks are still queued: not queued twice.
		for _, k := range keys(30) {
			_ = st.SetDue(ctx, k, time.UnixMilli(0))
		}
		s := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(b.Client), Prefix: "q", Batch: 100, PerTask: 1}
		if _, err := s.Once(ctx); err != nil {
			t.Fatal(err)
		}
		if info, _ := insp.GetQueueInfo(DefaultQueue); info.Pending != 30 {
			t.Fatalf("pending %d after a second claim, want 30", info.Pending)
		}
	})
}

// A claim's tasks are enqueued Enqueuing at a time, never more: each enqueue is a round trip
// of its own, and one after another they would bound a scheduler to one task per round trip.
func TestEnqueuerQueuesAClaimsTasksSeveralAtATime(t *testing.T) {
	for _, limit := range []int{1, 4} {
		t.Run(fmt.Sprintf("Enqueuing=%d", limit), func(t *testing.T) {
			b, st, _ := oneKey(t)
			ctx := context.Background()
			if err := st.Register(ctx, pollerP, entries(keys(12))); err != nil {
				t.Fatal(err)
			}
			// The enqueues wait for each other until limit of them are in flight (or a few
			// seconds pass: enqueued one after another, they never are).
			g := &enqueueGate{limit: limit, full: make(chan struct{})}
			var cancel context.CancelFunc
			g.giveUp, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			asynqRdb := redis.NewClient(b.Client.(*redis.Client).Options())
			defer asynqRdb.Close()
			asynqRdb.AddHook(g)
			s := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(asynqRdb), Prefix: "w", Batch: 100, PerTask: 1, Enqueuing: limit}
			n, err := s.Once(ctx)
			if err != nil || n != 12 {
				t.Fatalf("claimed %d keys (%v), want 12", n, err)
			}
			if info, err := asynq.NewInspectorFromRedisClient(b.Client).GetQueueInfo(DefaultQueue); err != nil || info.Pending != 12 {
				t.Fatalf("queue %+v (%v), want 12 tasks pending", info, err)
			}
			if g.most != limit {
				t.Fatalf("at most %d enqueues in flight at once, want %d", g.most, limit)
			}
		})
	}
}

// One claim of 16 keys, each task of one key, whose task IDs meet every case at once: archived
// (replaced), scheduled (run now), active with a live lease (handed back), active orphaned
// (a fresh task), pending (already queued) and none (new). Each key ends queued and confirmed,
// or handed back, never both nor neither; OnEnqueued counts the new ones.
func TestEnqueuingSeveralAtATimeMeetsEveryKindOfTaskID(t *testing.T) {
	for _, limit := range []int{1, 8, 32} {
		t.Run(fmt.Sprintf("Enqueuing=%d", limit), func(t *testing.T) {
			b := redistest.Real(t)
			ctx := context.Background()
			st, err := redisstore.New(b.Client, redisstore.Options{Prefix: "z"})
			if err != nil {
				t.Fatal(err)
			}
			ks := keys(16)
			if err := st.Register(ctx, pollerP, entries(ks)); err != nil {
				t.Fatal(err)
			}
			insp := asynq.NewInspectorFromRedisClient(b.Client)
			client := asynq.NewClientFromRedisClient(b.Client)
			enq := func(k watukuytype.Key, opts ...asynq.Option) {
				t.Helper()
				opts = append([]asynq.Option{asynq.TaskID(TaskID("z", k)), asynq.Queue(DefaultQueue)}, opts...)
				if _, err := client.Enqueue(asynq.NewTask(TaskType, []byte(k.String())), opts...); err != nil {
					t.Fatal(err)
				}
			}
			// k06, k07 (lease live) and k08 (orphan) run in a blocked worker.
			started := blockingWorker(t, b, 3)
			for _, i := range []int{6, 7, 8} {
				enq(ks[i])
			}
			for range 3 {
				select {
				case <-started:
				case <-time.After(10 * time.Second):
					t.Fatal("the worker took fewer than 3 tasks")
				}
			}
			for _, i := range []int{6, 7} {
				if _, err := st.Begin(ctx, ks[i], "w", time.Minute, core.BeginForDelete); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range []int{0, 1, 2, 3} {
				enq(ks[i])
				if err := insp.ArchiveTask(DefaultQueue, TaskID("z", ks[i])); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range []int{4, 5} {
				enq(ks[i], asynq.ProcessIn(time.Hour))
			}
			for _, i := range []int{9, 10, 11} {
				enq(ks[i])
			}
			// Every key due now again (the Begins above moved none, but be explicit).
			for _, k := range ks {
				b.Client.ZAdd(ctx, st.DueKey("p"), redis.Z{Score: 1, Member: k.String()})
			}
			var mu sync.Mutex
			counted := 0
			s := &Enqueuer{Store: st, Client: client, Inspector: insp, Prefix: "z", Batch: 100, PerTask: 1, Enqueuing: limit,
				ClaimTimeout: time.Hour, OnEnqueued: func(n int) { mu.Lock(); counted += n; mu.Unlock() }}
			n, err := s.Once(ctx)
			if err != nil || n != 16 {
				t.Fatalf("claimed %d, %v", n, err)
			}
			if counted != 11 {
				t.Errorf("OnEnqueued counted %d, want 11 (4 replaced, 2 run now, 1 orphan replaced, 4 new)", counted)
			}
			srvNow, _ := b.Client.Time(ctx).Result()
			for i, k := range ks {
				d := time.UnixMilli(int64(b.Client.ZScore(ctx, st.DueKey("p"), k.String()).Val())).Sub(srvNow)
				handedBack := i == 6 || i == 7
				switch {
				case handedBack && d > RequeueAfter:
					t.Errorf("%s (its task running under a live lease): due in %s, want handed back (%s)", k, d, RequeueAfter)
				case !handedBack && d < 50*time.Minute:
					t.Errorf("%s: due in %s, want the confirmed claim (1h)", k, d)
				}
			}
			pending, err := insp.ListPendingTasks(DefaultQueue, asynq.PageSize(100))
			if err != nil {
				t.Fatal(err)
			}
			per := map[string]int{}
			for _, ti := range pending {
				per[string(ti.Payload)]++
			}
			for i, k := range ks {
				want := 1
				if i == 6 || i == 7 {
					want = 0
				}
				if per[k.String()] != want {
					t.Errorf("%s: %d pending tasks, want %d", k, per[k.String()], want)
				}
			}
			var orphan bool
			for _, ti := range pending {
				orphan = orphan || strings.HasPrefix(ti.ID, TaskID("z", ks[8])+"~")
			}
			if !orphan {
				t.Errorf("no fresh task for the orphaned key")
			}
		})
	}
}

// A claim whose enqueues all fail, eight at a time (asynq's Redis refuses writes: out of
// memory): every key is handed back, none is confirmed, and the errors name every task.
func TestEnqueueFailuresHandEveryKeyBack(t *testing.T) {
	b := redistest.Real(t)
	ctx := context.Background()
	st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "f"})
	ks := keys(40)
	if err := st.Register(ctx, pollerP, entries(ks)); err != nil {
		t.Fatal(err)
	}
	down := redistest.Real(t)
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: strings.TrimPrefix(down.URL, "unix://"), MaxRetries: -1})
	defer rdb.Close()
	_ = down.Client.Do(ctx, "CONFIG", "SET", "maxmemory", "1").Err()
	_ = down.Client.Do(ctx, "CONFIG", "SET", "maxmemory-policy", "noeviction").Err()
	// Fill so writes are refused: OOM.
	_ = down.Client.Set(ctx, "fill", strings.Repeat("x", 1<<16), 0).Err()
	client := asynq.NewClientFromRedisClient(rdb)
	s := &Enqueuer{Store: st, Client: client, Prefix: "f", PerTask: 10, Enqueuing: 8, ClaimTimeout: time.Hour}
	n, err := s.Once(ctx)
	if n != 40 || err == nil {
		t.Fatalf("claimed %d, %v; want 40 and an error", n, err)
	}
	if c := strings.Count(err.Error(), "enqueue ["); c != 8 {
		t.Errorf("%d enqueue errors, want 8 (one per task of 5 keys): %v", c, err)
	}
	srvNow, _ := b.Client.Time(ctx).Result()
	for _, k := range ks {
		if d := time.UnixMilli(int64(b.Client.ZScore(ctx, st.DueKey("p"), k.String()).Val())).Sub(srvNow); d > RequeueAfter {
			t.Errorf("%s due in %s, want handed back", k, d)
		}
	}
}

// blockingWorker starts an asynq worker of the given concurrency on the default queue whose
// tasks each say on the returned channel that they started, then run until the test ends.
func blockingWorker(t *testing.T, b redistest.Backend, concurrency int) <-chan struct{} {
	t.Helper()
	started, release := make(chan struct{}, concurrency), make(chan struct{})
	srv := asynq.NewServerFromRedisClient(b.Client, ServerConfig(concurrency, time.Second, "", zerolog.Nop()))
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		started <- struct{}{}
		<-release
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	t.Cleanup(func() { close(release) }) // first: the tasks end, then the worker
	return started
}

// enqueueGate is a go-redis hook holding each script call (asynq's enqueue) until limit of them are in flight (or
// giveUp ends), and counting the most in flight at once.
type enqueueGate struct {
	limit    int
	giveUp   context.Context
	full     chan struct{}
	mu       sync.Mutex
	in, most int
}

func (g *enqueueGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *enqueueGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *enqueueGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "evalsha" && n != "eval" { // asynq's scripts only, not a connection's setup
			return next(ctx, cmd)
		}
		g.mu.Lock()
		g.in++
		g.most = max(g.most, g.in)
		if g.in == g.limit {
			select {
			case <-g.full:
			default:
				close(g.full)
			}
		}
		g.mu.Unlock()
		select {
		case <-g.full:
		case <-g.giveUp.Done():
		}
		defer func() { g.mu.Lock(); g.in--; g.mu.Unlock() }()
		return next(ctx, cmd)
	}
}

// The worker's handler runs the cycle of every key a task carries; a trigger wakes a
// sleeping scheduler at once.
func TestWorkerRunsTasksAndTriggerWakesScheduler(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "w"})
		run := &recordingRunner{ran: make(chan struct{}, 100)}
		srv := asynq.NewServerFromRedisClient(b.Client, ServerConfig(4, time.Second, "", zerolog.Nop()))
		if err := srv.Start(Handler(run, zerolog.Nop())); err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown()
		ks := keys(16)
		if err := st.Register(ctx, pollerP, entries(ks)); err != nil {
			t.Fatal(err)
		}
		sch := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(b.Client), Redis: b.Client, Prefix: "w",
			Batch: 16, PerTask: 2, Idle: time.Hour}
		go sch.Run(ctx)
		for range ks {
			<-run.ran
		}
		// The scheduler now sleeps for an hour; a trigger must wake it.
		for _, k := range ks {
			_ = st.SetDue(ctx, k, time.Now().Add(time.Hour))
		}
		if err := st.Trigger(ctx, ks[3]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-run.ran:
		case <-time.After(30 * time.Second):
			t.Fatal("the trigger did not wake the scheduler")
		}
		run.mu.Lock()
		defer run.mu.Unlock()
		if last := run.keys[len(run.keys)-1]; last != ks[3] {
			t.Fatalf("ran %v after the trigger, want %v", last, ks[3])
		}
	})
}

// A key whose task asynq archived (its worker died mid-cycle and the recoverer gave up) is
// queued again at its next claim instead of conflicting with the dead task's ID for good.
func TestArchivedTaskIsReplaced(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "a"})
		k := keys(1)
		if err := st.Register(ctx, pollerP, entries(k)); err != nil {
			t.Fatal(err)
		}
		insp := asynq.NewInspectorFromRedisClient(b.Client)
		s := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(b.Client), Inspector: insp, Prefix: "a", PerTask: 1}
		if _, err := s.Once(ctx); err != nil {
			t.Fatal(err)
		}
		id := TaskID("a", k[0])
		if err := insp.ArchiveTask(DefaultQueue, id); err != nil {
			t.Fatal(err)
		}
		_ = st.SetDue(ctx, k[0], time.UnixMilli(0))
		if _, err := s.Once(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := insp.GetTaskInfo(DefaultQueue, id)
		if err != nil || info.State != asynq.TaskStatePending {
			t.Fatalf("after the claim the key's task is %v (%v), want pending", info, err)
		}
	})
}

// A key whose task waits in asynq (the retry asynq gives a dead worker's task, with a backoff
// of a minute or more; here a scheduled one) is run at the key's next claim: the waiting
// task's ID would block the key until then.
func TestWaitingTaskRunsAtClaim(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "a"})
		k := keys(1)
		if err := st.Register(ctx, pollerP, entries(k)); err != nil {
			t.Fatal(err)
		}
		insp := asynq.NewInspectorFromRedisClient(b.Client)
		client := asynq.NewClientFromRedisClient(b.Client)
		id := TaskID("a", k[0])
		if _, err := client.Enqueue(asynq.NewTask(TaskType, []byte(k[0].String())), asynq.TaskID(id), asynq.Queue(DefaultQueue), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
		s := &Enqueuer{Store: st, Client: client, Inspector: insp, Prefix: "a", PerTask: 1}
		if _, err := s.Once(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := insp.GetTaskInfo(DefaultQueue, id)
		if err != nil || info.State != asynq.TaskStatePending {
			t.Fatalf("after the claim the key's waiting task is %v (%v), want pending", info.State, err)
		}
	})
}

// The scheduler runs the due-set repair sweep at start and then every RepairEvery: a key
// that lost its due entry is given one again.
func TestSchedulerRunsRepair(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "r"})
		ks := keys(3)
		// The entry lists the keys, as workers write it (the repair sweep reads listed keys).
		listing := map[string][]byte{"p": []byte(`{"poller":"p","partitions":["k00","k01","k02"]}`)}
		if err := st.Register(ctx, listing, entries(ks)); err != nil {
			t.Fatal(err)
		}
		lose := func(k watukuytype.Key) {
			t.Helper()
			if err := b.Client.ZRem(ctx, st.DueKey(k.Poller), k.String()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		lose(ks[1])
		sweeps := make(chan []watukuytype.Key)
		sch := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(b.Client), Prefix: "r", Idle: time.Hour,
			RepairEvery: 10 * time.Millisecond, Repair: func(ctx context.Context) ([]watukuytype.Key, error) {
				repaired, err := st.RepairDue(ctx)
				select {
				case sweeps <- repaired:
				case <-ctx.Done():
				}
				return repaired, err
			}}
		go sch.Run(ctx)
		select {
		case got := <-sweeps:
			if !slices.Equal(got, ks[1:2]) {
				t.Fatalf("the sweep at start repaired %v, want %v", got, ks[1])
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no sweep at start")
		}
		lose(ks[2])
		deadline := time.After(30 * time.Second)
		for {
			select {
			case got := <-sweeps:
				if slices.Equal(got, ks[2:3]) {
					return
				}
			case <-deadline:
				t.Fatalf("no later sweep repaired %v", ks[2])
			}
		}
	})
}

// A key whose claim meets its own task still running (the task runs its keys one after
// another; the key's cycle may have ended and made it due again) is handed back to be claimed
// again shortly, not held for the claim timeout.
func TestRunningTaskHandsTheClaimBack(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "a"})
		k := keys(1)
		if err := st.Register(ctx, pollerP, entries(k)); err != nil {
			t.Fatal(err)
		}
		insp := asynq.NewInspectorFromRedisClient(b.Client)
		client := asynq.NewClientFromRedisClient(b.Client)
		id := TaskID("a", k[0])
		started := blockingWorker(t, b, 1)
		if _, err := client.Enqueue(asynq.NewTask(TaskType, []byte(k[0].String())), asynq.TaskID(id), asynq.Queue(DefaultQueue)); err != nil {
			t.Fatal(err)
		}
		<-started
		// The running task's cycle holds the key's lease (so the task is no orphan), and the
		// key is due again.
		if _, err := st.Begin(ctx, k[0], "w", 30*time.Second, core.BeginForDelete); err != nil {
			t.Fatal(err)
		}
		if err := st.SetDue(ctx, k[0], time.UnixMilli(0)); err != nil {
			t.Fatal(err)
		}
		s := &Enqueuer{Store: st, Client: client, Inspector: insp, Prefix: "a", PerTask: 1}
		if n, err := s.Once(ctx); err != nil || n != 1 {
			t.Fatalf("claim: %d, %v", n, err)
		}
		_, due, err := st.NextDue(ctx, []string{"p"})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Until(due); d > RequeueAfter+time.Second {
			t.Fatalf("the key is due in %v after meeting its running task, want about %v (not the claim timeout)", d, RequeueAfter)
		}
	})
}

// The claim handed back to a key whose own task still runs is timed on the Redis server's
// clock, as the due set is: a scheduler 5 minutes ahead of the server hands the key back for
// RequeueAfter, not 5 minutes more.
func TestRunningTaskHandsTheClaimBackOnTheServerClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		skew := 5 * time.Minute
		server := func() time.Time { return time.Now().Add(-skew) } // Redis's clock, behind the scheduler's
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "a", Clock: server})
		k := keys(1)
		if err := st.Register(ctx, pollerP, entries(k)); err != nil {
			t.Fatal(err)
		}
		insp := asynq.NewInspectorFromRedisClient(b.Client)
		client := asynq.NewClientFromRedisClient(b.Client)
		id := TaskID("a", k[0])
		started := blockingWorker(t, b, 1)
		if _, err := client.Enqueue(asynq.NewTask(TaskType, []byte(k[0].String())), asynq.TaskID(id), asynq.Queue(DefaultQueue)); err != nil {
			t.Fatal(err)
		}
		<-started
		if _, err := st.Begin(ctx, k[0], "w", 30*time.Second, core.BeginForDelete); err != nil {
			t.Fatal(err)
		}
		if err := st.SetDue(ctx, k[0], time.UnixMilli(0)); err != nil {
			t.Fatal(err)
		}
		s := &Enqueuer{Store: st, Client: client, Inspector: insp, Prefix: "a", PerTask: 1}
		if n, err := s.Once(ctx); err != nil || n != 1 {
			t.Fatalf("claim: %d, %v", n, err)
		}
		_, due, err := st.NextDue(ctx, []string{"p"})
		if err != nil {
			t.Fatal(err)
		}
		if d := due.Sub(server()); d > RequeueAfter+time.Second {
			t.Fatalf("the key is due in %v by the server's clock after meeting its running task, want about %v", d, RequeueAfter)
		}
	})
}

// A claimed key whose task could not be enqueued (asynq's Redis refused it) is handed back:
// due again after RequeueAfter, not after the whole claim timeout.
func TestFailedEnqueueHandsTheClaimBack(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "f"})
		k := keys(3)
		if err := st.Register(ctx, pollerP, entries(k)); err != nil {
			t.Fatal(err)
		}
		down := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: down.Addr(), MaxRetries: -1})
		defer rdb.Close()
		client := asynq.NewClientFromRedisClient(rdb)
		down.Close()
		s := &Enqueuer{Store: st, Client: client, Prefix: "f", PerTask: 1, ClaimTimeout: time.Hour}
		if n, err := s.Once(ctx); n != 3 || err == nil || !strings.Contains(err.Error(), "enqueue") {
			t.Fatalf("claim with asynq's Redis down: %d, %v; want 3 claimed and an enqueue error", n, err)
		}
		srvNow, err := b.Client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range k {
			at := b.Client.ZScore(ctx, st.DueKey("p"), key.String()).Val()
			if d := time.UnixMilli(int64(at)).Sub(srvNow); d > RequeueAfter {
				t.Errorf("%s due in %s, want at most %s (not the claim timeout)", key, d, RequeueAfter)
			}
		}
	})
}

// dueIn is how long until key's due score by the server's clock.
func dueIn(t *testing.T, b redistest.Backend, st *redisstore.Store, key watukuytype.Key) time.Duration {
	t.Helper()
	ctx := context.Background()
	now, err := b.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	score, err := b.Client.ZScore(ctx, st.DueKey(key.Poller), key.String()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(int64(score)).Sub(now)
}

// hungAsynqClient is an asynq client whose Redis accepts connections and never answers: a
// scheduler's enqueue through it hangs until its context ends (a scheduler that dies in its
// enqueue, SIGKILLed or frozen, sends nothing after it).
func hungAsynqClient(t *testing.T) *asynq.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	hung := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = hung.Close() })
	return asynq.NewClientFromRedisClient(hung)
}

// A claim holds its keys for the short window until their tasks are enqueued, then is
// confirmed for the claim timeout (the lease TTL plus the grace). A scheduler that dies
// between its claim and its enqueue (here: the enqueue hangs until the scheduler's context
// ends, and nothing after it reaches Redis) leaves its keys out for the window only, not for the
// claim timeout (32 s by default).
func TestClaimWindowUntilTheEnqueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		st, _ := redisstore.New(b.Client, redisstore.Options{Prefix: "w"})
		k := keys(3)
		if err := st.Register(ctx, pollerP, entries(k)); err != nil {
			t.Fatal(err)
		}
		dying := &Enqueuer{Store: st, Client: hungAsynqClient(t), Prefix: "w", PerTask: 1}
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if n, err := dying.Once(dctx); n != 3 || err == nil {
			t.Fatalf("a scheduler dying in its enqueue: %d claimed, %v", n, err)
		}
		for _, key := range k {
			if d := dueIn(t, b, st, key); d > DefaultClaimWindow {
				t.Errorf("%s claimed by a scheduler that died before its enqueue: due in %s, want at most the window %s", key, d, DefaultClaimWindow)
			}
		}
		// The window over, a live scheduler claims, enqueues and confirms: held for the
		// lease TTL plus the grace.
		for _, key := range k {
			b.Client.ZAdd(ctx, st.DueKey("p"), redis.Z{Score: 1, Member: key.String()})
		}
		live := &Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(b.Client), Prefix: "w", PerTask: 1}
		if n, err := live.Once(ctx); n != 3 || err != nil {
			t.Fatalf("a live scheduler: %d claimed, %v", n, err)
		}
		for _, key := range k {
			if d := dueIn(t, b, st, key); d < 25*time.Second {
				t.Errorf("%s enqueued: claim confirmed for %s, want the lease TTL plus the grace (32s)", key, d)
			}
		}
		// A confirmation keeps the due time a key's cycle wrote before it (its task ran
		// between the enqueue and the confirmation; pushed on, the key was served 22 s late in
		// the bench's two-scheduler run).
		for _, key := range k {
			b.Client.ZAdd(ctx, st.DueKey("p"), redis.Z{Score: 1, Member: key.String()})
		}
		c, err := st.ClaimForEnqueue(ctx, 10, DefaultClaimWindow, []string{"p"})
		if err != nil || len(c.Keys) != 3 {
			t.Fatalf("claim: %v, %v", c, err)
		}
		srvNow, err := b.Client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SetDue(ctx, k[1], srvNow.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := st.ConfirmClaims(ctx, c, k, 0); err != nil {
			t.Fatal(err)
		}
		if d := dueIn(t, b, st, k[1]); d > 5*time.Second {
			t.Errorf("the due time a cycle wrote before the confirmation: due in %s, want at most 5s", d)
		}
		if d := dueIn(t, b, st, k[2]); d < 25*time.Second {
			t.Errorf("a claim confirmed: due in %s, want the lease TTL plus the grace", d)
		}
		// A confirmation keeps a key a trigger made due meanwhile.
		if err := st.Trigger(ctx, k[0]); err != nil {
			t.Fatal(err)
		}
		if err := st.ConfirmClaims(ctx, c, k[:1], 0); err != nil {
			t.Fatal(err)
		}
		if d := dueIn(t, b, st, k[0]); d > 0 {
			t.Errorf("a triggered key confirmed: due in %s, want now", d)
		}
	})
}

// pausedConfirm is a Claimer whose ConfirmClaims waits for release: the scheduler is
// frozen (GC pause, SIGSTOP, a batch whose enqueues take longer than the window) between its
// enqueue and its confirmation.
type pausedConfirm struct {
	*redisstore.Store
	reached chan struct{}
	release chan struct{}
}

func (p *pausedConfirm) ConfirmClaims(ctx context.Context, c core.Claim, keys []watukuytype.Key, claimTimeout time.Duration) error {
	close(p.reached)
	<-p.release
	return p.Store.ConfirmClaims(ctx, c, keys, claimTimeout)
}

// A late confirmation leaves another scheduler's newer claim alone: A is frozen between its
// enqueue and its confirmation while k's task runs and B claims k and dies in its enqueue; A's
// confirmation holds only the score its own claim wrote, so k is due within the window.
func TestLateConfirmLeavesAnotherSchedulersClaim(t *testing.T) {
	b, st, k := oneKey(t)
	ctx := context.Background()
	gate := &pausedConfirm{Store: st, reached: make(chan struct{}), release: make(chan struct{})}
	a := &Enqueuer{Store: gate, Client: asynq.NewClientFromRedisClient(b.Client), Prefix: "w", PerTask: 1}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if n, err := a.Once(ctx); n != 1 || err != nil {
			t.Errorf("scheduler A: %d claimed, %v", n, err)
		}
	}()
	<-gate.reached
	// A's task ran k (asynq keeps no completed task: Retention(0)).
	if err := asynq.NewInspectorFromRedisClient(b.Client).DeleteTask(DefaultQueue, TaskID("w", k[0])); err != nil {
		t.Fatal(err)
	}
	if err := st.Trigger(ctx, k[0]); err != nil {
		t.Fatal(err)
	}
	dying := &Enqueuer{Store: st, Client: hungAsynqClient(t), Prefix: "w", PerTask: 1}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := dying.Once(dctx); n != 1 || err == nil {
		t.Fatalf("scheduler B dying in its enqueue: %d claimed, %v", n, err)
	}
	if d := dueIn(t, b, st, k[0]); d > DefaultClaimWindow {
		t.Fatalf("B's claim: due in %s, want at most the window", d)
	}
	close(gate.release)
	wg.Wait()
	if d := dueIn(t, b, st, k[0]); d > DefaultClaimWindow {
		t.Errorf("k claimed by B, which died before its enqueue, then A's late confirmation: due in %s, want at most the window %s (no task of k is queued)", d, DefaultClaimWindow)
	}
}

// The same through the client's re-send of confirm_claims.lua (its first reply lost): a claim
// another scheduler made in between, and died before enqueueing, keeps its window.
func TestResentConfirmLeavesANewerClaim(t *testing.T) {
	b, st, k := oneKey(t)
	ctx := context.Background()
	ca, err := st.ClaimForEnqueue(ctx, 10, DefaultClaimWindow, []string{"p"})
	if err != nil || len(ca.Keys) != 1 {
		t.Fatalf("A's claim: %v, %v", ca, err)
	}
	if err := st.ConfirmClaims(ctx, ca, k, 0); err != nil { // applied; its reply is lost
		t.Fatal(err)
	}
	if err := st.Trigger(ctx, k[0]); err != nil {
		t.Fatal(err)
	}
	if cb, err := st.ClaimForEnqueue(ctx, 10, DefaultClaimWindow, []string{"p"}); err != nil || len(cb.Keys) != 1 {
		t.Fatalf("B's claim: %v, %v", cb, err)
	}
	// B dies before its enqueue.
	if err := st.ConfirmClaims(ctx, ca, k, 0); err != nil { // the re-send
		t.Fatal(err)
	}
	if d := dueIn(t, b, st, k[0]); d > DefaultClaimWindow {
		t.Errorf("B's claim after A's re-sent confirmation: due in %s, want at most the window %s", d, DefaultClaimWindow)
	}
}

// A ClaimWindow under a millisecond is rounded up to one, not sent as 0 (claim_due.lua's "no
// fixed claim", the lease TTL plus the grace): a scheduler that dies before its enqueue leaves
// its keys out about that long.
func TestSubMillisecondClaimWindowStaysShort(t *testing.T) {
	b, st, k := oneKey(t)
	ctx := context.Background()
	dying := &Enqueuer{Store: st, Client: hungAsynqClient(t), Prefix: "w", PerTask: 1, ClaimWindow: 500 * time.Microsecond}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := dying.Once(dctx); n != 1 || err == nil {
		t.Fatalf("a scheduler dying in its enqueue: %d claimed, %v", n, err)
	}
	if d := dueIn(t, b, st, k[0]); d > time.Second {
		t.Errorf("ClaimWindow 500µs, scheduler dead before its enqueue: due in %s, want at most a second", d)
	}
}

// oneKey is a store (prefix "w") on a private redis-server with one key of poller p
// registered.
func oneKey(t *testing.T) (redistest.Backend, *redisstore.Store, []watukuytype.Key) {
	t.Helper()
	b := redistest.Real(t)
	st, err := redisstore.New(b.Client, redisstore.Options{Prefix: "w"})
	if err != nil {
		t.Fatal(err)
	}
	k := keys(1)
	if err := st.Register(context.Background(), pollerP, entries(k)); err != nil {
		t.Fatal(err)
	}
	return b, st, k
}

// A task of several keys is named for the whole set: another set behind the same first key
// and of the same size gets another ID (it passed for the first one's, and its keys waited out
// their claim), the same set the same ID, and one key its own TaskID.
func TestChunkTaskIDNamesTheWholeSet(t *testing.T) {
	k := keys(4)
	id := func(ks ...watukuytype.Key) string {
		ms := make([]string, len(ks))
		for i, x := range ks {
			ms[i] = x.String()
		}
		return chunkTaskID("q", ks, strings.Join(ms, "\n"))
	}
	if got := id(k[0]); got != TaskID("q", k[0]) {
		t.Errorf("one key: %s, want %s", got, TaskID("q", k[0]))
	}
	if a, b := id(k[0], k[1], k[2]), id(k[0], k[1], k[3]); a == b {
		t.Errorf("two sets behind %s share the ID %s", k[0], a)
	}
	if a, b := id(k[0], k[1]), id(k[0], k[1]); a != b {
		t.Errorf("one set, two IDs: %s, %s", a, b)
	}
}
