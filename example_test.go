package watukuy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
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
	err = eng.Register(watukuy.Poller{
		Name:     "orders",
		Strategy: watukuy.SnapshotDiff,
		Fetch: func(ctx context.Context, req watukuy.FetchRequest) (watukuy.Page, error) {
			return watukuy.Page{Items: items}, nil
		},
		Version: watukuy.Field("updated_at"),
		Handler: func(ctx context.Context, ev watukuy.Event) error {
			fmt.Println(ev.Type, ev.Identity, ev.Version, ev.ID)
			return nil
		},
		Delivery: watukuy.Delivery{Concurrency: 1},
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
	// created A-1 2026-11-29T10:00:00Z ev_576a4a201f839bb345c01a11357c2243
	// created A-2 2026-11-29T10:05:00Z ev_ebbff03aae356ebf45a06614b2772beb
	// ran 1 cycle, 2 events, 2 delivered
}
