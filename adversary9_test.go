package watukuy

// Reproductions of a tenth adversarial review (branch adversary9), of ae7a0fd (Poller.History:
// only a backfill over history is placed by version, by default a backfill applies what it
// reads, touched identities aside; diff.Classify takes the version: across a schema bump a new
// version is Updated, the same version with a new hash Rebaseline unless emit). Each test is
// named for the guarantee it breaks and FAILS on the code it was written against; each has a
// control that passes.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

// listingAPI is a full listing (snapshotDiff): every item as it is now, one page.
type listingAPI struct {
	mu    sync.Mutex
	items map[string]string
}

func (a *listingAPI) put(id, raw string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.items == nil {
		a.items = map[string]string{}
	}
	a.items[id] = raw
}

func (a *listingAPI) fetch(ctx context.Context, req FetchRequest) (Page, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.items))
	for id := range a.items {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	items := make([]json.RawMessage, len(ids))
	for i, id := range ids {
		items[i] = json.RawMessage(a.items[id])
	}
	return Page{Items: items}, nil
}

// ---------------------------------------------------------------------------------------
// G7: a schema bump whose version reads differently (a new version field, a new date format)
// emits every unchanged item as updated, in the live lane.
// ---------------------------------------------------------------------------------------

// TestAdversary9G7SchemaBumpWithAVersionThatReadsDifferentlyEmitsEveryItem: ae7a0fd's
// Classify calls a row of another schema Updated whenever `r.Version != version` (string
// inequality), as "a real change". But a schema bump is exactly when the way a version reads
// changes: the bump adds a Version where there was none (rows hold ""), or the API's new
// representation writes the same instant another way ("…:01Z" → "…:01.000Z", which
// CompareVersions itself calls equal). With the default onSchemaChange: rebaseline ("rows are
// rebaselined silently") and NOTHING changed in the API, a snapshotDiff listing (every item
// every cycle) then emits `updated` for every item: a flood of changes that did not happen.
// The control bumps the schema with the version read as before: rebaselined, no event.
func TestAdversary9G7SchemaBumpWithAVersionThatReadsDifferentlyEmitsEveryItem(t *testing.T) {
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
				base := func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
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
				eng := e.engine(e.poller(base, func(p *Poller) {
					p.SchemaVersion = 1
					p.Version = Field("version")
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

// ---------------------------------------------------------------------------------------
// G3: a default backfill reads the present but does not supersede a parked invalid item; its
// retry then takes the identity back.
// ---------------------------------------------------------------------------------------

// TestAdversary9G3DefaultBackfillLeavesAParkedItemThatRollsBackOnRetry: since ae7a0fd a
// backfill over an API that lists items as they are now "applies what it reads, as the
// present", but process() still treats it as the past for parked rows: it never supersedes
// a parked invalid observation ("A backfill's past does neither"). o1 "A" is read live; o1
// "B" (invalid) is read live and parked; o1 "C" (valid) becomes visible behind the live
// cursor, and the runbook's backfill delivers it. The parked "B" stays, still named by the
// index as o1's latest observation, so when the operator fixes the validation and retries it,
// placeRetry accepts it (a version-less row) and "B" is committed over "C": the consumer
// (and the rows) hold "B" for good, the API has "C". The control makes "C" visible to the live
// lane, which supersedes the parked "B": its retry commits nothing.
func TestAdversary9G3DefaultBackfillLeavesAParkedItemThatRollsBackOnRetry(t *testing.T) {
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
				eng := e.engine(e.poller(func(p *Poller) {
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
				parked, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(parked) != 1 {
					t.Fatalf("setup: parked %v, %v", parked, err)
				}
				api.putRaw("o1", tc.pos, `{"id":"o1","state":"C"}`)
				api.putRaw("y1", 14, `{"id":"y1","state":"y"}`)
				e.settle(eng)
				if _, err := eng.Backfill(ctx, name, "", BackfillRequest{From: ""}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				if got, _ := dedupingConsumer(e.rec.events()); got["o1"] != "C" {
					t.Fatalf("setup: after the backfill the consumer holds o1 %q, want C; %v", got["o1"], deliveriesOf(e.rec.events(), "o1"))
				}
				strict.Store(false) // the operator fixes the validation
				n, err := eng.Parked().Retry(ctx, name, "", parked[0].ID)
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

// ---------------------------------------------------------------------------------------
// G3 / G2: a history backfill across a schema bump writes a same-second older entry over the
// row.
// ---------------------------------------------------------------------------------------

// TestAdversary9G3HistoryBackfillAcrossASchemaBumpTakesATieBack: ae7a0fd's behind() skips
// "the same version with other content" only when the row was written under the current
// schema, so that drift shows after a bump. A change log whose versions are timestamps to the
// second (the README's own example of a tie) has two entries of o1 in one second: "A" then
// "B"; the live lane wrote "B". After any schema bump, a History backfill reads "A" @10:00:10:
// not behind (the row is of schema 0), and Classify (same version, other hash) rebaselines
// the row to "A" silently, or with emit delivers updated "A", taking the consumer back. The
// row is now of schema 1, so the next entry, "B" @10:00:10, IS behind (same version, other
// content, same schema) and is skipped: the rows hold "A" for good while the API (and, with
// rebaseline, the consumer) hold "B"; with emit a window ending after "A" leaves the consumer
// at "A". The next read of o1's unchanged "B" (here a reset-cursor to its entry) is then
// emitted as a new change with a new id. The controls run the same backfills without the
// bump: "A" is skipped, nothing is emitted.
func TestAdversary9G3HistoryBackfillAcrossASchemaBumpTakesATieBack(t *testing.T) {
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
				base := func(p *Poller) {
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
				eng := e.engine(e.poller(base, func(p *Poller) {
					if tc.bump {
						p.SchemaVersion, p.EmitOnSchemaChange = 1, tc.emit
					}
				}), nil)
				e.settle(eng)
				req := BackfillRequest{From: ""}
				if tc.window {
					to := "1" // [o1 A]
					req.To = &to
				}
				if _, err := eng.Backfill(t.Context(), name, "", req); err != nil {
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
				if err := eng.ResetCursor(t.Context(), name, "", "1", false); err != nil {
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
