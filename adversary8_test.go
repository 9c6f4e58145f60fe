package watukuy

// Reproductions of a ninth adversarial review (branch adversary8), of ae3121b (a backfill
// skips an entry not known to be newer than the row: an older version, the same version with
// other content, a deletion entry without a later version; lastLife; placeRetry under a later
// row). Each test is named for the guarantee it breaks and FAILED on the code it was written
// against; each has a control that passes.
//
// The README says of the entries a backfill now skips: "an API that serves history, a change
// log, passes such entries; an API that lists items as they are now never does". These tests
// use exactly such an API (currentAPI: every item's CURRENT state, listed by the position of
// its last write, like updated_since) and show that it does pass them.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

// currentAPI lists items as they are now, over updated_since: each item's current state,
// ordered by the position (the second of its updated_at) of its last write; Fetch lists the
// items whose position is after the cursor, two a page (a position is never split), and the
// next cursor is the last position listed. A write whose position is at or before a cursor the
// live lane already passed models a write that became visible late (a read replica's lag, a
// long transaction that stamped updated_at when it began, a restore from a backup): the live
// lane never lists it, which is what the runbook's backfill is for ("Events are missing from a
// period the live lane passed").
type currentAPI struct {
	mu    sync.Mutex
	items map[string]currentItem
}

type currentItem struct {
	pos int
	raw string
}

// ts is the second-precision updated_at of position pos.
func ts(pos int) string { return fmt.Sprintf("2026-01-01T10:00:%02dZ", pos) }

// put sets id's current state: version ts(pos), state, last written at position pos.
func (a *currentAPI) put(id string, pos int, state string) {
	a.putRaw(id, pos, fmt.Sprintf(`{"id":%q,"version":%q,"state":%q}`, id, ts(pos), state))
}

func (a *currentAPI) putRaw(id string, pos int, raw string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.items == nil {
		a.items = map[string]currentItem{}
	}
	a.items[id] = currentItem{pos: pos, raw: raw}
}

func (a *currentAPI) fetch(ctx context.Context, req FetchRequest) (Page, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	from := -1
	if req.Cursor != "" {
		if _, err := fmt.Sscan(req.Cursor, &from); err != nil {
			return Page{}, err
		}
	}
	type entry struct {
		id string
		currentItem
	}
	var list []entry
	for id, it := range a.items {
		if it.pos > from {
			list = append(list, entry{id, it})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].pos != list[j].pos {
			return list[i].pos < list[j].pos
		}
		return list[i].id < list[j].id
	})
	if len(list) == 0 {
		return Page{Next: req.Cursor}, nil
	}
	n := min(2, len(list))
	for n < len(list) && list[n].pos == list[n-1].pos {
		n++
	}
	items := make([]json.RawMessage, n)
	for i := range n {
		items[i] = json.RawMessage(list[i].raw)
	}
	return Page{Items: items, Next: fmt.Sprint(list[n-1].pos), HasMore: n < len(list)}, nil
}

// deliveriesOf lists identity's deliveries as lane:type:state.
func deliveriesOf(evs []Event, identity string) []string {
	var out []string
	for _, ev := range evs {
		if ev.Identity == identity {
			out = append(out, fmt.Sprintf("%s:%s:%s", ev.Lane, ev.Type, stateOf(ev.Item)))
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------
// G3: a current-state API's write in the same second as the row's: the backfill (and a
// forced one) skips it.
// ---------------------------------------------------------------------------------------

// TestAdversary8G3BackfillSkipsASameSecondWriteOfACurrentStateAPI: ae3121b's behind() skips
// a backfill entry whose version equals the row's with other content ("timestamps to the
// second tie"), on the README's word that only a change log passes such entries. An API that
// lists items as they are now passes one whenever an item is written twice in one second and
// the live lane saw the first write: o1 "A" at 10:00:10 is read live, then o1 "B", stamped
// 10:00:10 too, becomes visible after the live cursor passed 10:00:11 (x1). The live lane
// never lists it; the operator runs the runbook's backfill over the period. The backfill lists
// o1 "B" @10:00:10, the API's current state, newer than the row: behind() calls it "same
// version, other content" and skips it; the backfill ends at its target and the consumer holds
// "A" for good. With --force too, which re-emits x1 and y1 (the items that did not change) and
// skips o1, the one item that did. The control stamps the late write 10:00:11: it orders after
// the row and the backfill delivers it.
func TestAdversary8G3BackfillSkipsASameSecondWriteOfACurrentStateAPI(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name  string
			late  int // the late write's second
			force bool
		}{
			{"control-later-second", 11, false},
			{"same-second", 10, false},
			{"same-second-force", 10, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "cur-" + tc.name
				api := &currentAPI{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = api.fetch
				}), nil)
				api.put("o1", 10, "A")
				api.put("x1", 11, "x")
				e.settle(eng) // rows o1 A @10, x1; live cursor 11
				api.put("o1", tc.late, "B")
				api.put("y1", 12, "y")
				e.settle(eng) // live lists y1 only: o1 B became visible behind the cursor
				if got, _ := dedupingConsumer(e.rec.events()); got["o1"] != "A" {
					t.Fatalf("setup: the live lane delivered o1 %q before the backfill", got["o1"])
				}
				if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: "", Force: tc.force}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), name, "")
				var byBackfill []string
				for _, ev := range e.rec.events() {
					if ev.Lane == laneBackfillName {
						byBackfill = append(byBackfill, ev.Identity+":"+stateOf(ev.Item))
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "B" {
					t.Errorf("G3: after the backfill the consumer holds o1 %q, the API %q; o1's deliveries: %v; the backfill delivered %v; backfill done %v",
						got["o1"], "B", deliveriesOf(e.rec.events(), "o1"), byBackfill, ki.Backfill != nil && ki.Backfill.Done)
				}
			})
		}
	})
}

