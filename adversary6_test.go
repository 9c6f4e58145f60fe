package watukuy

// Reproductions of a seventh adversarial review (branch adversary6), of b9a452d (the backfill
// lane skips identities the live side wrote since it began, the :touched set; the live lane
// always parks and supersedes, a backfill parks only where nothing is parked and never
// supersedes; a retry the :invalid index does not name is placed against the rows; partitions
// delete leaves an incarnation). Each test is named for the guarantee it breaks and FAILED on
// the code it was written against; each has a control that passes. Fixed by: a backfill skips
// an entry whose version orders before the row's (opaque versions: README, known limits); a
// deletion of an identity without a row leaves a tombstone; a retry is refused while another
// observation of its identity is parked, and a backfill's parked item after any deletion; a
// partition deleted before incarnations gets one when it is added again.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
)

// latest is a full listing of a change log's current state: each identity's last entry, in
// order of first appearance, one page (a reconcile listing of the same API).
func (l *changeLog) latest(ctx context.Context, req FetchRequest) (Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[string]json.RawMessage{}
	var order []string
	for _, raw := range l.entries {
		var it struct {
			ID      string `json:"id"`
			Deleted bool   `json:"deleted"`
		}
		_ = json.Unmarshal(raw, &it)
		if _, ok := last[it.ID]; !ok {
			order = append(order, it.ID)
		}
		if it.Deleted {
			last[it.ID] = nil
			continue
		}
		last[it.ID] = raw
	}
	var p Page
	for _, id := range order {
		if last[id] != nil {
			p.Items = append(p.Items, last[id])
		}
	}
	return p, nil
}

// ---------------------------------------------------------------------------------------
// G3: a backfill over an explicit window (--to) rolls back what the live side wrote BEFORE it
// began.
// ---------------------------------------------------------------------------------------

// TestAdversary6G3BackfillWindowRollsBackEarlierLiveChanges: the :touched set protects only
// what the live side writes AFTER Backfill is called; what it wrote before is protected only
// if the backfill passes the same history up to where the rows are, i.e. its target is the
// live cursor. `To` is a documented input ("Events are missing from a period the live lane
// passed: backfill ... up to --to"). A change log o1 new, paid, shipped, x1 is read by the live
// lane (cursor 4, rows o1 shipped); the operator backfills the period [0, 2), o1's new and
// paid: o1 is not touched, so both are committed as updates (rows o1 paid) and delivered
// after shipped. The backfill reaches its target; the live cursor is past "shipped", nothing
// reads it again: the consumer (deduping by id or not) holds o1 "paid", the API "shipped".
// The control backfills to the default target (the live cursor): it ends at "shipped".
func TestAdversary6G3BackfillWindowRollsBackEarlierLiveChanges(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, window := range []bool{false, true} {
			t.Run(fmt.Sprintf("explicit-to-%v", window), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bfwin-%v", window)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
				}), nil)
				for v, s := range []string{"new", "paid", "shipped"} {
					log.add("o1", v+1, s)
				}
				log.add("x1", 1, "x")
				e.settle(eng)
				req := BackfillRequest{From: ""}
				if window {
					to := "2" // the period of o1's first two changes
					req.To = &to
				}
				if _, err := eng.Backfill(t.Context(), name, "", req); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), name, "")
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

// ---------------------------------------------------------------------------------------
// G3: rows the reconcile lane moved ahead of the live cursor are rolled back by the next
// backfill (default target).
// ---------------------------------------------------------------------------------------

