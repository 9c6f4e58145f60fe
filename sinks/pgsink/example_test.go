package pgsink_test

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/sinks/pgsink"
	"github.com/watukuy/watukuy/watukuytype"
)

// A poller whose events become rows of watukuy.events, a table the sink creates at its first
// connection. New connects nothing, so the worker starts while PostgreSQL is down; the
// engine retries deliveries until it is back.
func Example() {
	s, err := pgsink.New(pgsink.Config{
		URL:    "postgres://watukuy@db.internal:5432/app?sslmode=verify-full",
		Table:  "watukuy.events",
		Create: true,
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	eng, err := watukuy.New(watukuy.Options{Redis: redis.NewClient(&redis.Options{Addr: "redis.internal:6379"})})
	if err != nil {
		panic(err)
	}
	err = eng.Register(watukuytype.Poller{
		Name:     "orders",
		Strategy: watukuytype.SnapshotDiff,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{}, nil // the API's listing
		},
		Version:  watukuytype.Field("updated_at"),
		Handler:  s.Handle, // acked once the row is committed
		Schedule: watukuytype.Schedule{Min: 30 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	// A worker (package pool) runs the cycles; Tick runs the due ones once.
	if _, err := eng.Tick(context.Background(), time.Minute); err != nil {
		panic(err)
	}
}
