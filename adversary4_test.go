package watukuy

// Reproductions of a fifth adversarial review (branch adversary4), of 917a4e9..9e4ddac
// (committed ETags cleared by every commit, ordered versions that name their change and make
// older observations stale, the :invalid index of parked invalid observations). Each test is
// named for the guarantee it breaks and FAILED on the code it was written against. Fixed by:
// every change counts in its id and nothing is dropped as stale (versions start over, change
// kind and come back); a parked invalid item replaces its identity's previous one in the same
// script, and is superseded only by an observation not known to be older (ordered versions);
// the retry of an item parked without an identity is refused once the rows know it. A sixth
// finding, pages served newest first, is a documented requirement (README: pages in change
// order), not a test.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
)

// rawListing is a full listing (snapshotDiff) of raw items, one page, no ETag.
type rawListing struct {
	mu    sync.Mutex
	items map[string]string // identity -> raw JSON
}

func (l *rawListing) set(id, raw string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if raw == "" {
		delete(l.items, id)
	} else {
		l.items[id] = raw
	}
}

func (l *rawListing) fetch(ctx context.Context, req FetchRequest) (Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p Page
	for _, id := range slices.Sorted(maps.Keys(l.items)) {
		p.Items = append(p.Items, json.RawMessage(l.items[id]))
	}
	return p, nil
}

// ---------------------------------------------------------------------------------------
// G3: "an observation whose ordered version is older than the row's is stale" drops real
// changes.
// ---------------------------------------------------------------------------------------

// TestAdversary4G3RecreatedItemWithARevisionThatStartsOverIsStale: c9c04a8 ignores an
// observation whose ordered version (both decimal) is older than the row's. A per-record
// revision counter (Rails lock_version, a "rev" that starts at 1) starts over when the
// record is deleted and created again with the same identity (a SKU, an e-mail). When no
// listing lands between the delete and the re-creation, the row still holds rev 5: the new
// record (rev 1, another content) is "stale", nothing is emitted, no row written, and it stays
// so until the new record's rev passes 5. The consumer keeps the old record. The control lets a
// listing see the deletion in between: the new life is created.
func TestAdversary4G3RecreatedItemWithARevisionThatStartsOverIsStale(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, seenGone := range []bool{true, false} {
			t.Run(fmt.Sprintf("listing-between-%v", seenGone), func(t *testing.T) {
				e := newEnv(t, b)
				l := &rawListing{items: map[string]string{"sku-1": `{"id":"sku-1","rev":5,"state":"old record"}`}}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = fmt.Sprintf("rev-%v", seenGone)
					p.Strategy = SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = Field("rev")
				}), nil)
				e.settle(eng)
				l.set("sku-1", "")
				if seenGone {
					e.settle(eng)
				}
				l.set("sku-1", `{"id":"sku-1","rev":1,"state":"new record"}`)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["sku-1"] != "new record" {
					t.Errorf("G3: the consumer holds sku-1 %q, the API %q (the re-created record was dropped as stale)", got["sku-1"], "new record")
				}
			})
		}
	})
}

