package watukuy

// reset-cursor --clear-snapshot: every item is emitted again as created, under an id no earlier
// change had, and nothing deleted or parked meanwhile is lost.

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// clearSnapshotPoller is an unversioned listing poller whose content is the state field.
func clearSnapshotPoller(e *env, mod ...func(*watukuytype.Poller)) watukuytype.Poller {
	return e.poller(append([]func(*watukuytype.Poller){func(p *watukuytype.Poller) {
		p.Version = nil
		p.Fingerprint = stateFingerprint
		p.Strategy = watukuytype.SnapshotDiff
		p.Fetch = e.api.Listing(10)
		p.ConfirmDeletes = 1
	}}, mod...)...)
}

// clear-snapshot drops an identity's row but not its change count: o1 went A, B, C, and after
// the clear C → B is a new change with a new id, not the id of the earlier A → B.
func TestG2ClearSnapshotKeepsTheChangeCount(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(clearSnapshotPoller(e), nil)
		for _, s := range []string{"A", "B", "C"} {
			e.api.Put("o1", map[string]any{"state": s})
			e.settle(eng)
		}
		if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng) // o1 emitted again as created (C)
		e.api.Put("o1", map[string]any{"state": "B"})
		e.settle(eng)
		got, repeats := dedupingConsumer(e.rec.events())
		for _, r := range repeats {
			t.Logf("repeat: %s", r)
		}
		if got["o1"] != "B" {
			t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q (%d ids repeated)", got["o1"], "B", len(repeats))
		}
	})
}

// clear-snapshot keeps an identity's life even when it began longer ago than
// TombstoneRetention: o1's next delete does not repeat the id of its first life's delete.
func TestG2ClearSnapshotKeepsALifeOlderThanTheRetention(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(clearSnapshotPoller(e, func(p *watukuytype.Poller) { p.TombstoneRetention = time.Hour }), nil)
		e.api.Put("o1", map[string]any{"state": "closed"})
		e.settle(eng)
		e.api.Delete("o1")
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "closed"}) // a second life
		e.settle(eng)
		e.clock.Advance(2 * time.Hour) // the second life is older than the retention
		if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		e.api.Delete("o1")
		e.settle(eng)
		got, repeats := dedupingConsumer(e.rec.events())
		for _, r := range repeats {
			t.Logf("repeat: %s", r)
		}
		if _, present := got["o1"]; present {
			t.Errorf("G2: a consumer that dedupes by id still holds o1, which the API deleted (%d ids repeated)", len(repeats))
		}
	})
}

// clear-snapshot drops rows and tombstones but keeps the identity's life: o1's next delete gets
// a new id, not that of its first life's delete, and a consumer that dedupes by id drops o1.
func TestG2DeleteAfterClearSnapshotGetsANewID(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		p := e.poller(stateOnly(e))
		eng := e.engine(p, nil)
		e.api.Put("o1", map[string]any{"state": "closed"})
		e.settle(eng)
		e.api.Delete("o1")
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "closed"}) // a second life
		e.settle(eng)
		if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng) // o1 re-emitted as created (the runbook's "with its first id")
		e.api.Delete("o1")
		e.settle(eng)
		evs := e.rec.events()
		seen := map[string]int{}
		present := map[string]bool{}
		for i, ev := range evs {
			if j, dup := seen[ev.ID]; dup {
				if ev.Type == watukuytype.Deleted {
					t.Errorf("G2: event %d (%s) has the id of event %d (%s): the second life's delete named as the first's", i, ev.Type, j, evs[j].Type)
				}
				continue
			}
			seen[ev.ID] = i
			present[ev.Identity] = ev.Type != watukuytype.Deleted
		}
		if present["o1"] {
			t.Errorf("a consumer that dedupes by id still holds o1, which the API deleted")
		}
	})
}

// An item the API deletes after clear-snapshot, before the lane listed it again (so it has no
// row), still gets its delete emitted.
func TestG3DeleteRightAfterClearSnapshotIsEmitted(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = e.api.Listing(10)
			p.ConfirmDeletes = 1
		}), nil)
		e.api.Put("a", nil)
		e.api.Put("x", nil)
		e.settle(eng)
		if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "", true); err != nil {
			t.Fatal(err)
		}
		e.api.Delete("x") // before the next listing
		e.settle(eng)
		checkFinal(t, e)
	})
}

// clear-snapshot emits every item as created again, also items whose version went down (the API
// restored from a backup: rev 3 under the forgotten rows' rev 5); the control was not restored.
func TestG3ClearSnapshotReemitsItemsOlderThanTheirRows(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, restored := range []bool{false, true} {
			t.Run(fmt.Sprintf("restored-%v", restored), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("restored-%v", restored)
				l := &rawListing{items: map[string]string{}}
				for _, id := range []string{"a", "b"} {
					l.set(id, fmt.Sprintf(`{"id":%q,"rev":5,"state":"rev 5"}`, id))
				}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = watukuytype.Field("rev")
				}), nil)
				e.settle(eng)
				if restored {
					for _, id := range []string{"a", "b"} {
						l.set(id, fmt.Sprintf(`{"id":%q,"rev":3,"state":"rev 3"}`, id))
					}
					e.settle(eng)
				}
				before := len(e.rec.events())
				if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, "", true); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				created := 0
				for _, ev := range e.rec.events()[before:] {
					if ev.Type == watukuytype.Created {
						created++
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				l.mu.Lock()
				api := map[string]string{"a": stateOf(json.RawMessage(l.items["a"])), "b": stateOf(json.RawMessage(l.items["b"]))}
				l.mu.Unlock()
				if created != 2 {
					t.Errorf("G3: clear-snapshot emitted %d created events for 2 items; the consumer holds %v, the API %v", created, got, api)
				}
			})
		}
	})
}

// A parked invalid item whose change log clear-snapshot passes again (its identity created
// again, the item parked again) is still the API's current state when retried: it is committed,
// not dropped as superseded (the control retries without the reset).
func TestG3ParkedItemStaysRetriableAfterClearSnapshot(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, reset := range []bool{false, true} {
			t.Run(fmt.Sprintf("clear-snapshot-%v", reset), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("clear-%v", reset)
				log := &changeLog{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = log.fetch
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
				e.settle(eng)
				log.add("o1", 2, "bad")
				e.settle(eng)
				if reset {
					if err := eng.ResetCursor(ctx, watukuytype.Key{Poller: name, Partition: ""}, "", true); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				mu.Lock()
				strict = false
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, rows[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q (its current state dropped as superseded)", got["o1"], "bad")
				}
			})
		}
	})
}
