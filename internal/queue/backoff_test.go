package queue

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/outage"
	"github.com/watukuy/watukuy/internal/redisstore"
)

// The waits grow from min towards max, never leave [min, max], are jittered (not one fixed
// sequence), and start over after a success.
func TestBackoffGrowsWithJitterAndResets(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: 2 * time.Second}
	var first []time.Duration
	reachedMax := false
	for range 200 {
		d := b.next()
		if d < b.min || d > b.max {
			t.Fatalf("wait %s outside [%s, %s]", d, b.min, b.max)
		}
		if len(first) < 20 {
			first = append(first, d)
		}
		reachedMax = reachedMax || d > b.max*3/4
	}
	if !reachedMax {
		t.Error("200 failures in a row never waited near the cap")
	}
	b.reset()
	if d := b.next(); d > 3*b.min {
		t.Errorf("the first wait after a reset is %s, want at most %s", d, 3*b.min)
	}
	b.reset()
	same := true
	for _, d := range first {
		same = same && d == b.next()
	}
	if same {
		t.Error("two runs of failures waited exactly the same: no jitter")
	}
}

// countingClaimer counts claims and can fail them.
type countingClaimer struct {
	Claimer
	claims atomic.Int64
}

func (c *countingClaimer) ClaimForEnqueue(ctx context.Context, limit int, window time.Duration, pollers []string) (core.Claim, error) {
	c.claims.Add(1)
	return c.Claimer.ClaimForEnqueue(ctx, limit, window, pollers)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Redis goes away under a running scheduler: it logs the outage once (not once per claim),
// backs off (a few claims a second, not a busy loop nor one per second), and once Redis is
// back it logs the recovery once and enqueues a due key within its backoff cap.
func TestSchedulerBacksOffAndLogsOncePerOutage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	st, _ := redisstore.New(rdb, redisstore.Options{Prefix: "o"})
	if err := st.Register(ctx, pollerP, entries(keys(1))); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := zerolog.New(&logs)
	cc := &countingClaimer{Claimer: st}
	client := asynq.NewClientFromRedisClient(rdb)
	sch := &Enqueuer{Store: cc, Client: client, Prefix: "o", Idle: 50 * time.Millisecond, Logger: log,
		RetryMin: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond, Outage: outage.New(log, outage.Options{})}
	done := make(chan struct{})
	go func() { defer close(done); _ = sch.Run(ctx) }()
	waitFor(t, "the key enqueued", func() bool { return m.Exists("asynq:{watukuy}:t:" + TaskID("o", keys(1)[0])) })

	m.Close()
	waitFor(t, "the outage noticed", sch.Outage.Down)
	from := cc.claims.Load()
	time.Sleep(1500 * time.Millisecond)
	claims := cc.claims.Load() - from
	// Waits drawn from [20ms, 300ms], mostly near the cap: about 5 to 15 claims in 1.5 s.
	if claims < 3 || claims > 40 {
		t.Errorf("%d claims in 1.5 s of outage, want a backoff between 20ms and 300ms (3..40)", claims)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	m.FlushAll() // nothing due: the enqueue below comes from the key registered now
	if err := st.Register(ctx, pollerP, entries(keys(1))); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitFor(t, "the key enqueued again", func() bool { return m.Exists("asynq:{watukuy}:t:" + TaskID("o", keys(1)[0])) })
	if d := time.Since(back); d > time.Second {
		t.Errorf("enqueued %s after Redis came back, want within the backoff cap (300ms) and a claim", d)
	}
	// The claim is confirmed after its enqueue: the round ends, and the recovery is logged,
	// only then.
	waitFor(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "Redis answers again") })
	cancel()
	<-done
	out := logs.String()
	if n := strings.Count(out, "Redis is unreachable"); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "Redis answers again"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "claim or enqueue failed") {
		t.Errorf("a failure of the outage was logged on its own:\n%s", out)
	}
}

