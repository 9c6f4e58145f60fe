package watukuy

// A backfill over a change log (G3): it passes history again without taking back what the live
// and reconcile lanes wrote, whatever its window and however it ends.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A backfill that spans cycles (the live lane runs first in each) does not take back a change
// the live lane committed between them: o1 v4, recorded after the backfill's first page, stays
// (the control records v4 once the backfill is done).
func TestG3BackfillSpanningCyclesKeepsALiveChange(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, during := range []bool{false, true} {
			t.Run(fmt.Sprintf("live-change-during-backfill-%v", during), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bf-%v", during)
				log := &changeLog{}
				var started atomic.Bool
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.MaxPagesPerCycle = 2 // the live lane's page and one backfill page
					p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
						pg, err := log.fetch(ctx, req)
						if err == nil && req.Lane == "backfill" && req.Cursor == "" && started.CompareAndSwap(false, true) && during {
							log.add("o1", 4, "delivered") // between the backfill's first and second cycle
						}
						return pg, err
					}
				}), nil)
				for v, s := range []string{"new", "paid", "shipped"} {
					log.add("o1", v+1, s)
					e.settle(eng)
				}
				log.add("x1", 1, "x")
				e.settle(eng)
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				if !started.Load() {
					t.Fatal("the backfill never ran: the test proves nothing")
				}
				if !during {
					log.add("o1", 4, "delivered")
					e.settle(eng)
				}
				var order []string
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" {
						order = append(order, fmt.Sprintf("%s:%s", ev.Lane, stateOf(ev.Item)))
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "delivered" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v", got["o1"], "delivered", order)
				}
			})
		}
	})
}

// A backfill over an explicit window (--to, before the live cursor) does not take back what the
// live lane wrote before it began: o1 stays "shipped" while the window passes "new" and "paid"
// (the control backfills to the default target).
func TestG3BackfillWindowKeepsEarlierLiveChanges(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, window := range []bool{false, true} {
			t.Run(fmt.Sprintf("explicit-to-%v", window), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bfwin-%v", window)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
				}), nil)
				for v, s := range []string{"new", "paid", "shipped"} {
					log.add("o1", v+1, s)
				}
				log.add("x1", 1, "x")
				e.settle(eng)
				req := watukuytype.BackfillRequest{From: ""}
				if window {
					to := "2" // the period of o1's first two changes
					req.To = &to
				}
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, req); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				var order []string
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" {
						order = append(order, fmt.Sprintf("%s:%s", ev.Lane, stateOf(ev.Item)))
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "shipped" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v; backfill done %v", got["o1"], "shipped", order, ki.Backfill != nil && ki.Backfill.Done)
				}
			})
		}
	})
}

// A change the reconcile lane committed ahead of the live cursor ("shipped", listed before the
// live lane read its entry) is not taken back by a backfill to the live cursor (the control has
// the live lane read "shipped" first).
func TestG3BackfillKeepsWhatReconcileReadAheadOfTheLiveCursor(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, viaReconcile := range []bool{false, true} {
			t.Run(fmt.Sprintf("change-seen-first-by-reconcile-%v", viaReconcile), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("recahead-%v", viaReconcile)
				log := &changeLog{}
				var armed atomic.Bool
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
					p.Reconcile = &watukuytype.Reconcile{Every: 6 * time.Hour, Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
						if armed.CompareAndSwap(true, false) {
							log.add("o1", 3, "shipped") // after the live lane's last page
						}
						return log.latest(ctx, req)
					}}
				}), nil)
				log.add("o1", 1, "new")
				log.add("o1", 2, "paid")
				e.settle(eng)
				if viaReconcile {
					armed.Store(true)
				} else {
					log.add("o1", 3, "shipped")
				}
				e.clock.Advance(6 * time.Hour) // reconcile due
				e.tick(eng)
				if armed.Load() {
					t.Fatal("the reconcile listing never ran: the test proves nothing")
				}
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				var order []string
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" {
						order = append(order, fmt.Sprintf("%s:%s", ev.Lane, stateOf(ev.Item)))
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "shipped" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v; backfill done %v", got["o1"], "shipped", order, ki.Backfill != nil && ki.Backfill.Done)
				}
			})
		}
	})
}