// TestAdversary6G3ReconcileAheadOfTheLiveCursorRolledBackByABackfill: the backfill's default
// target is the live cursor, which assumes the rows hold nothing the live lane has not read.
// The reconcile lane breaks that: it lists the API's current state after the live lane, and an
// update that lands between the live lane's last page and the listing is committed from the
// listing (o1 shipped) while the live cursor stays before its change-log entry. The operator
// then starts a backfill (To = the live cursor, before "shipped"). The next cycle's live lane
// reads the "shipped" entry: Unchanged (the rows already hold it), no write, so o1 is never
// added to :touched. The backfill lane then passes o1 new, paid: committed as updates, row
// "paid", delivered after "shipped". Backfill done, live cursor past "shipped": the consumer
// holds "paid" until the next reconcile (Every later; a day by the README's example). The
// control has "shipped" reach the live lane first (written by it before the backfill, and
// inside the backfill's target).
func TestAdversary6G3ReconcileAheadOfTheLiveCursorRolledBackByABackfill(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, viaReconcile := range []bool{false, true} {
			t.Run(fmt.Sprintf("change-seen-first-by-reconcile-%v", viaReconcile), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("recahead-%v", viaReconcile)
				log := &changeLog{}
				var armed atomic.Bool
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.History = true // a change log: every change an entry
					p.Fetch = log.fetch
					p.Reconcile = &Reconcile{Every: 6 * time.Hour, Fetch: func(ctx context.Context, req FetchRequest) (Page, error) {
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
				if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), name, "")
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

// ---------------------------------------------------------------------------------------
// G3: a backfill parks an invalid observation of an identity whose deletion left no tombstone;
// the retry brings the deleted identity back.
// ---------------------------------------------------------------------------------------

// TestAdversary6G3BackfillParkedItemOfADeletedIdentityIsRecreated: placeRetry commits a row
// the index does not name (a backfill parked it) when "no row and no deletion since"
// (k.row == nil && k.tomb < ParkedAt). But a deletion of an identity without a row writes no
// tombstone (process: `if k.row != nil { c.delete }`), and a backfill never supersedes. A
// change log: o0, o1 "bad a" (invalid: o1 never gets a row), o1 deleted. The live lane parks
// o1's "bad a" and its deletion supersedes it: nothing parked, nothing emitted for o1, which
// is right. A backfill from the beginning passes the same log: "bad a" is parked again (the
// backfill lane, nothing parked for o1), its deletion leaves it there. The operator fixes the
// validation and retries what `parked ls` shows: no row, no tombstone, so "bad a" is committed
// as created. The consumer holds o1, the API deleted it, and no later entry deletes it. The
// control runs no backfill.
func TestAdversary6G3BackfillParkedItemOfADeletedIdentityIsRecreated(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, backfill := range []bool{false, true} {
			t.Run(fmt.Sprintf("backfill-%v", backfill), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("bfdel-%v", backfill)
				log := &changeLog{}
				var strict atomic.Bool
				strict.Store(true)
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.Validate = strictBadPrefix(&strict)
					p.Tombstone = Flag("deleted")
				}), nil)
				log.add("o0", 1, "x")
				log.add("o1", 1, "bad a")
				log.addRaw(`{"id":"o1","deleted":true}`)
				e.settle(eng)
				if backfill {
					if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: ""}); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				rows, _ := eng.Parked().List(t.Context(), name, "", "invalid")
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

// ---------------------------------------------------------------------------------------
// G3: the retry of an item parked without an identity supersedes (removes) the identity's
// LATER parked observation.
// ---------------------------------------------------------------------------------------

// TestAdversary6G3IdentitylessRetrySupersedesTheLaterParkedObservation: placeRetry places a
// row the index does not name against the ROWS only (no row and no deletion since, or an
// older row version); it never looks at the identity's parked latest observation (k.parked).
// Once allowed, retryInvalid runs the item through process(), whose valid latest observation
// supersedes k.parked: the identity's later invalid observation is removed in the same
// commit. A change log: o1 v1 without "id" (parked identity-less), then o1 v2 "bad" (parked
// with its identity, indexed). The operator fixes both the identity path and the validation
// and retries what `parked ls` shows, oldest first: o1 v1 has no row and no tombstone, so it
// is committed, and v2's row goes with it. The retry of v2 then finds no row. The consumer
// holds o1 v1, the API v2, and nothing is left to retry. The control retries newest first:
// v2 is committed, v1 refused (older than the row).
func TestAdversary6G3IdentitylessRetrySupersedesTheLaterParkedObservation(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, oldestFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("oldest-first-%v", oldestFirst), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("noid-sup-%v", oldestFirst)
				log := &changeLog{}
				var strict atomic.Bool
				strict.Store(true)
				base := func(p *Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.Validate = strictBadPrefix(&strict)
				}
				ctx := t.Context()
				log.addRaw(`{"ID":"o1","version":"1","state":"a"}`) // no "id": parked without identity
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *Poller) {
					p.Identity = func(item json.RawMessage) (string, error) {
						if id, err := Field("id")(item); err == nil {
							return id, nil
						}
						return Field("ID")(item)
					}
				}), nil)
				log.add("o1", 2, "bad b") // the API's current state, parked invalid
				e.settle(eng)
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(rows) != 2 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				if !oldestFirst {
					rows[0], rows[1] = rows[1], rows[0]
				}
				strict.Store(false) // the validation was too strict
				for _, r := range rows {
					_, rerr := eng.Parked().Retry(ctx, name, "", r.ID)
					t.Logf("retry %q (%s): %v", r.Identity, stateOf(r.Item), rerr)
				}
				e.settle(eng)
				left, _ := eng.Parked().List(ctx, name, "", "invalid")
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad b" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; %d rows left parked", got["o1"], "bad b", len(left))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: a backfill that stops half-way (failed, or replaced by another) leaves the identities
// it took back into the past there.
// ---------------------------------------------------------------------------------------

