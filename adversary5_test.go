package watukuy

// Reproductions of a sixth adversarial review (branch adversary5), of ddd4cff (every change
// counts in its id and nothing is dropped as stale; a parked invalid item replaces its
// identity's previous one and is superseded only by an observation not known to be older; an
// item parked without an identity is not retried over rows that know it). Each test is named
// for the guarantee it breaks and FAILED on the code it was written against. Fixed by: the
// backfill lane skips identities the live side wrote since it began (the :touched set); the
// live lane always parks an identity's latest invalid observation and supersedes, without
// comparing versions, and a backfill parks only where nothing is parked; a retry that cannot
// be placed among its identity's observations (parked without an identity, by a backfill, or
// before the index; or older than the tombstones' memory) is refused; partitions delete leaves
// an incarnation that the next lives start from; a discard forgets the index entry.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// ---------------------------------------------------------------------------------------
// G3: an invalid observation "older" than the parked one is neither parked nor emitted.
// ---------------------------------------------------------------------------------------

// strictBadPrefix is a Validate that rejects items whose state starts with "bad" while strict
// holds.
func strictBadPrefix(strict *atomic.Bool) func(json.RawMessage) error {
	return func(item json.RawMessage) error {
		if strict.Load() && strings.HasPrefix(stateOf(item), "bad") {
			return fmt.Errorf("bad state")
		}
		return nil
	}
}

// retryAllParked retries every parked invalid row of a key, oldest first (parked ls order).
func retryAllParked(t *testing.T, eng *Engine, poller string) {
	t.Helper()
	rows, err := eng.Parked().List(t.Context(), poller, "", "invalid")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := eng.Parked().Retry(t.Context(), poller, "", r.ID); err != nil {
			t.Logf("retry %s (%s): %v", r.ID, r.Identity, err)
		}
	}
}

// TestAdversary5G3InvalidObservationOlderThanTheParkedOneIsDropped: process() parks an
// identity's latest invalid observation only when it is not olderThanParked, and an
// observation that is skips the park AND the diff (`if o.issue != "" { continue }`): it is
// neither parked nor emitted, and the cursor moves past it. Versions go back for real: a
// record deleted and created again under the same identity (a SKU) restarts its revision, and
// a feed that does not report deletes (updated_since) shows only the new record's revs. o1
// rev 5 (old record) is parked invalid; the new record's rev 1 is emitted (not older than
// the ROW: nothing is stale now), its rev 2 is invalid but "older" than the parked rev 5: it
// vanishes. `parked ls` shows only the old record's rev 5. The operator fixes the validation
// and retries what is parked: rev 5 of the OLD record is committed over the new record. The
// consumer holds the old record's rev 5, the API the new record's rev 2, and nothing is left
// to retry. The control continues the old record (revs 6, 7): rev 7 is parked in rev 5's
// place and the retry brings the consumer to the API.
func TestAdversary5G3InvalidObservationOlderThanTheParkedOneIsDropped(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, recreated := range []bool{false, true} {
			t.Run(fmt.Sprintf("recreated-%v", recreated), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("older-%v", recreated)
				log := &changeLog{}
				var strict atomic.Bool
				strict.Store(true)
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.Validate = strictBadPrefix(&strict)
				}), nil)
				log.add("o1", 4, "old record")
				e.settle(eng)
				log.add("o1", 5, "bad old record") // parked invalid
				e.settle(eng)
				next := 6
				if recreated {
					next = 1 // deleted and created again: its revision starts over
				}
				log.add("o1", next, "new record")
				e.settle(eng)
				log.add("o1", next+1, "bad new record") // the API's current state
				e.settle(eng)
				rows, _ := eng.Parked().List(t.Context(), name, "", "invalid")
				var parked []string
				for _, r := range rows {
					parked = append(parked, stateOf(r.Item))
				}
				strict.Store(false) // the validation was too strict
				retryAllParked(t, eng, name)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad new record" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; parked before the retry: %q", got["o1"], "bad new record", parked)
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G2: a partition deleted and added again repeats the ids of its first incarnation.
// ---------------------------------------------------------------------------------------

