package watukuy

// A backfill over an API that lists items as they are now (a feed over updated_since) applies
// what it reads as the present (G3): writes, deletions and versions that went down.

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// laneBackfillName is Event.Lane of the backfill lane.
const laneBackfillName = "backfill"

// A write that became visible behind the live cursor, stamped in the same second as the row's
// version (o1 "B" at 10:00:10, like "A"), is applied by the backfill, with --force too (the
// control stamps it a second later).
func TestG3BackfillAppliesASameSecondWriteOfACurrentStateAPI(t *testing.T) {
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
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
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
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: "", Force: tc.force}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
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

// An item restored from a backup (its version went down) behind the live cursor is applied by a
// backfill, with --force too, as a rewind of the live lane does (the control): the consumer
// ends at the restored "A".
func TestG3BackfillAppliesAnItemRestoredFromABackup(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, how := range []string{"control-reset-cursor", "backfill", "backfill-force"} {
			t.Run(how, func(t *testing.T) {
				e := newEnv(t, b)
				name := "restore-" + how
				api := &currentAPI{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
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
					err = eng.ResetCursor(ctx, watukuytype.Key{Poller: name, Partition: ""}, "", false)
				} else {
					_, err = eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: "", Force: how == "backfill-force"})
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

// A sync API's tombstone visible behind the live cursor, stamped in the same second as the last
// update or not stamped at all, is applied by the backfill: o1 is deleted (the control stamps
// it a second later).
func TestG3BackfillAppliesADeletionOfACurrentStateSyncAPI(t *testing.T) {
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
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = api.fetch
					p.Tombstone = watukuytype.Flag("deleted")
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
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
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

// A default backfill supersedes a parked invalid observation as the live lane does: o1 "C" read
// by the backfill replaces the parked "B", whose retry then cannot take the consumer back (the
// control reads "C" live).
func TestG3DefaultBackfillSupersedesAParkedItem(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name string
			pos  int // the position of o1 "C"
		}{
			{"control-read-live", 13},
			{"read-by-backfill", 12},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "parkbf-" + tc.name
				api := &currentAPI{}
				var strict atomic.Bool
				strict.Store(true)
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = api.fetch
					p.Version = nil // version-less: state is the content
					p.Fingerprint = stateFingerprint
					p.Validate = rejectBad(&strict)
				}), nil)
				ctx := t.Context()
				api.putRaw("o1", 10, `{"id":"o1","state":"A"}`)
				api.putRaw("x1", 11, `{"id":"x1","state":"x"}`)
				e.settle(eng)
				api.putRaw("o1", 12, `{"id":"o1","state":"B","bad":true}`)
				e.settle(eng) // o1 "B" parked; live cursor 12
				parked, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(parked) != 1 {
					t.Fatalf("setup: parked %v, %v", parked, err)
				}
				api.putRaw("o1", tc.pos, `{"id":"o1","state":"C"}`)
				api.putRaw("y1", 14, `{"id":"y1","state":"y"}`)
				e.settle(eng)
				if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				if got, _ := dedupingConsumer(e.rec.events()); got["o1"] != "C" {
					t.Fatalf("setup: after the backfill the consumer holds o1 %q, want C; %v", got["o1"], deliveriesOf(e.rec.events(), "o1"))
				}
				strict.Store(false) // the operator fixes the validation
				n, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, parked[0].ID)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "C" {
					t.Errorf("G3: after the parked retry (n=%d, err=%v) the consumer holds o1 %q, the API %q; o1's deliveries: %v",
						n, err, got["o1"], "C", deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}