// TestAdversary4G3NewVersionFieldUnderASchemaBumpIsStale: stale() compares the observation's
// version with the row's whatever the schema version the row was written under. A deploy that
// changes what the version is (from an epoch-seconds "updated" to a revision "rev") and bumps
// schemaVersion as the README asks (Schema drift) finds every row holding "1767225600": each
// new observation (rev 4, 5, ...) is older, so neither the rebaseline nor any later update is
// ever emitted or written (until rev passes 1.7e9). The control keeps an opaque version
// ("r4"), which does not order: the update is emitted.
func TestAdversary4G3NewVersionFieldUnderASchemaBumpIsStale(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, rev := range []string{`"r4"`, `4`} {
			t.Run("rev-"+strings.Trim(rev, `"`), func(t *testing.T) {
				e := newEnv(t, b)
				name := "rev-" + strings.Trim(rev, `"`)
				l := &rawListing{items: map[string]string{"x": fmt.Sprintf(`{"id":"x","updated":1767225600,"rev":%s,"state":"a"}`, rev)}}
				base := func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = Field("updated")
				}
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *Poller) {
					p.Version = Field("rev")
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

// ---------------------------------------------------------------------------------------
// G3: a death between chunks leaves two parked rows for one identity.
// ---------------------------------------------------------------------------------------

// dieAfterParkStore, once armed, lets one commit that parks invalid items but carries no state
// patch (a chunk before the last) through, then dies.
type dieAfterParkStore struct {
	core.Store
	armed atomic.Bool
}

func (d *dieAfterParkStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	r, err := d.Store.CommitPoll(ctx, l, c)
	if err == nil && len(c.Invalid) > 0 && len(c.State) == 0 && d.armed.CompareAndSwap(true, false) {
		return core.CommitResult{}, errKilled
	}
	return r, err
}

// TestAdversary4G3DeathBetweenChunksParksTwoRowsForOneIdentity: 9e4ddac keeps one parked
// invalid row per identity: parking v3 HSETs the :invalid index to v3's row, and the removal of
// v2's row (supersede → Unpark) goes with the LAST chunk of the commit. Invalid rows are
// spread over the chunks. With CommitMaxItems 1 the page [o1 v3 bad, o9 bad] parks v3 in the
// first chunk; the process dies before the last. The re-fetch finds the index at v3, the very
// item it sees, so nothing supersedes v2: o1 has two parked rows for good, and the index no
// longer names v2. The validation is fixed and the operator retries the oldest row (the order
// `parked ls` shows): v2 is committed, and its supersede removes v3's row, the API's current
// state; the cursor is past v3. The consumer holds v2, the API v3. The control is
// the same without the death.
func TestAdversary4G3DeathBetweenChunksParksTwoRowsForOneIdentity(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, die := range []bool{false, true} {
			t.Run(fmt.Sprintf("die-%v", die), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("die-%v", die)
				log := &changeLog{}
				d := &dieAfterParkStore{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.CommitMaxItems = 1
					p.Validate = func(item json.RawMessage) error {
						mu.Lock()
						defer mu.Unlock()
						if strict && strings.HasPrefix(stateOf(item), "bad") {
							return fmt.Errorf("bad state")
						}
						return nil
					}
				}), func(s core.Store) core.Store { d.Store = s; return d })
				ctx := t.Context()
				log.add("o1", 1, "new")
				e.settle(eng)
				log.add("o1", 2, "bad-v2") // parked invalid
				e.settle(eng)
				log.add("o1", 3, "bad-v3") // one page with o9: two invalid rows, two chunks
				log.add("o9", 1, "bad-o9")
				d.armed.Store(die)
				e.settle(eng)
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil {
					t.Fatal(err)
				}
				var o1 []ParkedInfo
				for _, r := range rows {
					if r.Identity == "o1" {
						o1 = append(o1, r)
					}
				}
				if len(o1) != 1 {
					t.Errorf("G3: o1 has %d parked invalid rows, want only its latest", len(o1))
				}
				mu.Lock()
				strict = false // the validation was too strict
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, name, "", o1[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad-v3" {
					rows, _ := eng.Parked().List(ctx, name, "", "invalid")
					t.Errorf("G3: after retrying o1's oldest parked row the consumer holds o1 %q, the API %q; %d rows still parked", got["o1"], "bad-v3", len(rows))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: an older observation supersedes the parked latest one.
// ---------------------------------------------------------------------------------------

// TestAdversary4G3BackfillOfOlderHistorySupersedesTheParkedLatest: supersede() runs for an
// identity's last observation in a page BEFORE the stale check, and for unchanged ones too.
// A backfill of a change log over an older range [start, 2) passes o1 v1 and v2 again (v2 is
// the row: unchanged) and removes the parked row of v3, o1's newest observation, invalid.
// The backfill stops at its target, so v3 is not seen again and not parked again; the live
// cursor is past it. Once the validation is fixed there is nothing to retry: the consumer
// holds v2, the API v3. The control is the same without the backfill.
func TestAdversary4G3BackfillOfOlderHistorySupersedesTheParkedLatest(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, backfill := range []bool{false, true} {
			t.Run(fmt.Sprintf("backfill-%v", backfill), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("backfill-%v", backfill)
				log := &changeLog{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.History = true // a change log: a backfill reads history
					p.Validate = func(item json.RawMessage) error {
						mu.Lock()
						defer mu.Unlock()
						if strict && stateOf(item) == "bad" {
							return fmt.Errorf("bad state")
						}
						return nil
					}
				}), nil)
				ctx := t.Context()
				log.add("o1", 1, "new")
				log.add("o1", 2, "paid")
				e.settle(eng)
				log.add("o1", 3, "bad") // parked invalid
				e.settle(eng)
				if backfill {
					to := "2" // the first page of the log: v1, v2
					if _, err := eng.Backfill(ctx, name, "", BackfillRequest{From: "", To: &to}); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				strict = false
				mu.Unlock()
				for _, r := range rows {
					if _, err := eng.Parked().Retry(ctx, name, "", r.ID); err != nil {
						t.Fatal(err)
					}
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q (%d parked rows left to retry after the backfill)", got["o1"], "bad", len(rows))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G2: change 0 for a version that moved forward repeats an id.
// ---------------------------------------------------------------------------------------

// TestAdversary4G2ForwardAgainAfterAnOpaqueVersionRepeatsAnID: changeCount gives change 0 to
// any observation whose version orders after the row's, and the id is (vf, schema, life,
// change). An identity's version that is not always of one kind (an integer revision, and
// "draft" or a timestamp while the record is being edited) breaks the chain: 6/x (change 0) →
// "draft"/y (does not order: 1) → 5/z (does not order with "draft": 2) → 6/x (orders after 5:
// change 0), the id of the first event. A consumer that dedupes by id drops it and keeps z,
// the API x.
func TestAdversary4G2ForwardAgainAfterAnOpaqueVersionRepeatsAnID(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		l := &rawListing{items: map[string]string{}}
		eng := e.engine(e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.ConfirmDeletes = 1
			p.Fetch = l.fetch
			p.Version = Field("version")
		}), nil)
		for _, s := range [][2]string{{`6`, "x"}, {`"draft"`, "y"}, {`5`, "z"}, {`6`, "x"}} {
			l.set("o1", fmt.Sprintf(`{"id":"o1","version":%s,"state":%q}`, s[0], s[1]))
			e.settle(eng)
		}
		evs := e.rec.events()
		got, repeats := dedupingConsumer(evs)
		for _, r := range repeats {
			t.Logf("repeat: %s", r)
		}
		if len(evs) != 4 || got["o1"] != "x" {
			t.Errorf("G2: %d events for 4 changes; a consumer that dedupes by id holds o1 %q, the API %q", len(evs), got["o1"], "x")
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: clear-snapshot does not re-emit items older than their forgotten rows.
// ---------------------------------------------------------------------------------------

// TestAdversary4G3ClearSnapshotKeepsItemsOlderThanTheirRows: reset-cursor --clear-snapshot
// promises that every item is emitted as created again (README, ResetCursor). Its use is a
// consumer or an API that must be brought back in step, e.g. after the API was restored from a
// backup: its records are back at older revisions. The forgotten rows keep their versions and
// stale() runs before a forgotten row is taken as absent: every restored item (rev 3, below
// the row's rev 5) is "stale", nothing is emitted, the rows stay forgotten, and the consumer
// keeps the records the API no longer has. The control clears the snapshot of an API that was
// not restored: both items are emitted again.
func TestAdversary4G3ClearSnapshotKeepsItemsOlderThanTheirRows(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, restored := range []bool{false, true} {
			t.Run(fmt.Sprintf("restored-%v", restored), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("restored-%v", restored)
				l := &rawListing{items: map[string]string{}}
				for _, id := range []string{"a", "b"} {
					l.set(id, fmt.Sprintf(`{"id":%q,"rev":5,"state":"rev 5"}`, id))
				}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = Field("rev")
				}), nil)
				e.settle(eng)
				if restored {
					for _, id := range []string{"a", "b"} {
						l.set(id, fmt.Sprintf(`{"id":%q,"rev":3,"state":"rev 3"}`, id))
					}
					e.settle(eng)
				}
				before := len(e.rec.events())
				if err := eng.ResetCursor(t.Context(), name, "", "", true); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				created := 0
				for _, ev := range e.rec.events()[before:] {
					if ev.Type == Created {
						created++
					}
				}
				got, _ := dedupingConsumer(e.rec.events())
				l.mu.Lock()
				api := map[string]string{"a": stateOf(json.RawMessage(l.items["a"])), "b": stateOf(json.RawMessage(l.items["b"]))}
				l.mu.Unlock()
				if created != 2 {
					t.Errorf("G3: clear-snapshot emitted %d created events for 2 items; the consumer holds %v, the API %v", created, got, api)
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: a parked invalid item without an identity is never superseded.
// ---------------------------------------------------------------------------------------

// TestAdversary4G3RetryOfAnItemParkedWithoutIdentityTakesItBack: an item whose identity
// could not be read is parked with identity "" and so is not in the :invalid index: no later
// observation supersedes it. The identity path was wrong ("ID" in one release of the API), the
// deploy that fixes it reads o1's later change ("b") from the feed; the operator then retries
// the parked rows, as the fix invites: the retry of the older item ("a") is committed over
// "b" as an update (no version to call it stale). The feed's cursor is past "b": the consumer
// holds "a", the API "b". The control retries before o1 changes again. Fixed: such a retry is
// refused when the identity already has a row (or a remembered deletion), unless its version
// orders after the row's.
func TestAdversary4G3RetryOfAnItemParkedWithoutIdentityTakesItBack(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, laterChange := range []bool{false, true} {
			t.Run(fmt.Sprintf("later-change-%v", laterChange), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("noid-%v", laterChange)
				f := &changeLog{}
				base := func(p *Poller) {
					p.Name = name
					p.Fetch = f.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
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
				want := "a"
				if laterChange {
					f.addRaw(`{"id":"o1","state":"b"}`)
					want = "b"
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				// Fixed: with a later change of o1 committed, the retry is refused (the row
				// may be older than o1's), and the row stays for a discard.
				if _, err := eng.Parked().Retry(ctx, name, "", rows[0].ID); laterChange != (err != nil) {
					t.Fatalf("retry: %v; want it refused only after the later change", err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != want {
					t.Errorf("G3: the consumer holds o1 %q, the API %q (a retried identity-less row took it back)", got["o1"], want)
				}
			})
		}
	})
}
