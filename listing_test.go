package watukuy

import (
	"fmt"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A complete listing longer than maxPagesPerCycle goes on over several cycles, with no
// operator: every item is created once, nothing is deleted while the listing is partly read,
// and the deletes come once the whole listing (twice, ConfirmDeletes) did not show them.
func TestLongListingSpansCycles(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		const n = 10_000
		for i := range n {
			e.api.Put(fmt.Sprintf("o%05d", i), map[string]any{"total": i})
		}
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy, p.Fetch, p.MaxPagesPerCycle = watukuytype.SnapshotDiff, e.api.Listing(10), 50
		}), nil)
		// run runs the key's cycles, one at a time, until the listing completed `listings` more
		// times. A whole cycle delivers what it commits: no deadline cuts it between the two.
		key := watukuytype.Key{Poller: "orders"}
		run := func(listings int) {
			t.Helper()
			for i := 0; listings > 0; i++ {
				if i > 25*listings+5 {
					t.Fatalf("the listing did not complete: %d cycles", i)
				}
				e.clock.Advance(3 * time.Minute)
				if rep := eng.RunCycle(t.Context(), key); rep.Outcome != watukuytype.Ran || rep.Err != nil {
					t.Fatalf("cycle %d: %+v", i, rep)
				}
				ki, err := eng.Inspect(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				if ki.LastError != nil {
					t.Fatalf("cycle %d: lastError %s", i, ki.LastError)
				}
				if len(ki.Listings) == 0 {
					listings--
				} else if l := ki.Listings[0]; l.Cycles < 1 || l.Pages > 50*l.Cycles {
					t.Fatalf("cycle %d: listing %+v", i, l) // a cycle never reads more than maxPagesPerCycle
				}
			}
		}
		run(1)
		created := map[string]int{}
		for _, ev := range e.rec.events() {
			if ev.Type != watukuytype.Created {
				t.Fatalf("first listing: %s %s", ev.Type, ev.Identity)
			}
			created[ev.Identity]++
		}
		if len(created) != n || len(e.rec.events()) != n {
			t.Fatalf("first listing: %d events for %d identities, want %d", len(e.rec.events()), len(created), n)
		}
		gone := []string{"o00000", "o02500", "o05000", "o07500", "o09999"}
		for _, id := range gone {
			e.api.Delete(id)
		}
		run(1)
		if extra := e.rec.events()[n:]; len(extra) != 0 {
			t.Fatalf("one listing without them (ConfirmDeletes 2) emitted %d events", len(extra))
		}
		run(1)
		deleted := map[string]int{}
		for _, ev := range e.rec.events()[n:] {
			if ev.Type != watukuytype.Deleted {
				t.Fatalf("after the deletes: %s %s", ev.Type, ev.Identity)
			}
			deleted[ev.Identity]++
		}
		for _, id := range gone {
			if deleted[id] != 1 {
				t.Fatalf("deleted %v, want each of %v once", deleted, gone)
			}
		}
		if len(deleted) != len(gone) {
			t.Fatalf("deleted %v, want %v", deleted, gone)
		}
	})
}
