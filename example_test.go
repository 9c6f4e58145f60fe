package watukuy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/watukuytype"
)

// A poller over a listing, run once with Tick: every item is new, so each is delivered as
// created, with an id that is the same on every run.
func ExampleEngine_Tick() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})

	eng, err := watukuy.New(watukuy.Options{Redis: rdb})
	if err != nil {
		panic(err)
	}
	items := []json.RawMessage{
		json.RawMessage(`{"id":"A-1","status":"open","updated_at":"2026-11-29T10:00:00Z"}`),
		json.RawMessage(`{"id":"A-2","status":"paid","updated_at":"2026-11-29T10:05:00Z"}`),
	}
	err = eng.Register(watukuytype.Poller{
		Name:     "orders",
		Strategy: watukuytype.SnapshotDiff,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: items}, nil
		},
		Version: watukuytype.Field("updated_at"),
		Handler: func(ctx context.Context, ev watukuytype.Event) error {
			fmt.Println(ev.Type, ev.Identity, ev.Version, ev.ID)
			return nil
		},
		Delivery: watukuytype.Delivery{Concurrency: 1},
	})
	if err != nil {
		panic(err)
	}
	report, err := eng.Tick(context.Background(), 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("ran %d cycle, %d events, %d delivered\n", report.Ran, report.Events, report.Delivered)
	// Output:
	// created A-1 2026-11-29T10:00:00Z ev_013a41428868f20759575d27fb304f96
	// created A-2 2026-11-29T10:05:00Z ev_bde73eeb62bab68e3024345a621d323e
	// ran 1 cycle, 2 events, 2 delivered
}

// feed is a change feed of fixed items, two a page; the cursor is the index reached.
func feed(items ...string) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		from := 0
		fmt.Sscan(req.Cursor, &from)
		to := min(from+2, len(items))
		page := watukuytype.Page{Next: fmt.Sprint(to), HasMore: to < len(items)}
		for _, it := range items[from:to] {
			page.Items = append(page.Items, json.RawMessage(it))
		}
		return page, nil
	}
}

// exampleEngine is an engine on an embedded miniredis with one poller over feed.
func exampleEngine(p watukuytype.Poller) (*watukuy.Engine, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	eng, err := watukuy.New(watukuy.Options{Redis: redis.NewClient(&redis.Options{Addr: mr.Addr()})})
	if err != nil {
		panic(err)
	}
	p.Fetch = feed(`{"id":"A-1","v":1}`, `{"id":"A-2","v":1}`, `{"id":"A-3","v":1}`)
	p.Version = watukuytype.Field("v")
	p.Handler = func(ctx context.Context, ev watukuytype.Event) error {
		fmt.Println(ev.Lane, ev.Type, ev.Identity, ev.ID)
		return nil
	}
	p.Delivery = watukuytype.Delivery{Concurrency: 1}
	if err := eng.Register(p); err != nil {
		panic(err)
	}
	return eng, mr.Close
}

// A consumer lost its data: with a replay log, the events committed in a window are delivered
// again with their original ids.
func ExampleEngine_Replay() {
	eng, stop := exampleEngine(watukuytype.Poller{Name: "orders", LogRetention: 7 * 24 * time.Hour})
	defer stop()
	ctx := context.Background()
	since := time.Now().Add(-time.Minute)
	if _, err := eng.Tick(ctx, time.Second); err != nil {
		panic(err)
	}
	n, err := eng.Replay(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, since, time.Time{})
	if err != nil {
		panic(err)
	}
	fmt.Println("replayed", n)
	if _, err := eng.Tick(ctx, time.Second); err != nil { // the key is due now
		panic(err)
	}
	// Output:
	// live created A-1 ev_9c46c3dd8d0dc2162024a795e62c74ec
	// live created A-2 ev_dcdd8e9e57ec6561840218fd2d72af30
	// live created A-3 ev_ac1bdc7cacbe33e12e7ace505e63c173
	// replayed 3
	// replay created A-1 ev_9c46c3dd8d0dc2162024a795e62c74ec
	// replay created A-2 ev_dcdd8e9e57ec6561840218fd2d72af30
	// replay created A-3 ev_ac1bdc7cacbe33e12e7ace505e63c173
}

// A forced backfill from the beginning re-emits every known item as updated, in a lane of its
// own and with ids of its own (a plain one emits only what the live lane never saw).
func ExampleEngine_Backfill() {
	eng, stop := exampleEngine(watukuytype.Poller{Name: "orders"})
	defer stop()
	ctx := context.Background()
	if _, err := eng.Tick(ctx, time.Second); err != nil {
		panic(err)
	}
	bp, err := eng.Backfill(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{From: "", Force: true})
	if err != nil {
		panic(err)
	}
	fmt.Printf("backfill %d from %q to %q\n", bp.Generation, bp.From, bp.To)
	if _, err := eng.Tick(ctx, time.Second); err != nil {
		panic(err)
	}
	ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
	if err != nil {
		panic(err)
	}
	fmt.Printf("done %v: %d pages, %d items, %d events\n", ki.Backfill.Done, ki.Backfill.Pages, ki.Backfill.Items, ki.Backfill.Events)
	// Output:
	// live created A-1 ev_9c46c3dd8d0dc2162024a795e62c74ec
	// live created A-2 ev_dcdd8e9e57ec6561840218fd2d72af30
	// live created A-3 ev_ac1bdc7cacbe33e12e7ace505e63c173
	// backfill 1 from "" to "3"
	// backfill updated A-1 ev_e4f1c8858ed0365d61309a82c0096b59
	// backfill updated A-2 ev_ac8829bc34f9a5e527bfe8e1cd03c8bb
	// backfill updated A-3 ev_bc46230758f85300c9edc3679d5faf77
	// done true: 2 pages, 3 items, 3 events
}

// A process of your own, for a program that runs cycles from its own job system instead of
// pool's asynq worker: Setup registers the keys once, WatchData re-registers them if Redis
// loses its data, RunCycle runs the cycle of one key (what a job does), and RepairDue, run
// now and then, gives a due entry back to a key that lost it.
func ExampleEngine_RunCycle() {
	eng, stop := exampleEngine(watukuytype.Poller{Name: "orders"})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := eng.Setup(ctx); err != nil {
		panic(err)
	}
	go eng.WatchData(ctx, watukuy.WatchOptions{})

	key := watukuytype.Key{Poller: "orders"}
	for range 2 { // a job per run of the key
		rep := eng.RunCycle(ctx, key)
		fmt.Printf("cycle: %d events, %d delivered, err %v\n", rep.Events, rep.Delivered, rep.Err)
	}
	repaired, err := eng.RepairDue(ctx)
	fmt.Println("keys without a due entry:", len(repaired), err)
	// Output:
	// live created A-1 ev_9c46c3dd8d0dc2162024a795e62c74ec
	// live created A-2 ev_dcdd8e9e57ec6561840218fd2d72af30
	// live created A-3 ev_ac1bdc7cacbe33e12e7ace505e63c173
	// cycle: 3 events, 3 delivered, err <nil>
	// cycle: 0 events, 0 delivered, err <nil>
	// keys without a due entry: 0 <nil>
}
