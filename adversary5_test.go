package watukuy

// Reproductions of a sixth adversarial review (branch adversary5), of ddd4cff (every change
// counts in its id and nothing is dropped as stale; a parked invalid item replaces its
// identity's previous one and is superseded only by an observation not known to be older; an
// item parked without an identity is not retried over rows that know it). Each test is named
// for the guarantee it breaks and FAILS on the code it was written against.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

// ---------------------------------------------------------------------------------------
// G3: a backfill that spans cycles passes history again AFTER the live lane committed a
// later change of the same identity.
// ---------------------------------------------------------------------------------------

// TestAdversary5G3BackfillSpanningCyclesRollsBackALiveChange: with nothing dropped as stale,
// the diff applies every lane's pages in the order they are committed, and lanes interleave
// across cycles: a backfill gets only the pages the live lane leaves of MaxPagesPerCycle, so
// a long one spans cycles, and each cycle runs the live lane FIRST. A change log o1 v1..v3, x1
// is backfilled from the beginning (To = the live cursor, 4). Cycle 1: the live lane is caught
// up, the backfill passes [v1, v2]; the API then records o1 v4. Cycle 2: the live lane commits
// v4 (row v4), then the backfill passes [v3, x1]: an update (v3 ≠ v4), row v3, delivered
// after v4. The backfill is at its target, the live cursor past v4: nothing reads v4 again.
// The consumer (deduping by id or not) holds v3, the API v4. The control records v4 only
// after the backfill is done.
func TestAdversary5G3BackfillSpanningCyclesRollsBackALiveChange(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, during := range []bool{false, true} {
			t.Run(fmt.Sprintf("live-change-during-backfill-%v", during), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bf-%v", during)
				log := &changeLog{}
				var started atomic.Bool
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.MaxPagesPerCycle = 2 // the live lane's page and one backfill page
					p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
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
				if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: ""}); err != nil {
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
