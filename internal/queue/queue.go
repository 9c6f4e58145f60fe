// Package queue runs cycles across processes on asynq: an Enqueuer claims due keys from the
// pollers' due sets (the atomic claim script) and enqueues one task per key, whose task ID is
// derived from the key so a key is never queued twice, and runs the due-set repair sweep;
// workers are asynq servers whose Handler runs the key's cycle. The public pool.Scheduler
// and pool.Worker are built on it.
package queue

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/outage"
	"github.com/watukuy/watukuy/watukuytype"
)

// TaskType is the asynq task type of a cycle.
const TaskType = "watukuy:cycle"

// DefaultQueue is the asynq queue cycles go to.
const DefaultQueue = "watukuy"

// TaskID is the asynq task ID of key's cycle: one queued or running cycle per key at most.
func TaskID(prefix string, key watukuytype.Key) string { return prefix + ":cycle:" + key.String() }

// Claimer is the part of the store the scheduler needs.
type Claimer interface {
	// ClaimForEnqueue atomically takes up to limit due keys of pollers (every registered
	// poller's when none), earliest due first, and holds them for window, marked for
	// ConfirmClaims.
	ClaimForEnqueue(ctx context.Context, limit int, window time.Duration, pollers []string) (core.Claim, error)
	// ConfirmClaims holds on to keys of claim c whose tasks are enqueued, for claimTimeout
	// (0: each key's lease TTL plus core.ClaimGrace), while their due time is still c's.
	ConfirmClaims(ctx context.Context, c core.Claim, keys []watukuytype.Key, claimTimeout time.Duration) error
	// DueIn returns how long until the earliest key of pollers is due by the server's clock
	// (0: now), and false when they have no keys.
	DueIn(ctx context.Context, pollers []string) (time.Duration, bool, error)
	// LeaseLive reports whether some instance holds the key's lease right now.
	LeaseLive(ctx context.Context, key watukuytype.Key) (bool, error)
	// HandBack makes a claimed key due again after d by the server's clock, unless it is due
	// now.
	HandBack(ctx context.Context, key watukuytype.Key, d time.Duration) error
	WakeChannel() string
}

// DefaultClaimWindow is Enqueuer.ClaimWindow's default: an enqueue takes milliseconds, and a
// window that lapses first costs at most a second task for the same keys, which the lease
// fences (its Begin finds the key leased or not due).
const DefaultClaimWindow = time.Second

// RequeueAfter is how soon keys whose new task met a running one of the same ID, or could not
// be enqueued, are claimed again.
const RequeueAfter = 500 * time.Millisecond