// A failure that is not an outage (a command error) is logged every time, with the backoff.
func TestSchedulerLogsOtherFailures(t *testing.T) {
	var logs syncBuffer
	log := zerolog.New(&logs)
	s := &Enqueuer{Logger: log, Outage: outage.New(log, outage.Options{})}
	s.defaults()
	for range 3 {
		if d := s.settle(errors.New("ERR Error running script (call to f_x): bad")); d < DefaultRetryMin || d > DefaultRetryMax {
			t.Errorf("wait %s outside [%s, %s]", d, DefaultRetryMin, DefaultRetryMax)
		}
	}
	if d := s.settle(nil); d != s.Idle {
		t.Errorf("wait after a success %s, want Idle %s", d, s.Idle)
	}
	if n := strings.Count(logs.String(), "claim or enqueue failed"); n != 3 {
		t.Errorf("logged %d failures, want 3:\n%s", n, logs.String())
	}
	if s.Outage.Down() {
		t.Error("a command error started an outage")
	}
}

// recordingLogger is an asynq.Logger that keeps the lines.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (r *recordingLogger) add(args ...any) {
	r.mu.Lock()
	r.lines = append(r.lines, sprint(args))
	r.mu.Unlock()
}
func (r *recordingLogger) Debug(args ...any) { r.add(args...) }
func (r *recordingLogger) Info(args ...any)  { r.add(args...) }
func (r *recordingLogger) Warn(args ...any)  { r.add(args...) }
func (r *recordingLogger) Error(args ...any) { r.add(args...) }
func (r *recordingLogger) Fatal(args ...any) { r.add(args...) }

// asynq's lines: an unreachable-looking one starts an outage only when a PING confirms it
// (a late one, e.g. a sync retried at shutdown, is logged as it is); during an outage every
// warning and error is dropped; other lines pass.
func TestOutageLogger(t *testing.T) {
	var logs syncBuffer
	tr := outage.New(zerolog.New(&logs), outage.Options{})
	rec := &recordingLogger{}
	pingErr := error(nil)
	l := OutageLogger(rec, tr, func(context.Context) error { return pingErr })
	refused := "Dequeue error: dial tcp 127.0.0.1:6379: connect: connection refused"

	l.Error("Could not remove task id=x err: dial tcp 127.0.0.1:6379: connect: connection refused") // Redis answers the PING
	l.Warn("Retry exhausted for task id=x")
	pingErr = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	l.Error(refused)
	l.Error("Failed to write server state data: i/o timeout")
	l.Warn("recoverer: could not list lease expired tasks: EOF")
	l.Warn("Lease reset failed for x")
	l.Info("info passes")
	tr.OK()
	l.Warn("after the outage")

	want := []string{"Could not remove task id=x err: dial tcp 127.0.0.1:6379: connect: connection refused",
		"Retry exhausted for task id=x", "info passes", "after the outage"}
	if strings.Join(rec.lines, "|") != strings.Join(want, "|") {
		t.Errorf("passed %q, want %q", rec.lines, want)
	}
	if n := strings.Count(logs.String(), "Redis is unreachable"); n != 1 {
		t.Errorf("%d outage lines, want 1:\n%s", n, logs.String())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // a goroutine's progress against Redis: no signal to wait on
	}
}

// dueInClaimer answers DueIn with a fixed reply.
type dueInClaimer struct {
	Claimer
	d   time.Duration
	ok  bool
	err error
}

func (c dueInClaimer) DueIn(context.Context, []string) (time.Duration, bool, error) {
	return c.d, c.ok, c.err
}

// An idle scheduler sleeps until the earliest key is due when that comes before its idle
// period ends, never less than minWait, and keeps the idle period when nothing is due or the
// read fails.
func TestUntilDueShortensTheIdleWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     dueInClaimer
		names func() []string
		want  time.Duration
	}{
		{"due sooner", dueInClaimer{d: 300 * time.Millisecond, ok: true}, nil, 300 * time.Millisecond},
		{"due later", dueInClaimer{d: time.Minute, ok: true}, nil, time.Second},
		{"due now", dueInClaimer{d: 0, ok: true}, nil, minWait},
		{"no keys", dueInClaimer{}, nil, time.Second},
		{"read failed", dueInClaimer{d: time.Millisecond, ok: true, err: errors.New("down")}, nil, time.Second},
		{"no pollers to claim for", dueInClaimer{d: time.Millisecond, ok: true}, func() []string { return nil }, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Enqueuer{Store: tc.c, PollerNames: tc.names}
			if got := s.untilDue(context.Background(), time.Second); got != tc.want {
				t.Errorf("wait %s, want %s", got, tc.want)
			}
		})
	}
}