// TestAdversary5G2PartitionDeletedAndAddedAgainRepeatsIDs: an id is (poller, partition,
// identity, kind, hash(version, fingerprint), schema, life, change), life and change coming
// from the rows and tombstones. `partitions delete` drops rows AND tombstones (delete_key.lua
// UNLINKs :items and :gone), and `partitions add` brings the partition back empty: every
// identity is in life 0 at change 0 again. o1 went A (created, life 0, change 0) → B; the
// partition is deleted (a tenant off-boarded) and added again later, when the API holds o1 at
// A again: "created A, life 0, change 0" is the id of o1's first event. A consumer that
// dedupes by id drops it and keeps B; the API has A. The control re-adds when the API holds
// C, a content never emitted: a new id, and the consumer follows.
func TestAdversary5G2PartitionDeletedAndAddedAgainRepeatsIDs(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, back := range []string{"C", "A"} {
			t.Run("back-to-"+back, func(t *testing.T) {
				e := newEnv(t, b)
				name := "readd-" + back
				l := &rawListing{items: map[string]string{}}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Partitions = []string{"t1"}
					p.Strategy = SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
				}), nil)
				for _, s := range []string{"A", "B"} {
					l.set("o1", fmt.Sprintf(`{"id":"o1","state":%q}`, s))
					e.settle(eng)
				}
				if err := eng.Partitions().Delete(t.Context(), name, "t1"); err != nil {
					t.Fatal(err)
				}
				l.set("o1", fmt.Sprintf(`{"id":"o1","state":%q}`, back))
				if err := eng.Partitions().Add(t.Context(), name, "t1"); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				evs := e.rec.events()
				got, repeats := dedupingConsumer(evs)
				for _, r := range repeats {
					t.Logf("repeat: %s", r)
				}
				if got["o1"] != back {
					t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q (%d events, %d ids repeated)", got["o1"], back, len(evs), len(repeats))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: the retry of an item parked without an identity, once the tombstone has gone.
// ---------------------------------------------------------------------------------------

// TestAdversary5G3IdentitylessRetryAfterTheTombstoneExpiredRecreates: placeIdentityless
// refuses the retry of an item parked without an identity only while the rows know the
// identity: a row, or a tombstone (`k.row == nil && k.tomb == 0` → retried). Tombstones last
// TombstoneRetention (trimmed by the next deletion committed after it), a parked row lasts
// until an operator acts. o1's "a" is parked without identity (the identity path was wrong);
// after the fix the feed shows o1 "b", then o1's deletion (a tombstone). Past the retention
// another deletion trims o1's tombstone; the operator retries the parked row: nothing knows
// o1, so "a" is committed as created. The consumer holds o1 "a", the API deleted it, and the
// cursor is past the deletion. The control retries within the retention: refused.
func TestAdversary5G3IdentitylessRetryAfterTheTombstoneExpiredRecreates(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, expired := range []bool{false, true} {
			t.Run(fmt.Sprintf("tombstone-expired-%v", expired), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("noid-tomb-%v", expired)
				f := &changeLog{}
				base := func(p *Poller) {
					p.Name = name
					p.Fetch = f.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
					p.Tombstone = Flag("deleted")
					p.TombstoneRetention = time.Hour
				}
				ctx := t.Context()
				f.addRaw(`{"id":"o0","state":"x"}`)
				f.addRaw(`{"ID":"o1","state":"a"}`) // no "id": parked without identity
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *Poller) {
					p.Identity = func(item json.RawMessage) (string, error) {
						if id, err := Field("id")(item); err == nil {
							return id, nil
						}
						return Field("ID")(item)
					}
				}), nil)
				f.addRaw(`{"id":"o1","state":"b"}`)
				f.addRaw(`{"id":"o1","deleted":true}`)
				e.settle(eng)
				if expired {
					e.clock.Advance(2 * time.Hour)
					f.addRaw(`{"id":"o2","state":"y"}`)
					f.addRaw(`{"id":"o2","deleted":true}`) // its tombstone trims o1's
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				_, rerr := eng.Parked().Retry(ctx, name, "", rows[0].ID)
				t.Logf("retry: %v", rerr)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if s, ok := got["o1"]; ok {
					t.Errorf("G3: the consumer holds o1 %q, the API deleted it (an identity-less parked row was retried once the tombstone had gone)", s)
				}
			})
		}
	})
}