// A backfill that stops half-way (its cursor refused by the API, or replaced by another
// Backfill) leaves no identity in the past: the consumer holds o1 "shipped" after the first
// page and at the end (the control lets the backfill complete).
func TestG3BackfillStoppedHalfWayLeavesThePresent(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, how := range []string{"completes", "fails", "restarted-later"} {
			t.Run(how, func(t *testing.T) {
				e := newEnv(t, b)
				name := "bfhalf-" + how
				log := &changeLog{}
				var refuse, hiccup atomic.Bool
				hiccup.Store(true)
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true       // a change log: every change an entry
					p.MaxPagesPerCycle = 2 // the live lane's page and one backfill page
					p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
						if req.Lane == "backfill" && req.Cursor == "2" && refuse.Load() {
							return watukuytype.Page{}, &watukuytype.ConfigError{Poller: name, Field: "cursor", Msg: "cursor 2 refused by the API (expired)"}
						}
						if req.Lane == "backfill" && req.Cursor == "2" && hiccup.CompareAndSwap(true, false) {
							return watukuytype.Page{}, fmt.Errorf("a transient failure: the backfill goes on at the next cycle")
						}
						return log.fetch(ctx, req)
					}
				}), nil)
				for v, s := range []string{"new", "paid", "shipped"} {
					log.add("o1", v+1, s)
				}
				log.add("x1", 1, "x")
				e.settle(eng)
				ctx := t.Context()
				if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(time.Second)
				e.tick(eng) // the backfill's first page (o1 new, paid), then a transient failure
				// Entries whose versions order before the row's are skipped by a backfill, so the
				// first page takes nothing back.
				if got, _ := dedupingConsumer(e.rec.events()); got["o1"] != "shipped" {
					t.Errorf("G3: after the backfill's first page the consumer holds o1 %q, the API %q", got["o1"], "shipped")
				}
				switch how {
				case "fails":
					refuse.Store(true)
				case "restarted-later":
					if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: "3"}); err != nil {
						t.Fatal(err)
					}
				}
				e.settle(eng)
				ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: name, Partition: ""})
				var order []string
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" {
						order = append(order, fmt.Sprintf("%s:%s", ev.Lane, stateOf(ev.Item)))
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "shipped" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v; backfill cursor %q done %v failed %v", got["o1"], "shipped", order, ki.Backfill.Cursor, ki.Backfill.Done, ki.Backfill.Failed)
				}
			})
		}
	})
}

// A backfill entry whose timestamp equals the row's (two changes in one second) is not newer
// than the row: it is skipped, and the one change to "shipped" keeps one id (G2). The control
// stamps "shipped" a second later.
func TestG3BackfillEqualTimestampKeepsTheRow(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name    string
			shipped string // shipped's timestamp
			window  bool
		}{
			{"control-later-second-window", "2026-01-01T10:00:06Z", true},
			{"same-second-window", "2026-01-01T10:00:05Z", true},
			{"same-second-default-target", "2026-01-01T10:00:05Z", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "bfeq-" + tc.name
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
				}), nil)
				log.addRaw(`{"id":"o1","version":"2026-01-01T10:00:00Z","state":"new"}`)
				log.addRaw(`{"id":"o1","version":"2026-01-01T10:00:05Z","state":"paid"}`)
				log.addRaw(fmt.Sprintf(`{"id":"o1","version":%q,"state":"shipped"}`, tc.shipped))
				log.addRaw(`{"id":"x1","version":"2026-01-01T10:00:07Z","state":"x"}`)
				e.settle(eng)
				req := watukuytype.BackfillRequest{From: ""}
				if tc.window {
					to := "2"
					req.To = &to
				}
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, req); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				var order []string
				shippedIDs := map[string]bool{}
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" {
						order = append(order, fmt.Sprintf("%s:%s", ev.Lane, stateOf(ev.Item)))
						if stateOf(ev.Item) == "shipped" {
							shippedIDs[ev.ID] = true
						}
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "shipped" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v; backfill done %v", got["o1"], "shipped", order, ki.Backfill != nil && ki.Backfill.Done)
				}
				if len(shippedIDs) != 1 {
					t.Errorf("G2: o1's one change to shipped was delivered under %d ids; o1's deliveries: %v", len(shippedIDs), order)
				}
			})
		}
	})
}

