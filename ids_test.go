package watukuy

// G2: an event's id names one change. Content that comes back, history passed again and writes
// Redis lost get new ids, and a consumer that dedupes by id ends where the API is.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Without a version (fingerprint ids), content that comes back (closed, open, closed) and an
// identity deleted and created again get new ids, and a consumer that dedupes by id ends in the
// API's state.
func TestG2ContentThatComesBackGetsNewIDs(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		p := e.poller(stateOnly(e))
		eng := e.engine(p, nil)
		for _, s := range []string{"closed", "open", "closed", "open", "closed"} {
			e.api.Put("o1", map[string]any{"state": s})
			e.settle(eng)
		}
		e.api.Delete("o1")
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "closed"}) // created again, same content
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "open"})
		e.settle(eng)
		evs := e.rec.events()
		seen := map[string]int{}
		applied := map[string]string{} // a consumer that dedupes by id
		for i, ev := range evs {
			if j, dup := seen[ev.ID]; dup {
				t.Errorf("event %d (%s %s) repeats the id of event %d (%s %s)", i, ev.Type, ev.Item, j, evs[j].Type, evs[j].Item)
				continue
			}
			seen[ev.ID] = i
			if ev.Type == watukuytype.Deleted {
				delete(applied, ev.Identity)
				continue
			}
			var it struct {
				State string `json:"state"`
			}
			_ = json.Unmarshal(ev.Item, &it)
			applied[ev.Identity] = it.State
		}
		if len(evs) != 8 {
			t.Fatalf("%d events, want 8 (created, 4 updates, deleted, created, updated)", len(evs))
		}
		if applied["o1"] != "open" {
			t.Fatalf("a consumer that dedupes by id ends with o1 %q, the API has \"open\"", applied["o1"])
		}
	})
}

// A change log's history passed again (a backfill, reset-cursor): a backfill skips entries
// whose versions order before the row's; otherwise each comes out as a new change with a new
// id, and a consumer that dedupes by id ends at the API's state.
func TestG2HistoryPassedAgain(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, opaque := range []bool{false, true} {
			for _, how := range []string{"backfill", "reset-cursor"} {
				name := fmt.Sprintf("%s-opaque-%v", how, opaque)
				e := newEnv(t, b)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name, p.Fetch = name, log.fetch
					p.History = true // a change log: a backfill places its entries by version
					if opaque {
						p.Version = func(item json.RawMessage) (string, error) {
							sum := sha256.Sum256(item)
							return fmt.Sprintf("%x", sum[:8]), nil
						}
					}
				}), nil)
				for v, s := range []string{"new", "paid", "shipped"} {
					log.add("o1", v+1, s)
					e.settle(eng)
				}
				first := len(e.rec.events())
				if how == "backfill" {
					if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
						t.Fatal(err)
					}
				} else if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, "", false); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				evs := e.rec.events()
				again := len(evs) - first
				want := 3
				if how == "backfill" && !opaque {
					want = 0 // a backfill skips entries older than the rows
				}
				switch got, repeats := dedupingConsumer(evs); {
				case again != want || len(repeats) != 0:
					t.Errorf("%s: %d events passed again, %d with an earlier id; want %d new ones", name, again, len(repeats), want)
				case got["o1"] != "shipped":
					t.Errorf("G2 (%s): a consumer that dedupes by id holds o1 %q, the API %q", name, got["o1"], "shipped")
				}
			}
		}
	})
}

// snapshotRedis DUMPs every key; the returned func puts Redis back to exactly that (FLUSHALL,
// RESTORE), as a restart from an AOF whose last second was not on disk would.
func snapshotRedis(t *testing.T, b redistest.Backend) (restore func()) {
	t.Helper()
	ctx := context.Background()
	keys, err := b.Client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	dumps := map[string]string{}
	for _, k := range keys {
		d, err := b.Client.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		dumps[k] = d
	}
	return func() {
		t.Helper()
		if err := b.Client.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for k, d := range dumps {
			if err := b.Client.Restore(ctx, k, 0, d).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Writes an AOF crash loses (appendfsync everysec) come back with new ids, as the README says:
// the API's current state is a new change. No id names two changes, and a consumer that dedupes
// by id ends where the API is.
func TestG2WritesLostByAnAOFCrashComeBackWithNewIDs(t *testing.T) {
	b := redistest.Real(t)
	e := newEnv(t, b)
	eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = e.api.ChangeFeed(1) }), nil)
	e.api.Put("o1", map[string]any{"n": 1})
	e.settle(eng)
	restore := snapshotRedis(t, b) // what reached the disk
	e.api.Put("o1", map[string]any{"n": 2})
	e.api.Put("y", nil)
	var once sync.Once
	e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
		if req.Page == 1 {
			once.Do(func() { e.api.Put("o1", map[string]any{"n": 3}) }) // o1 changes while paged
		}
		return nil
	})
	e.clock.Advance(3 * time.Minute)
	rep := e.tick(eng) // o1 v2, y, o1 v3: committed and delivered within milliseconds
	e.api.OnFetch(nil)
	t.Logf("cycle before the crash: %+v", rep)
	restore() // the crash: the last second of writes is gone
	e.settle(eng)
	named := map[string]string{} // id → the change it names
	last := map[string]string{}  // what a consumer that dedupes by id holds
	for _, ev := range e.rec.events() {
		change := string(ev.Type) + " " + ev.Identity + "@v" + ev.Version
		if prev, seen := named[ev.ID]; seen {
			if prev != change {
				t.Errorf("G2: %s names %s and %s", ev.ID, prev, change)
			}
			continue
		}
		named[ev.ID] = change
		last[ev.Identity] = ev.Version
	}
	for id, v := range e.api.Final() {
		if last[id] != strconv.Itoa(v) {
			t.Errorf("G2: a consumer that dedupes by id holds %s v%s, the API v%d", id, last[id], v)
		}
	}
}
