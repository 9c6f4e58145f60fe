// Command quickstart runs watukuy end to end in one process: an embedded miniredis, an
// in-process fake shop API whose orders and customers change every second, and an engine
// that polls both and prints each event as it is detected.
//
//	go run ./examples/quickstart            # until Ctrl-C
//	go run ./examples/quickstart -for 10s   # then exit
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/fakeapi"
)

func main() {
	runFor := flag.Duration("for", 0, "stop after this long (0: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("start miniredis: %w", err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	orders, customers := fakeapi.New(), fakeapi.New()
	for i := 1; i <= 5; i++ {
		orders.Put(fmt.Sprintf("ord-%03d", i), map[string]any{"status": "open", "total": 10 * i})
		customers.Put(fmt.Sprintf("cus-%03d", i), map[string]any{"name": fmt.Sprintf("Customer %d", i)})
	}

	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}).Level(zerolog.WarnLevel)
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Logger: log})
	if err != nil {
		return err
	}
	show := func(ctx context.Context, ev watukuy.Event) error {
		version := "-"
		if ev.Version != "" {
			version = "v" + ev.Version
		}
		fmt.Printf("%s  %-9s %-8s %-8s %-4s %s\n", ev.ObservedAt.Format(time.TimeOnly), ev.Poller, ev.Type, ev.Identity, version, ev.ID)
		return nil
	}
	every := watukuy.Schedule{Min: time.Second, Max: 4 * time.Second}
	if err := eng.Register(watukuy.Poller{Name: "orders", Fetch: orders.ChangeFeed(50),
		Version: watukuy.Field("version"), Handler: show, Schedule: every}); err != nil {
		return err
	}
	if err := eng.Register(watukuy.Poller{Name: "customers", Strategy: watukuy.SnapshotDiff, Fetch: customers.Listing(50),
		Version: watukuy.Field("version"), Handler: show, Schedule: every}); err != nil {
		return err
	}
	fmt.Println("watukuy quickstart: polling a fake shop on an embedded miniredis; Ctrl-C stops")

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	mutate := time.NewTicker(time.Second)
	defer mutate.Stop()
	n := 5
	for {
		select {
		case <-ctx.Done():
			return eng.Stop(true, 5*time.Second)
		case <-mutate.C:
			n++
			switch rand.IntN(4) {
			case 0:
				orders.Put(fmt.Sprintf("ord-%03d", n), map[string]any{"status": "open", "total": n})
			case 1:
				orders.Put(fmt.Sprintf("ord-%03d", 1+rand.IntN(n-1)), map[string]any{"status": "paid"})
			case 2:
				customers.Put(fmt.Sprintf("cus-%03d", n), map[string]any{"name": fmt.Sprintf("Customer %d", n)})
			default:
				customers.Delete(fmt.Sprintf("cus-%03d", 1+rand.IntN(n-1)))
			}
		case <-tick.C:
			rep, err := eng.Tick(ctx, time.Second)
			if err != nil && ctx.Err() == nil {
				return err
			}
			for _, e := range rep.Errors {
				fmt.Fprintln(os.Stderr, "cycle error:", e)
			}
		}
	}
}