// A deletion entry without a version (x1 deleted, then created again at v3) passed by a
// backfill does not delete x1's current life, a delete the API never made (G6); the control's
// entry carries its version.
func TestG6BackfillVersionlessDeletionEntrySparesTheCurrentLife(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, del := range []string{`{"id":"x1","deleted":true,"version":"2"}`, `{"id":"x1","deleted":true}`} {
			versioned := del != `{"id":"x1","deleted":true}`
			t.Run(fmt.Sprintf("deletion-entry-versioned-%v", versioned), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bfdel-%v", versioned)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
					p.Tombstone = watukuytype.Flag("deleted")
				}), nil)
				log.add("x1", 1, "A")
				log.addRaw(del)
				log.add("x1", 3, "B")
				log.add("y1", 1, "y")
				e.settle(eng)
				to := "2"
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: "", To: &to}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				var order []string
				for _, ev := range e.rec.events() {
					if ev.Identity == "x1" {
						order = append(order, fmt.Sprintf("%s:%s:%s", ev.Lane, ev.Type, stateOf(ev.Item)))
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["x1"] != "B" {
					t.Errorf("G6: the consumer holds x1 %q, the API %q; x1's deliveries: %v", got["x1"], "B", order)
				}
			})
		}
	})
}

// A row clear-snapshot left forgotten (the rewound live lane never lists it again) is not taken
// back by a backfill window of older entries: o1 stays "B" (the control runs the same window
// without clear-snapshot).
func TestG3BackfillWindowKeepsAForgottenRow(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, clear := range []bool{false, true} {
			t.Run(fmt.Sprintf("clear-snapshot-%v", clear), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("forgot-%v", clear)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
				}), nil)
				log.add("o1", 1, "A")
				log.add("x1", 1, "x")
				log.add("o1", 2, "B")
				log.add("y1", 1, "y")
				log.add("z1", 1, "z")
				e.settle(eng)
				ctx := t.Context()
				// The live lane re-reads from entry 4 (z1): o1's row stays forgotten.
				if err := eng.ResetCursor(ctx, watukuytype.Key{Poller: name, Partition: ""}, "4", clear); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				to := "2" // the window [o1 A, x1]
				if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: "", To: &to}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "B" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v", got["o1"], "B", deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}

// A backfill over an older range of a change log (o1 v1, v2 again) does not supersede o1's
// parked latest observation (v3, invalid): once the validation is fixed its retry brings the
// consumer to v3 (the control runs no backfill).
func TestG3BackfillOfOlderHistoryKeepsTheParkedLatest(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, backfill := range []bool{false, true} {
			t.Run(fmt.Sprintf("backfill-%v", backfill), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("backfill-%v", backfill)
				log := &changeLog{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.History = true // a change log: a backfill reads history
					p.Validate = func(item json.RawMessage) error {
						mu.Lock()
						defer mu.Unlock()
						if strict && stateOf(item) == "bad" {
							return fmt.Errorf("bad state")
						}
						return nil
					}
				}), nil)
				ctx := t.Context()
				log.add("o1", 1, "new")
				log.add("o1", 2, "paid")
				e.settle(eng)
				log.add("o1", 3, "bad") // parked invalid
				e.settle(eng)
				if backfill {
					to := "2" // the first page of the log: v1, v2
					if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: "", To: &to}); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				strict = false
				mu.Unlock()
				for _, r := range rows {
					if _, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, r.ID); err != nil {
						t.Fatal(err)
					}
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q (%d parked rows left to retry after the backfill)", got["o1"], "bad", len(rows))
				}
			})
		}
	})
}

// A backfill passing an invalid item of an identity the log deletes later (o1 "bad a", then
// deleted) leaves no parked row whose retry creates o1 again (the control runs no backfill).
func TestG3BackfillParkedItemOfADeletedIdentityStaysDeleted(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, backfill := range []bool{false, true} {
			t.Run(fmt.Sprintf("backfill-%v", backfill), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bfdel-%v", backfill)
				log := &changeLog{}
				var strict atomic.Bool
				strict.Store(true)
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.Validate = strictBadPrefix(&strict)
					p.Tombstone = watukuytype.Flag("deleted")
				}), nil)
				log.add("o0", 1, "x")
				log.add("o1", 1, "bad a")
				log.addRaw(`{"id":"o1","deleted":true}`)
				e.settle(eng)
				if backfill {
					if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				rows, _ := eng.Parked().List(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				var parked []string
				for _, r := range rows {
					parked = append(parked, r.Identity+":"+stateOf(r.Item))
				}
				strict.Store(false) // the validation was too strict
				retryAllParked(t, eng, name)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if s, ok := got["o1"]; ok {
					t.Errorf("G3: the consumer holds o1 %q, the API deleted it; parked before the retry: %q", s, parked)
				}
			})
		}
	})
}