// laneBackfillName is Event.Lane of the backfill lane.
const laneBackfillName = "backfill"

// ---------------------------------------------------------------------------------------
// G3: a current-state API's item restored from a backup (its version goes down).
// ---------------------------------------------------------------------------------------

// TestAdversary8G3BackfillSkipsAnItemRestoredFromABackup: an API that lists items as they are
// now serves an older version when a record is restored from a backup (the fifth review's
// TestAdversary4G3ClearSnapshotKeepsItemsOlderThanTheirRows made "nothing is dropped as stale"
// the rule for the live lane). o1 "A" @10:00:05 then "B" @10:00:20 are read live; the API is
// restored and o1 is "A" @10:00:05 again; the live cursor is past it (y1 @10:00:21). The
// runbook's remedy for a period the live lane passed, a backfill ("the live lane's logic
// again"), lists o1 "A" @05: behind() skips it (older version), with --force too; the
// consumer keeps "B", the API has "A". The control rewinds the live lane instead
// (reset-cursor, no clear-snapshot: "only real differences are emitted"): o1 "A" is
// delivered.
func TestAdversary8G3BackfillSkipsAnItemRestoredFromABackup(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, how := range []string{"control-reset-cursor", "backfill", "backfill-force"} {
			t.Run(how, func(t *testing.T) {
				e := newEnv(t, b)
				name := "restore-" + how
				api := &currentAPI{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = api.fetch
				}), nil)
				api.put("o1", 5, "A")
				e.settle(eng)
				api.put("o1", 20, "B")
				e.settle(eng)
				api.put("o1", 5, "A") // restored from the backup, as it was
				api.put("y1", 21, "y")
				e.settle(eng)
				ctx := t.Context()
				var err error
				if how == "control-reset-cursor" {
					err = eng.ResetCursor(ctx, name, "", "", false)
				} else {
					_, err = eng.Backfill(ctx, name, "", BackfillRequest{From: "", Force: how == "backfill-force"})
				}
				if err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "A" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v", got["o1"], "A", deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: a current-state sync API's tombstone (same second, or no version): the backfill skips
// the deletion.
// ---------------------------------------------------------------------------------------

// TestAdversary8G3BackfillSkipsADeletionOfACurrentStateSyncAPI: behind() skips a deletion
// entry whose version is not later than the row's, and one without a version whenever the
// row's version orders. A sync API that lists items as they are now lists a deleted item as
// its tombstone, once, and either stamps it with the deletion's time (to the second: the same
// as the last update when an item is updated and deleted in one second) or stamps nothing (the
// project's own fake API: /sync tombstones are {"id","deleted":true,"updated_seq"}, no
// "version"). o1 "A" @10:00:10 is read live; its deletion becomes visible after the live cursor
// passed it (x1 @11, y1 @12). The backfill over the period lists o1's tombstone, the API's
// current state of o1: skipped in both forms, so the consumer holds o1 "A" for good while the
// API has deleted it. The control's tombstone is stamped 10:00:11: it is applied.
func TestAdversary8G3BackfillSkipsADeletionOfACurrentStateSyncAPI(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct{ name, tomb string }{
			{"control-later-second", `{"id":"o1","deleted":true,"version":"2026-01-01T10:00:11Z"}`},
			{"same-second", `{"id":"o1","deleted":true,"version":"2026-01-01T10:00:10Z"}`},
			{"without-version", `{"id":"o1","deleted":true,"updated_seq":11}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "tomb-" + tc.name
				api := &currentAPI{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = api.fetch
					p.Tombstone = Flag("deleted")
				}), nil)
				api.put("o1", 10, "A")
				api.put("x1", 11, "x")
				e.settle(eng)
				pos := 10
				if strings.Contains(tc.tomb, "10:00:11") {
					pos = 11
				}
				api.putRaw("o1", pos, tc.tomb)
				api.put("y1", 12, "y")
				e.settle(eng)
				if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if s, alive := got["o1"]; alive {
					t.Errorf("G3: after the backfill the consumer holds o1 %q, the API deleted it; o1's deliveries: %v", s, deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: schema drift with onSchemaChange: emit is never emitted by a backfill.
// ---------------------------------------------------------------------------------------

// noteFingerprint counts state and note.
func noteFingerprint(item json.RawMessage) ([]byte, error) {
	var it struct{ State, Note string }
	_ = json.Unmarshal(item, &it)
	return []byte(it.State + "\x00" + it.Note), nil
}

// TestAdversary8G3SchemaDriftEmitSkippedByABackfill: a poller that reads changes (a timestamp
// cursor, a change log) sees an unchanged item again only when something rewinds it. After a
// schema bump with onSchemaChange: emit and a fingerprint that now counts "note", the items
// whose hash changed are to be "emitted once as updated"; the backfill from the beginning is
// how a timestamp poller reads them again. Every such item has the row's version and another
// fingerprint: behind() calls it "same version, other content" and skips it, so the drift is
// never emitted (before ae3121b the same backfill emitted it: Classify says Updated). The
// control rewinds the live lane (reset-cursor, no clear-snapshot), which emits o1 once under
// schema 1.
func TestAdversary8G3SchemaDriftEmitSkippedByABackfill(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, how := range []string{"control-reset-cursor", "backfill"} {
			t.Run(how, func(t *testing.T) {
				e := newEnv(t, b)
				name := "drift-" + how
				api := &currentAPI{}
				base := func(p *Poller) {
					p.Name = name
					p.Fetch = api.fetch
					p.Fingerprint = stateFingerprint
				}
				api.putRaw("o1", 1, `{"id":"o1","version":"2026-01-01T10:00:01Z","state":"A","note":"n1"}`)
				api.putRaw("x1", 2, `{"id":"x1","version":"2026-01-01T10:00:02Z","state":"x","note":""}`)
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *Poller) {
					p.SchemaVersion, p.EmitOnSchemaChange = 1, true
					p.Fingerprint = noteFingerprint
				}), nil)
				e.settle(eng)
				ctx := t.Context()
				var err error
				if how != "control-reset-cursor" {
					_, err = eng.Backfill(ctx, name, "", BackfillRequest{From: ""})
				} else {
					err = eng.ResetCursor(ctx, name, "", "", false)
				}
				if err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				n := 0
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" && ev.SchemaVersion == 1 && ev.Type == Updated {
						n++
					}
				}
				if n != 1 {
					t.Errorf("G3: o1's hash changed under schema 1 (emit): %d updated events under schema 1, want 1; o1's deliveries: %v", n, deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: a real change after a schema bump (rebaseline) is rebaselined silently.
// ---------------------------------------------------------------------------------------

// TestAdversary8G3RealChangeAfterASchemaBumpIsRebaselinedSilently: diff.Classify answers
// Rebaseline for every observation whose row was written under another schema and whose hash
// differs, unless onSchemaChange is emit, without looking at the version. A poller that reads
// changes (a timestamp cursor, a change log) sees an item again only when it changes, so
// after a bump with the default rebaseline the FIRST real change of every item (a new version,
// new content) is written to the rows silently and never emitted: o1 goes "A" → "B" at a new
// version and the consumer keeps "A" for good. The control is the same change without the
// bump.
func TestAdversary8G3RealChangeAfterASchemaBumpIsRebaselinedSilently(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, bump := range []bool{false, true} {
			t.Run(fmt.Sprintf("schema-bump-%v", bump), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("rebase-%v", bump)
				api := &currentAPI{}
				base := func(p *Poller) {
					p.Name = name
					p.Fetch = api.fetch
				}
				api.put("o1", 1, "A")
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *Poller) {
					if bump {
						p.SchemaVersion = 1
					}
				}), nil)
				e.settle(eng)
				api.put("o1", 2, "B")
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "B" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q (version %s); o1's deliveries: %v", got["o1"], "B", ts(2), deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: rows forgotten by clear-snapshot are rolled back by a backfill window.
// ---------------------------------------------------------------------------------------

// TestAdversary8G3ForgottenRowRolledBackByABackfillWindow: behind() is consulted only for a
// row that is not Forgotten. reset-cursor --clear-snapshot marks every row forgotten (keeping
// its version), and a row stays forgotten until the live lane lists its identity again; with a
// change log rewound to a cursor after an identity's last entry, that is never (log o1 A v1,
// x1, o1 B v2, y1, z1; reset to entry 4). A backfill of an earlier window, [o1 A, x1] (the
// sixth review's TestAdversary6G3BackfillWindowRollsBackEarlierLiveChanges, fixed by behind()
// for rows that are not forgotten) then applies o1's older entry "A" v1 over the forgotten row "B" v2: it is
// delivered as created, the rows hold v1, and nothing later lists o1 again: the consumer holds
// "A", the API "B". The control runs the same window without the clear-snapshot: "A" v1 orders
// before the row's v2 and is skipped.
func TestAdversary8G3ForgottenRowRolledBackByABackfillWindow(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, clear := range []bool{false, true} {
			t.Run(fmt.Sprintf("clear-snapshot-%v", clear), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("forgot-%v", clear)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *Poller) {
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
				if err := eng.ResetCursor(ctx, name, "", "4", clear); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				to := "2" // the window [o1 A, x1]
				if _, err := eng.Backfill(ctx, name, "", BackfillRequest{From: "", To: &to}); err != nil {
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
