// Command quickstart runs watukuy end to end in one process: an embedded miniredis, an
// in-process fake shop API whose orders and customers change every second, and an engine
// that polls both and prints each event as it is detected.
//
//	go run ./examples/quickstart            # until Ctrl-C
//	go run ./examples/quickstart -for 10s   # then exit
//
// It uses only watukuy's public API, so the file can be copied into a module of your own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/mattn/go-isatty"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/watukuytype"
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
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run polls the fake shop and prints every event to out until ctx is done.
func run(ctx context.Context, out io.Writer) error {
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("start miniredis: %w", err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	orders, customers := newCollection(), newCollection()
	for i := 1; i <= 5; i++ {
		orders.put(fmt.Sprintf("ord-%03d", i), map[string]any{"status": "open", "total": 10 * i})
		customers.put(fmt.Sprintf("cus-%03d", i), map[string]any{"name": fmt.Sprintf("Customer %d", i)})
	}

	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly, NoColor: plain(os.Stderr)}).Level(zerolog.WarnLevel)
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Logger: log})
	if err != nil {
		return err
	}
	show := func(ctx context.Context, ev watukuytype.Event) error {
		version := "-"
		if ev.Version != "" {
			version = "v" + ev.Version
		}
		fmt.Fprintf(out, "%s  %-9s %-8s %-8s %-4s %s\n", ev.ObservedAt.Format(time.TimeOnly), ev.Poller, ev.Type, ev.Identity, version, ev.ID)
		return nil
	}
	every := watukuytype.Schedule{Min: time.Second, Max: 4 * time.Second}
	if err := eng.Register(watukuytype.Poller{Name: "orders", Fetch: orders.changeFeed(50),
		Version: watukuytype.Field("version"), Handler: show, Schedule: every}); err != nil {
		return err
	}
	if err := eng.Register(watukuytype.Poller{Name: "customers", Strategy: watukuytype.SnapshotDiff, Fetch: customers.listing(50),
		Version: watukuytype.Field("version"), Handler: show, Schedule: every}); err != nil {
		return err
	}
	fmt.Fprintln(out, "watukuy quickstart: polling a fake shop on an embedded miniredis; Ctrl-C stops")

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
				orders.put(fmt.Sprintf("ord-%03d", n), map[string]any{"status": "open", "total": n})
			case 1:
				orders.put(fmt.Sprintf("ord-%03d", 1+rand.IntN(n-1)), map[string]any{"status": "paid"})
			case 2:
				customers.put(fmt.Sprintf("cus-%03d", n), map[string]any{"name": fmt.Sprintf("Customer %d", n)})
			default:
				customers.remove(fmt.Sprintf("cus-%03d", 1+rand.IntN(n-1)))
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

// collection is the fake API of one kind of item: put creates or updates an item (its
// version goes up by one), remove deletes it. It serves a change feed (the items changed
// after a cursor, for a Custom poller) and a full listing (for a SnapshotDiff poller).
type collection struct {
	mu    sync.Mutex
	seq   int // counts the changes
	items map[string]record
}

type record struct {
	seq, version int // the change that wrote the item last; the item's version
	json         json.RawMessage
}

func newCollection() *collection { return &collection{items: map[string]record{}} }

func (c *collection) put(id string, fields map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	r := record{seq: c.seq, version: c.items[id].version + 1}
	item := maps.Clone(fields)
	item["id"], item["version"] = id, r.version
	r.json, _ = json.Marshal(item) // a map of strings and numbers always marshals
	c.items[id] = r
}

func (c *collection) remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.items, id)
}

// changeFeed serves the items changed after the cursor (a change number), oldest first.
func (c *collection) changeFeed(pageSize int) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		after, err := offset(req.Cursor)
		if err != nil {
			return watukuytype.Page{}, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		recs := slices.SortedFunc(maps.Values(c.items), func(a, b record) int { return a.seq - b.seq })
		page := watukuytype.Page{Next: req.Cursor}
		for _, r := range recs {
			if r.seq <= after {
				continue
			}
			if len(page.Items) == pageSize {
				page.HasMore = true
				break
			}
			page.Items = append(page.Items, r.json)
			page.Next = strconv.Itoa(r.seq)
		}
		return page, nil
	}
}

// listing serves every item ordered by id, pageSize per page; the cursor is the offset.
func (c *collection) listing(pageSize int) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		off, err := offset(req.Cursor)
		if err != nil {
			return watukuytype.Page{}, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		ids := slices.Sorted(maps.Keys(c.items))
		end := min(off+pageSize, len(ids))
		page := watukuytype.Page{Next: strconv.Itoa(end), HasMore: end < len(ids)}
		for _, id := range ids[min(off, len(ids)):end] {
			page.Items = append(page.Items, c.items[id].json)
		}
		return page, nil
	}
}

// offset reads a numeric cursor; "" is the start.
func offset(cursor string) (int, error) {
	if cursor == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(cursor)
	if err != nil {
		return 0, fmt.Errorf("fake shop: bad cursor %q", cursor)
	}
	return n, nil
}

// plain says whether logs to f go without ANSI colours: f is no terminal (a file, a pipe), or
// NO_COLOR is set (no-color.org).
func plain(f *os.File) bool {
	return os.Getenv("NO_COLOR") != "" || !isatty.IsTerminal(f.Fd()) && !isatty.IsCygwinTerminal(f.Fd())
}
