package queue

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
)

// The claim handed back to a key whose own task still runs is timed by the scheduler's
// clock (time.Now), while the due set runs on the Redis server's. A scheduler whose clock is
// 5 minutes ahead of the server hands the key back for 5 minutes instead of RequeueAfter.
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
		started, release := make(chan struct{}), make(chan struct{})
		srv := asynq.NewServerFromRedisClient(b.Client, ServerConfig(1, time.Second, "", zerolog.Nop()))
		if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			close(started)
			<-release
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown()
		defer close(release)
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
		s := &Scheduler{Store: st, Client: client, Inspector: insp, Prefix: "a", PerTask: 1}
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