// TestAdversary6G3BackfillStoppedHalfWayLeavesThePast: a backfill over a change log takes
// every identity it passes back to its older entries and relies on reaching the later ones
// before it ends (its target is the live cursor). Two documented ways end it before that:
// a cursor the API refuses stops it (CONFIG: `Failed`, "start a new one"), and calling
// Backfill again replaces its cursor and target. A change log o1 new, paid, shipped, x1 is read
// by the live lane; a backfill from the beginning passes [new, paid] in its first cycle (rows
// and consumer: o1 paid); then either its next request is refused (failed), or the operator
// restarts it from cursor 3 (x1 onwards). (A transient failure of the backfill's second
// request, which only postpones it, stops the first tick there in every case.) Neither ever
// passes "shipped" again, nor does the live lane: the consumer holds o1 "paid", the API
// "shipped". The control lets the backfill complete. Fixed for versions that order: a
// backfill skips an entry older than the row (README: opaque versions are a known limit).
func TestAdversary6G3BackfillStoppedHalfWayLeavesThePast(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, how := range []string{"completes", "fails", "restarted-later"} {
			t.Run(how, func(t *testing.T) {
				e := newEnv(t, b)
				name := "bfhalf-" + how
				log := &changeLog{}
				var refuse, hiccup atomic.Bool
				hiccup.Store(true)
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.History = true       // a change log: every change an entry
					p.MaxPagesPerCycle = 2 // the live lane's page and one backfill page
					p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
						if req.Lane == "backfill" && req.Cursor == "2" && refuse.Load() {
							return Page{}, &ConfigError{Poller: name, Field: "cursor", Msg: "cursor 2 refused by the API (expired)"}
						}
						if req.Lane == "backfill" && req.Cursor == "2" && hiccup.CompareAndSwap(true, false) {
							return Page{}, fmt.Errorf("a transient failure: the backfill goes on at the next cycle")
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
				if _, err := eng.Backfill(ctx, name, "", BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(time.Second)
				e.tick(eng) // the backfill's first page (o1 new, paid), then a transient failure
				// Fixed: entries whose versions order before the row's are skipped by a backfill,
				// so the first page takes nothing back (the reproduction saw "paid" here).
				if got, _ := dedupingConsumer(e.rec.events()); got["o1"] != "shipped" {
					t.Errorf("G3: after the backfill's first page the consumer holds o1 %q, the API %q", got["o1"], "shipped")
				}
				switch how {
				case "fails":
					refuse.Store(true)
				case "restarted-later":
					if _, err := eng.Backfill(ctx, name, "", BackfillRequest{From: "3"}); err != nil {
						t.Fatal(err)
					}
				}
				e.settle(eng)
				ki, _ := eng.Inspect(ctx, name, "")
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

// ---------------------------------------------------------------------------------------
// G2: a partition added back after its deletion mark expired repeats no id.
// ---------------------------------------------------------------------------------------

// TestG2PartitionAddedBackAfterItsDeletionWasForgotten: partitions delete leaves a deletion
// mark that expires (the mark is deleted here, as its expiry would), after which nothing of
// the partition is left but its poller's high-water marks. o1 went A → B; the partition is
// deleted, forgotten, and added back while the API holds o1 at A again: its identities' lives
// start above the deleted partition's (the seed of its first Begin), so "created A" gets a new
// id and a consumer that dedupes by id follows the API. The control adds back while the mark
// lives.
func TestG2PartitionAddedBackAfterItsDeletionWasForgotten(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, forgotten := range []bool{false, true} {
			t.Run(fmt.Sprintf("mark-expired-%v", forgotten), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("readd-forgotten-%v", forgotten)
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
				ctx := t.Context()
				for _, s := range []string{"A", "B"} {
					l.set("o1", fmt.Sprintf(`{"id":"o1","state":%q}`, s))
					e.settle(eng)
				}
				if err := eng.Partitions().Delete(ctx, name, "t1"); err != nil {
					t.Fatal(err)
				}
				if forgotten {
					state := "wk:{" + name + "|t1}:state"
					if err := b.Client.Del(ctx, state).Err(); err != nil {
						t.Fatal(err)
					}
					if n := b.Client.Keys(ctx, "wk:{"+name+"|t1}:*").Val(); len(n) != 0 {
						t.Fatalf("left of the deleted partition: %v", n)
					}
				}
				l.set("o1", `{"id":"o1","state":"A"}`)
				if err := eng.Partitions().Add(ctx, name, "t1"); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, repeats := dedupingConsumer(e.rec.events())
				if got["o1"] != "A" {
					t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q; repeats: %q", got["o1"], "A", repeats)
				}
			})
		}
	})
}