// Enqueuer moves due keys into asynq tasks. Several schedulers may run at once: the claim
// is atomic, and task IDs are per key.
type Enqueuer struct {
	Store  Claimer
	Client *asynq.Client
	// Inspector, when set, lets a claim replace a key's task that asynq archived (its worker
	// died mid-cycle): without it the task ID would block the key for good.
	Inspector *asynq.Inspector
	// Redis receives the wake-up messages of trigger and resume (pub/sub).
	Redis redis.UniversalClient
	// Prefix names the deployment in task IDs (the store's key prefix).
	Prefix string
	// Queue is the asynq queue; default DefaultQueue.
	Queue string
	// Pollers limits the claim to these pollers; none claims every key.
	Pollers []string
	// PollerNames, when set, replaces Pollers and is read at every claim (a config reload
	// changes the list); an empty list claims nothing.
	PollerNames func() []string
	// Batch is how many keys one claim takes; default 100.
	Batch int
	// PerTask is the most claimed keys one task carries (run one after another by a worker);
	// default 10. Tasks carry fewer when few keys are due, so that a claim still spreads over
	// at least 8 tasks: batching saves asynq operations in bursts without serializing the
	// cycles of a quiet system. 1 gives every key its own task.
	PerTask int
	// ClaimTimeout, when set, is how long a claim holds a key once its task is enqueued,
	// before its cycle's lease keeper holds it on; default (0) the key's lease TTL plus
	// core.ClaimGrace, so a key whose cycle died is claimed again as soon as its lease lapses.
	ClaimTimeout time.Duration
	// ClaimWindow is how long a claim holds its keys until their tasks are enqueued and the
	// claim confirmed (ConfirmClaims); default DefaultClaimWindow, rounded to whole
	// milliseconds (at least one). A scheduler killed between its claim and its enqueue leaves
	// the keys out for this long, not for ClaimTimeout.
	ClaimWindow time.Duration
	// Idle is the longest sleep when nothing is due; default 1s. The scheduler sleeps only
	// until the earliest key is due when that comes sooner, and a wake-up message cuts the
	// sleep short.
	Idle time.Duration
	// Enqueuing is how many of a claim's tasks are enqueued at once; default 8.
	Enqueuing int
	// TaskTimeout bounds one cycle in the worker; default 30m.
	TaskTimeout time.Duration
	Logger      zerolog.Logger
	// OnEnqueued, when set, counts enqueued cycles (metrics).
	OnEnqueued func(n int)
	// Repair, when set, is the due-set repair sweep (the engine's RepairDue, which logs and
	// counts each key it repairs): a registered key without a due entry is never claimed
	// again, so the scheduler runs it at start and every RepairEvery.
	Repair func(ctx context.Context) ([]watukuytype.Key, error)
	// RepairEvery is the period of Repair; default 1m.
	RepairEvery time.Duration
	// RetryMin and RetryMax bound the wait after a failed claim or enqueue (exponential
	// with jitter, see backoff.go); default DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// Outage, when set, is the process's outage tracker: failures because Redis is
	// unreachable are logged once per outage, by it.
	Outage *outage.Tracker

	retry backoff
}

