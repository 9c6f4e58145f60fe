package watukuy

// Reproductions of an eighth adversarial review (branch adversary7), of ae94c28 (a backfill
// skips entries whose versions order before the row's; a deletion without a row leaves a
// tombstone; a retry is refused while another observation is parked; a partition deleted
// before incarnations gets one when added). Each test is named for the guarantee it breaks and
// FAILED on the code it was written against; each has a control that passes. Fixed by: a
// backfill skips an entry not known to be newer than the row (the same version with other
// content, a deletion entry without a later version); an incarnation starts above every
// generation the partition gave (state field lastLife).

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
)

// ---------------------------------------------------------------------------------------
// G3: a backfill takes back what the rows hold when the entry's version EQUALS the row's (a
// timestamp version, two changes in one second).
// ---------------------------------------------------------------------------------------

// TestAdversary7G3BackfillEqualTimestampRollsBack: ae94c28 skips a backfill entry only when
// its version orders strictly BEFORE the row's. The README's cure for the change-log limit is
// "give the poller a version that orders (a sequence number, a timestamp)"; a timestamp of
// second precision ties whenever an item changes twice in a second. A change log o1 new
// (10:00:00), paid (10:00:05), shipped (10:00:05), x1 is read by the live lane (rows o1
// shipped @10:00:05). A backfill of the period [0, 2) (new, paid): "new" is skipped, "paid"
// has the row's version, does not order before it, is Classified Updated (its fingerprint
// differs) and committed: rows and consumer hold o1 "paid", the backfill reaches its target,
// the live cursor is past "shipped". The control has "shipped" one second later (10:00:06):
// "paid" orders before it and is skipped. The default-target variant ends at "shipped" but
// delivers it a second time under a new id (G2: one change, two ids).
func TestAdversary7G3BackfillEqualTimestampRollsBack(t *testing.T) {
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
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
				}), nil)
				log.addRaw(`{"id":"o1","version":"2026-01-01T10:00:00Z","state":"new"}`)
				log.addRaw(`{"id":"o1","version":"2026-01-01T10:00:05Z","state":"paid"}`)
				log.addRaw(fmt.Sprintf(`{"id":"o1","version":%q,"state":"shipped"}`, tc.shipped))
				log.addRaw(`{"id":"x1","version":"2026-01-01T10:00:07Z","state":"x"}`)
				e.settle(eng)
				req := BackfillRequest{From: ""}
				if tc.window {
					to := "2"
					req.To = &to
				}
				if _, err := eng.Backfill(t.Context(), name, "", req); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), name, "")
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

// ---------------------------------------------------------------------------------------
// G2: the incarnation of a partition added again is the server's time, but lives run ahead
// of it: an id of the deleted incarnation comes back.
// ---------------------------------------------------------------------------------------

// TestAdversary7G2IncarnationBehindLivesOfTheDeletedPartition: a deletion's generation is
// max(now, life+1), so an identity deleted and created again several times in one
// millisecond (one change-log page: x A, deleted, A, deleted, A, deleted) has lives now, now+1,
// now+2: its lives run ahead of the clock by one millisecond per re-creation. delete_key.lua
// sets the incarnation to the server's now, which can be below those lives when the partition
// is deleted within that many milliseconds (a page of a few thousand re-creations: seconds).
// The partition added again starts x's life at max(0, incarnation) = now+1, one of the deleted
// incarnation's lives: x's first "created A" (life now+1, change 0) has the id of the old
// incarnation's third "created A", and a consumer that dedupes by id drops it (it holds x
// deleted, the API has x). The control deletes the partition a minute later.
func TestAdversary7G2IncarnationBehindLivesOfTheDeletedPartition(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, gap := range []time.Duration{time.Minute, time.Millisecond} {
			t.Run(fmt.Sprintf("deleted-%v-after", gap), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("incar-%d", gap.Milliseconds())
				first, second := &changeLog{}, &changeLog{}
				var cur atomic.Pointer[changeLog]
				cur.Store(first)
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Partitions = []string{"t1"}
					p.Version = nil
					p.Fingerprint = stateFingerprint
					p.Tombstone = Flag("deleted")
					p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) { return cur.Load().fetch(ctx, req) }
				}), nil)
				for range 3 {
					first.addRaw(`{"id":"x","state":"A"}`)
					first.addRaw(`{"id":"x","deleted":true}`)
				}
				e.tick(eng) // every page in one cycle, at one instant of the clock
				if n := len(e.rec.events()); n != 6 {
					t.Fatalf("the first cycle delivered %d events, want 6", n)
				}
				ctx := t.Context()
				e.clock.Advance(gap)
				if err := eng.Partitions().Delete(ctx, name, "t1"); err != nil {
					t.Fatal(err)
				}
				second.addRaw(`{"id":"x","state":"A"}`)
				cur.Store(second)
				if err := eng.Partitions().Add(ctx, name, "t1"); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, repeats := dedupingConsumer(e.rec.events())
				if got["x"] != "A" || len(repeats) > 0 {
					t.Errorf("G2: a consumer that dedupes by id holds x %q, the API %q; repeats: %q", got["x"], "A", repeats)
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G6/G3: a backfill deletes an identity the API has, from a deletion entry without a version.
// ---------------------------------------------------------------------------------------

// TestAdversary7G6BackfillVersionlessDeletionEntryDeletesTheCurrentLife: ae94c28 skips a
// backfill entry whose version orders before the row's; a deletion entry of a change log
// commonly carries no version (`{"id":..,"deleted":true}`; observe leaves it ""), so it never
// orders and is applied to whatever row is there. A change log x1 A (v1), x1 deleted, x1 B
// (v3, a new life), y1 is read by the live lane (rows x1 B v3). A backfill of [0, 2) skips x1
// A (v1 before v3) and applies the deletion to x1's current life: "deleted" is delivered,
// the rows forget x1, the backfill is done and the live cursor is past "B": consumer and rows
// hold x1 deleted while the API has B (a delete the API never made of this life, G6; the
// final state differs, G3). The control's deletion entry carries its version (v2): it orders
// before v3 and is skipped.
func TestAdversary7G6BackfillVersionlessDeletionEntryDeletesTheCurrentLife(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, del := range []string{`{"id":"x1","deleted":true,"version":"2"}`, `{"id":"x1","deleted":true}`} {
			versioned := del != `{"id":"x1","deleted":true}`
			t.Run(fmt.Sprintf("deletion-entry-versioned-%v", versioned), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bfdel-%v", versioned)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
					p.Tombstone = Flag("deleted")
				}), nil)
				log.add("x1", 1, "A")
				log.addRaw(del)
				log.add("x1", 3, "B")
				log.add("y1", 1, "y")
				e.settle(eng)
				to := "2"
				if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: "", To: &to}); err != nil {
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
