package watukuy

// Schema changes (Poller.SchemaVersion): a bump rebaselines unchanged items silently or emits
// their drift once, and neither hides a real change (G3) nor invents one (G7).

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A deploy that changes what the version is (an epoch "updated" to a revision "rev") and bumps
// the schema: observations under the new field are not older than rows of the old one, so the
// next update is emitted (the control's version "r4" does not order).
func TestG3NewVersionFieldUnderASchemaBumpIsNotStale(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, rev := range []string{`"r4"`, `4`} {
			t.Run("rev-"+strings.Trim(rev, `"`), func(t *testing.T) {
				e := newEnv(t, b)
				name := "rev-" + strings.Trim(rev, `"`)
				l := &rawListing{items: map[string]string{"x": fmt.Sprintf(`{"id":"x","updated":1767225600,"rev":%s,"state":"a"}`, rev)}}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = watukuytype.Field("updated")
				}
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					p.Version = watukuytype.Field("rev")
					p.SchemaVersion, p.EmitOnSchemaChange = 2, true
				}), nil)
				e.settle(eng)
				next := strings.Replace(rev, "4", "5", 1)
				l.set("x", fmt.Sprintf(`{"id":"x","updated":1767225700,"rev":%s,"state":"b"}`, next))
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["x"] != "b" {
					t.Errorf("G3: the consumer holds x %q, the API %q (every observation under the new version field is stale)", got["x"], "b")
				}
			})
		}
	})
}

// The first real change of an item after a bump with the default rebaseline (a new version, new
// content) is emitted, not written to the rows silently (the control has no bump).
func TestG3RealChangeAfterASchemaBumpIsEmitted(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, bump := range []bool{false, true} {
			t.Run(fmt.Sprintf("schema-bump-%v", bump), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("rebase-%v", bump)
				api := &currentAPI{}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = api.fetch
				}
				api.put("o1", 1, "A")
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
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

// noteFingerprint counts state and note.
func noteFingerprint(item json.RawMessage) ([]byte, error) {
	var it struct{ State, Note string }
	_ = json.Unmarshal(item, &it)
	return []byte(it.State + "\x00" + it.Note), nil
}

// After a bump with emit and a fingerprint that now counts "note", a backfill that reads the
// unchanged items again emits o1's drift once, as updated, as a rewind of the live lane does
// (the control).
func TestG3BackfillEmitsSchemaDrift(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, how := range []string{"control-reset-cursor", "backfill"} {
			t.Run(how, func(t *testing.T) {
				e := newEnv(t, b)
				name := "drift-" + how
				api := &currentAPI{}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = api.fetch
					p.Fingerprint = stateFingerprint
				}
				api.putRaw("o1", 1, `{"id":"o1","version":"2026-01-01T10:00:01Z","state":"A","note":"n1"}`)
				api.putRaw("x1", 2, `{"id":"x1","version":"2026-01-01T10:00:02Z","state":"x","note":""}`)
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					p.SchemaVersion, p.EmitOnSchemaChange = 1, true
					p.Fingerprint = noteFingerprint
				}), nil)
				e.settle(eng)
				ctx := t.Context()
				var err error
				if how != "control-reset-cursor" {
					_, err = eng.Backfill(ctx, watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""})
				} else {
					err = eng.ResetCursor(ctx, watukuytype.Key{Poller: name, Partition: ""}, "", false)
				}
				if err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				n := 0
				for _, ev := range e.rec.events() {
					if ev.Identity == "o1" && ev.SchemaVersion == 1 && ev.Type == watukuytype.Updated {
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

// A bump whose version reads differently (a version added at the bump, the same instant with
// milliseconds) emits nothing under the default rebaseline when nothing changed in the API (the
// control reads the version as before).
func TestG7SchemaBumpWithAVersionThatReadsDifferentlyEmitsNothing(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name       string
			oldVersion bool   // schema 0 reads Field("version")
			newFormat  string // schema 1's representation of the version ("" = as before)
		}{
			{"control-same-version", true, ""},
			{"version-added-at-the-bump", false, ""},
			{"version-in-milliseconds", true, ".000Z"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "bumpv-" + tc.name
				api := &listingAPI{}
				item := func(id, state, suffix string) string {
					v := "2026-01-01T10:00:01Z"
					if suffix != "" {
						v = strings.TrimSuffix(v, "Z") + suffix
					}
					return fmt.Sprintf(`{"id":%q,"version":%q,"state":%q}`, id, v, state)
				}
				for _, id := range []string{"o1", "o2", "o3"} {
					api.put(id, item(id, "A", ""))
				}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
					p.Fetch = api.fetch
					if !tc.oldVersion {
						p.Version = nil
					}
				}
				e.settle(e.engine(e.poller(base), nil))
				before := len(e.rec.events())
				// The deploy: schema 1 (default rebaseline), the API's new representation.
				for _, id := range []string{"o1", "o2", "o3"} {
					api.put(id, item(id, "A", tc.newFormat))
				}
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					p.SchemaVersion = 1
					p.Version = watukuytype.Field("version")
				}), nil)
				e.settle(eng)
				var after []string
				for _, ev := range e.rec.events()[before:] {
					after = append(after, fmt.Sprintf("%s:%s@%s", ev.Type, ev.Identity, ev.Version))
				}
				if len(after) != 0 {
					t.Errorf("G7: nothing changed in the API, the schema bump (rebaseline) emitted %d events: %v", len(after), after)
				}
			})
		}
	})
}