// Run claims and enqueues until ctx ends.
func (s *Enqueuer) Run(ctx context.Context) error {
	s.defaults()
	wake := make(chan struct{}, 1)
	if s.Redis != nil {
		sub := s.Redis.Subscribe(ctx, s.Store.WakeChannel())
		defer sub.Close()
		go func() {
			for range sub.Channel() {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
	}
	if s.Repair != nil {
		go s.repairLoop(ctx)
	}
	var wait time.Duration
	for ctx.Err() == nil {
		n, err := s.Once(ctx)
		if err == nil || ctx.Err() == nil {
			// A claim that went through ends an outage even as the scheduler stops; a failure
			// of a stopping scheduler's claim is no outage.
			wait = s.settle(err) // Idle, or the backoff after a failure
		}
		if ctx.Err() != nil {
			break
		}
		if n == s.Batch && err == nil {
			continue // more may be due right away
		}
		if err == nil {
			wait = s.untilDue(ctx, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// untilDue shortens an idle wait to the time until the earliest key is due, so keys are
// claimed when due rather than up to Idle later (a key due every minute would otherwise run
// up to a second late, and often). A failed read keeps the wait.
func (s *Enqueuer) untilDue(ctx context.Context, wait time.Duration) time.Duration {
	pollers := s.pollers()
	if s.PollerNames != nil && len(pollers) == 0 {
		return wait
	}
	d, ok, err := s.Store.DueIn(ctx, pollers)
	if err != nil || !ok {
		return wait
	}
	// A floor keeps a key that is due but not claimable (a clock step between the claim and
	// this read) from spinning the loop.
	return min(wait, max(d, minWait))
}

// minWait is the shortest sleep between claims that came back short.
const minWait = 2 * time.Millisecond

// pollers is the list of pollers to claim for: PollerNames' when set, else Pollers.
func (s *Enqueuer) pollers() []string {
	if s.PollerNames != nil {
		return s.PollerNames()
	}
	return s.Pollers
}

func (s *Enqueuer) defaults() {
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	if s.Batch <= 0 {
		s.Batch = 100
	}
	if s.PerTask <= 0 {
		s.PerTask = 10
	}
	if s.Enqueuing <= 0 {
		s.Enqueuing = 8
	}
	if s.Idle <= 0 {
		s.Idle = time.Second
	}
	if s.ClaimWindow <= 0 {
		s.ClaimWindow = DefaultClaimWindow
	}
	// Claims count whole milliseconds: a shorter window would be none.
	s.ClaimWindow = s.ClaimWindow.Round(time.Millisecond)
	s.ClaimWindow = max(s.ClaimWindow, time.Millisecond)
	if s.TaskTimeout <= 0 {
		s.TaskTimeout = 30 * time.Minute
	}
	if s.RepairEvery <= 0 {
		s.RepairEvery = time.Minute
	}
	if s.RetryMin <= 0 {
		s.RetryMin = DefaultRetryMin
	}
	if s.RetryMax < s.RetryMin {
		s.RetryMax = max(DefaultRetryMax, s.RetryMin)
	}
	s.retry.min, s.retry.max = s.RetryMin, s.RetryMax
}

// repairLoop runs the repair sweep now and then every RepairEvery until ctx ends, apart from
// the claims, so a long sweep never delays them.
func (s *Enqueuer) repairLoop(ctx context.Context) {
	t := time.NewTicker(s.RepairEvery)
	defer t.Stop()
	for {
		if _, err := s.Repair(ctx); err != nil && ctx.Err() == nil {
			if outage.Unreachable(err) && s.Outage != nil {
				s.Outage.Fail("repair sweep", err)
			} else {
				s.Logger.Error().Err(err).Msg("scheduler: due-set repair sweep failed")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once claims one batch of due keys and enqueues their cycles; it returns how many keys it
// claimed.
func (s *Enqueuer) Once(ctx context.Context) (int, error) {
	s.defaults()
	pollers := s.pollers()
	if s.PollerNames != nil && len(pollers) == 0 {
		return 0, nil // never every key: that is what an empty Pollers means
	}
	c, err := s.Store.ClaimForEnqueue(ctx, s.Batch, s.ClaimWindow, pollers)
	if err != nil {
		return 0, fmt.Errorf("scheduler: claim: %w", err)
	}
	claimed := len(c.Keys)
	chunks := slices.Collect(slices.Chunk(c.Keys, max(1, min(s.PerTask, claimed/8))))
	// A task's enqueue is a round trip of its own (asynq enqueues one task a call): a claim's
	// tasks go Enqueuing at a time, so the claim's keys are queued in a few round trips' time,
	// not one after another.
	outs := make([]enqueued, len(chunks))
	var g errgroup.Group
	g.SetLimit(s.Enqueuing)
	for i, chunk := range chunks {
		g.Go(func() error {
			outs[i] = s.enqueue(ctx, chunk)
			return nil
		})
	}
	_ = g.Wait() // each outcome holds its errors

	var queued []watukuytype.Key // keys a task of which is enqueued: their claims are confirmed
	var errs []error
	n := 0
	for i, o := range outs {
		if o.new {
			n += len(chunks[i])
		}
		if o.queued {
			queued = append(queued, chunks[i]...)
		}
		errs = append(errs, o.errs...)
	}
	// Unconfirmed, the claims lapse after the window and the keys are claimed again: a second
	// task for keys already queued, which the lease fences.
	if err := s.Store.ConfirmClaims(ctx, c, queued, s.ClaimTimeout); err != nil {
		errs = append(errs, err)
	}
	if s.OnEnqueued != nil && n > 0 {
		s.OnEnqueued(n)
	}
	return claimed, errors.Join(errs...)
}

// enqueued is what became of one task of claimed keys: enqueued anew (new), queued (a task
// of them is, new or not: their claims are confirmed), and the errors met.
type enqueued struct {
	new, queued bool
	errs        []error
}

// enqueue queues the task of chunk, claimed keys.
func (s *Enqueuer) enqueue(ctx context.Context, chunk []watukuytype.Key) enqueued {
	n := len(chunk)
	members := make([]string, n)
	for i, k := range chunk {
		members[i] = k.String()
	}
	// One key: its ID is the key's, so a key is never queued twice. Several: the claim
	// already made them exclusive, and a duplicate that slips past a claim timeout is
	// fenced by the lease. Their ID names the whole set, so a conflict means these very
	// keys are queued: named by the first key and the count alone, a task of other keys
	// behind the same first key passed for theirs, and they waited out their claim
	// (the likely cause of cycles 15–37 s late in a watukuy bench lateness run).
	payload := strings.Join(members, "\n")
	id := chunkTaskID(s.Prefix, chunk, payload)
	// Retries only matter for tasks orphaned by a dead worker: asynq's recoverer requeues
	// them (a cycle itself never fails its task).
	task := asynq.NewTask(TaskType, []byte(payload), asynq.TaskID(id), asynq.Queue(s.Queue),
		asynq.MaxRetry(5), asynq.Timeout(s.TaskTimeout), asynq.Retention(0))
	_, err := s.Client.EnqueueContext(ctx, task)
	if conflict(err) {
		switch deleted, ran := s.unblock(id); {
		case deleted:
			_, err = s.Client.EnqueueContext(ctx, task)
		case ran:
			err = nil
		}
	}
	if conflict(err) && n == 1 && s.orphaned(ctx, chunk[0], id) {
		// The task is "active" but no one holds the key's lease: its worker died
		// mid-cycle. asynq recovers such tasks only a minute or two later, so the key
		// gets a fresh task now; if the orphan runs later, its cycle is fenced or skipped.
		task = asynq.NewTask(TaskType, task.Payload(), asynq.TaskID(id+"~"+strconv.FormatInt(time.Now().UnixNano(), 36)),
			asynq.Queue(s.Queue), asynq.MaxRetry(5), asynq.Timeout(s.TaskTimeout), asynq.Retention(0))
		_, err = s.Client.EnqueueContext(ctx, task)
	}
	switch {
	case err == nil:
		return enqueued{new: true, queued: true}
	case conflict(err) && s.active(id):
		// Running: a task runs its keys one after another, and a cycle writes its due
		// time before its task completes, so these keys may have ended their cycles and
		// become due again while the task runs the others (budget waits make that long).
		// The claim is handed back shortly; held on, it would keep them out for the whole
		// claim timeout. A cycle still running writes its own due time when it ends.
		return enqueued{errs: s.handBack(ctx, chunk)}
	case conflict(err):
		return enqueued{queued: true} // already queued: it runs these keys
	default:
		// Held on, the claim would keep them out for the whole claim timeout (32 s by
		// default) though asynq may answer the next enqueue; unreachable Redis fails the
		// hand-back too, and the claim timeout brings them back.
		return enqueued{errs: append([]error{fmt.Errorf("enqueue %v: %w", members, err)}, s.handBack(ctx, chunk)...)}
	}
}

// chunkTaskID is the task ID of the claimed keys whose members joined make payload: the key's
// own for one key, the first key's with the count and a hash of the whole set for several.
func chunkTaskID(prefix string, keys []watukuytype.Key, payload string) string {
	id := TaskID(prefix, keys[0])
	if len(keys) > 1 {
		h := fnv.New64a()
		h.Write([]byte(payload))
		id += fmt.Sprintf("+%d~%016x", len(keys)-1, h.Sum64())
	}
	return id
}

// handBack makes claimed keys that got no task due again after RequeueAfter. It stops at the
// first failure: the rest would fail alike (Redis unreachable) and their claims lapse anyway.
func (s *Enqueuer) handBack(ctx context.Context, keys []watukuytype.Key) []error {
	for i, k := range keys {
		if err := s.Store.HandBack(ctx, k, RequeueAfter); err != nil {
			return []error{fmt.Errorf("hand back the claim of %s (%d keys left claimed): %w", k.Describe(), len(keys)-i, err)}
		}
	}
	return nil
}

func conflict(err error) bool {
	return errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask)
}

// unblock deals with the task whose ID blocks the key's new task: one that can never run
// again (archived after its workers died, or kept completed) is deleted, so the key can be
// queued anew (deleted); one waiting for a retry or its schedule (asynq gave back the task
// of a worker that died, with a backoff of a minute or more) is run now, which queues the
// key (ran).
func (s *Enqueuer) unblock(id string) (deleted, ran bool) {
	if s.Inspector == nil {
		return false, false
	}
	info, err := s.Inspector.GetTaskInfo(s.Queue, id)
	if err != nil {
		return false, false
	}
	switch info.State {
	case asynq.TaskStateArchived, asynq.TaskStateCompleted:
		if err := s.Inspector.DeleteTask(s.Queue, id); err != nil {
			s.Logger.Warn().Err(err).Str("task", id).Msg("scheduler: could not delete a dead task")
			return false, false
		}
		s.Logger.Warn().Str("task", id).Str("state", info.State.String()).Msg("scheduler: replaced a task whose worker died")
		return true, false
	case asynq.TaskStateRetry, asynq.TaskStateScheduled:
		if err := s.Inspector.RunTask(s.Queue, id); err != nil {
			s.Logger.Warn().Err(err).Str("task", id).Msg("scheduler: could not run a waiting task now")
			return false, false
		}
		s.Logger.Info().Str("task", id).Str("state", info.State.String()).Msg("scheduler: ran a waiting task of a claimed key now")
		return false, true
	}
	return false, false
}

// active reports whether the task of ID id is running.
func (s *Enqueuer) active(id string) bool {
	if s.Inspector == nil {
		return false
	}
	info, err := s.Inspector.GetTaskInfo(s.Queue, id)
	return err == nil && info.State == asynq.TaskStateActive
}

// orphaned reports whether the key's task is active while nobody holds the key's lease.
func (s *Enqueuer) orphaned(ctx context.Context, key watukuytype.Key, id string) bool {
	if s.Inspector == nil {
		return false
	}
	if !s.active(id) {
		return false
	}
	live, err := s.Store.LeaseLive(ctx, key)
	return err == nil && !live
}

// CycleRunner runs the cycles of a task's keys (the engine).
type CycleRunner interface {
	RunCycles(ctx context.Context, keys []watukuytype.Key) []watukuytype.CycleReport
}

// Handler is the worker's asynq handler: it runs the cycles of the task's keys, one after
// another. A cycle never fails the task: its outcome lives in the key's state, and the due
// set brings the key back; keys left when the worker shuts down come back when their claims
// lapse.
func Handler(eng CycleRunner, log zerolog.Logger) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		members := strings.Split(string(t.Payload()), "\n")
		keys := make([]watukuytype.Key, 0, len(members))
		for _, member := range members {
			key, err := watukuytype.ParseKey(member)
			if err != nil {
				log.Error().Err(err).Msg("worker: skipping a malformed task key")
				continue
			}
			keys = append(keys, key)
		}
		eng.RunCycles(ctx, keys)
		return nil
	})
}

// ServerConfig is the asynq configuration of a worker.
func ServerConfig(concurrency int, drain time.Duration, queue string, log zerolog.Logger) asynq.Config {
	if queue == "" {
		queue = DefaultQueue
	}
	return asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{queue: 1},
		ShutdownTimeout:          drain,
		TaskCheckInterval:        50 * time.Millisecond,
		DelayedTaskCheckInterval: time.Second,
		Logger:                   asynqLogger{log},
		LogLevel:                 asynq.WarnLevel,
	}
}

// asynqLogger routes asynq's logs into zerolog.
type asynqLogger struct{ l zerolog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error().Msg(fmt.Sprint(args...)) }
