package watukuy

// Reproductions of an eleventh adversarial review (branch adversary10), of 5967426 (a schema
// bump counts a version that moved on: diff.versionMoved — ordered: later, opaque: different,
// none before: no evidence; a backfill over the present parks and supersedes like the live
// lane; behind() without the schema clause). Each test is named for the guarantee it breaks
// and FAILED on the code it was written against; each has a control that passes. Fixed by:
// versions of another format (RFC 3339 and integers, seconds and milliseconds, one side empty)
// are no evidence across a bump; an ordered version that moved either way is a change.

import (
	"fmt"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

// ---------------------------------------------------------------------------------------
// G7 / G2: a schema bump whose version changes representation (epoch seconds → epoch
// milliseconds, RFC 3339 → epoch) emits every unchanged item.
// ---------------------------------------------------------------------------------------

// TestAdversary10G7SchemaBumpToMillisecondsEmitsEveryItem: 5967426's versionMoved fixes the
// ninth review's case (the same instant in RFC 3339 with and without fractional seconds) by
// comparing versions with CompareVersions. But CompareVersions orders two decimal strings as
// integers, so when an API's v2 (the classic reason for a bump) writes the same instant in
// epoch milliseconds instead of epoch seconds, 1767261601000 is "later" than 1767261601 and
// every item is a "real change"; and RFC 3339 → epoch seconds (an opaque pair: one decimal,
// one time) is "different", so a real change too. With the default onSchemaChange:
// rebaseline and nothing changed in the API, a snapshotDiff listing then emits `updated` for
// every item under a new id (G7: changes that did not happen; G2: a second id for one
// state). The mirror of the ninth review's "a version added at the bump" (no evidence) is not
// handled either: a version DROPPED at the bump ("5" → "") is "different", so every item is
// emitted. The control bumps with the version read as before: rebaselined, no event.
func TestAdversary10G7SchemaBumpToMillisecondsEmitsEveryItem(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name     string
			old, new string // the same instant, before and after the bump
			drop     bool   // schema 1 reads no version (the field was dropped from the config)
		}{
			{"control-same-representation", "1767261601", "1767261601", false},
			{"epoch-seconds-to-milliseconds", "1767261601", "1767261601000", false},
			{"rfc3339-to-epoch-seconds", "2026-01-01T10:00:01Z", "1767261601", false},
			{"version-dropped-at-the-bump", "1767261601", "1767261601", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "bumpms-" + tc.name
				api := &listingAPI{}
				item := func(id, v string) string {
					return fmt.Sprintf(`{"id":%q,"version":%q,"state":"A"}`, id, v)
				}
				ids := []string{"o1", "o2", "o3"}
				for _, id := range ids {
					api.put(id, item(id, tc.old))
				}
				base := func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.Fetch = api.fetch
				}
				e.settle(e.engine(e.poller(base), nil))
				before := len(e.rec.events())
				if before != len(ids) {
					t.Fatalf("setup: %d events for %d items", before, len(ids))
				}
				// The deploy: the API's v2 writes the same instants another way; schema 1,
				// default rebaseline.
				for _, id := range ids {
					api.put(id, item(id, tc.new))
				}
				e.settle(e.engine(e.poller(base, func(p *Poller) {
					p.SchemaVersion = 1
					if tc.drop {
						p.Version = nil
					}
				}), nil))
				var after []string
				for _, ev := range e.rec.events()[before:] {
					after = append(after, fmt.Sprintf("%s:%s@%s:%s", ev.Type, ev.Identity, ev.Version, ev.ID))
				}
				if len(after) != 0 {
					t.Errorf("G7/G2: nothing changed in the API, the schema bump (rebaseline) emitted %d events: %v", len(after), after)
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: an item restored from a backup (its version goes down) after a schema bump is
// rebaselined silently, by the backfill the README prescribes and by a full listing.
// ---------------------------------------------------------------------------------------

// TestAdversary10G3RestoreAcrossASchemaBumpIsRebaselinedSilently: the README promises that a
// backfill over an API listing items as they are now "applies what it reads: that is the
// present, even when its version went down (a restore from a backup)" (the eighth review's
// TestAdversary8G3BackfillSkipsAnItemRestoredFromABackup). versionMoved calls an ordered
// version a change only when it is LATER, so across a schema bump a version that went down
// with other content is Rebaseline: the row takes "A" @05 and the new schema, and no event
// is emitted. Under a timestamp cursor the live lane never re-reads unchanged items, so rows
// stay of the old schema for as long as the items do not change: the window is not one
// cycle but open-ended. o1 "A" @05 then "B" @20 are read live; schema 1 is deployed (default
// rebaseline); o1 is restored to "A" @05; the backfill reads it and emits nothing: the
// consumer keeps "B" for good (the rows say "A", so no later read fixes it). A snapshotDiff
// listing (or the reconcile lane) does the same. The controls run without the bump: "A" is
// delivered.
func TestAdversary10G3RestoreAcrossASchemaBumpIsRebaselinedSilently(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name     string
			bump     bool
			snapshot bool // a full listing (snapshotDiff) instead of the backfill
		}{
			{"control-backfill-no-bump", false, false},
			{"control-snapshot-no-bump", false, true},
			{"backfill-after-bump", true, false},
			{"snapshot-after-bump", true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "restorebump-" + tc.name
				api := &currentAPI{}
				list := &listingAPI{}
				put := func(id string, pos int, state string) {
					api.put(id, pos, state)
					list.put(id, fmt.Sprintf(`{"id":%q,"version":%q,"state":%q}`, id, ts(pos), state))
				}
				base := func(p *Poller) {
					p.Name = name
					p.Fetch = api.fetch
					if tc.snapshot {
						p.Strategy, p.Fetch = SnapshotDiff, list.fetch
					}
				}
				eng := e.engine(e.poller(base), nil)
				put("o1", 5, "A")
				e.settle(eng)
				put("o1", 20, "B")
				e.settle(eng)
				if got, _ := dedupingConsumer(e.rec.events()); got["o1"] != "B" {
					t.Fatalf("setup: the consumer holds o1 %q, want B", got["o1"])
				}
				// The deploy of schema 1 (default rebaseline). Nothing re-reads o1 under a
				// timestamp cursor, so its row stays of schema 0.
				eng = e.engine(e.poller(base, func(p *Poller) {
					if tc.bump {
						p.SchemaVersion = 1
					}
				}), nil)
				if tc.snapshot {
					// A full listing re-reads every item each cycle: the restore lands before
					// the first cycle of the new schema.
					put("o1", 5, "A") // restored from the backup, as it was
					e.settle(eng)
				} else {
					e.settle(eng)
					put("o1", 5, "A") // restored from the backup, as it was
					put("y1", 21, "y")
					e.settle(eng)
				}
				if !tc.snapshot {
					if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: ""}); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "A" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; o1's deliveries: %v", got["o1"], "A", deliveriesOf(e.rec.events(), "o1"))
				}
			})
		}
	})
}