// Versions of another format across a bump (epoch seconds to milliseconds, RFC 3339 to epoch
// seconds, a version dropped) are no evidence of a change: with nothing changed in the API the
// bump emits nothing (G7) and gives no state a second id (G2).
func TestG7SchemaBumpToMillisecondsEmitsNothing(t *testing.T) {
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
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
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
				e.settle(e.engine(e.poller(base, func(p *watukuytype.Poller) {
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

// A history backfill after a bump, over a log with two entries of o1 in one second ("A", then
// "B", the row), emits nothing and takes nothing back, with rebaseline or emit: the rows still
// hold "B" (the controls run without the bump).
func TestG3HistoryBackfillAcrossASchemaBumpKeepsTheRow(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name   string
			bump   bool
			emit   bool
			window bool // the backfill ends after o1 "A"
		}{
			{"control-no-bump", false, false, false},
			{"control-no-bump-window", false, false, true},
			{"bump-rebaseline", true, false, false},
			{"bump-emit-window", true, true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, b)
				name := "histbump-" + tc.name
				log := &changeLog{}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.History = true
					p.Fetch = log.fetch
					p.Fingerprint = stateFingerprint
				}
				log.addRaw(`{"id":"o1","version":"2026-01-01T10:00:10Z","state":"A"}`)
				log.addRaw(`{"id":"o1","version":"2026-01-01T10:00:10Z","state":"B"}`)
				log.addRaw(`{"id":"x1","version":"2026-01-01T10:00:11Z","state":"x"}`)
				log.addRaw(`{"id":"y1","version":"2026-01-01T10:00:12Z","state":"y"}`)
				e.settle(e.engine(e.poller(base), nil))
				before := len(e.rec.events())
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					if tc.bump {
						p.SchemaVersion, p.EmitOnSchemaChange = 1, tc.emit
					}
				}), nil)
				e.settle(eng)
				req := watukuytype.BackfillRequest{From: ""}
				if tc.window {
					to := "1" // [o1 A]
					req.To = &to
				}
				if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, req); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				var by []string
				for _, ev := range e.rec.events()[before:] {
					by = append(by, fmt.Sprintf("%s:%s:%s:%s", ev.Lane, ev.Type, ev.Identity, stateOf(ev.Item)))
				}
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "B" || len(by) != 0 {
					t.Errorf("G3/G2: nothing changed since the live lane read the log; the backfill delivered %v; the consumer holds o1 %q, the API %q", by, got["o1"], "B")
				}
				// The rows, through the next live read of o1's current content: a row taken
				// back to "A" makes an unchanged "B" an update.
				mark := len(e.rec.events())
				if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, "1", false); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				var relive []string
				for _, ev := range e.rec.events()[mark:] {
					if ev.Identity == "o1" {
						relive = append(relive, fmt.Sprintf("%s:%s:%s", ev.Lane, ev.Type, stateOf(ev.Item)))
					}
				}
				if len(relive) != 0 {
					t.Errorf("G3: the rows no longer hold o1 %q: re-reading its last entry emitted %v", "B", relive)
				}
			})
		}
	})
}

// An item restored from a backup (its version went down) after a bump is emitted, by a backfill
// over a current-state API and by a full listing: the consumer ends at the restored "A" (the
// controls run without the bump).
func TestG3RestoreAcrossASchemaBumpIsEmitted(t *testing.T) {
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
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = api.fetch
					if tc.snapshot {
						p.Strategy, p.Fetch = watukuytype.SnapshotDiff, list.fetch
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
				eng = e.engine(e.poller(base, func(p *watukuytype.Poller) {
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
					if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, watukuytype.BackfillRequest{From: ""}); err != nil {
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
