package watukuy

// Reproductions of a fourth adversarial review (branch adversary3), of the fixes in 4c880b1..
// 95b43d4 (committed ETags, forgotten rows, versioned ids, parked invalid base). Each test is
// named for the guarantee it breaks and FAILS on the code it was written against; see the
// report for the mechanism of each.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
)

// ---------------------------------------------------------------------------------------
// G3: a parked invalid item retried after a LATER invalid version of the same identity.
// ---------------------------------------------------------------------------------------

// TestAdversary3G3RetryOfTwoParkedVersionsDropsTheCurrentOne: o1 v2 and o1 v3 were both parked
// invalid against the same base (o1 at life 0, change 1: an invalid item does not move the
// row). Retried oldest first (the order `parked ls` shows them), v2 was committed and v3, the
// API's current state, was then dropped as "superseded"; the cursor was past v3, so the
// consumer kept v2. Fixed: an identity has at most one parked invalid observation, its latest
// (the :invalid index); v3 supersedes v2 when it is parked, so only v3 can be retried, and a
// retry of it converges.
func TestAdversary3G3RetryOfTwoParkedVersionsDropsTheCurrentOne(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var strict atomic.Bool
		strict.Store(true)
		eng := e.engine(e.poller(func(p *Poller) {
			p.Validate = rejectBad(&strict)
		}), nil)
		ctx := t.Context()
		e.api.Put("o1", map[string]any{"n": 1})
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 2, "bad": true}) // v2: parked invalid
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 3, "bad": true}) // v3: parked invalid, supersedes v2
		e.settle(eng)
		rows, err := eng.Parked().List(ctx, "orders", "", "invalid")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: want only the latest invalid observation, got %v, %v", rows, err)
		}
		var it struct {
			N int `json:"n"`
		}
		if err := json.Unmarshal(rows[0].Item, &it); err != nil || it.N != 3 {
			t.Fatalf("parked item: want v3 (n=3), got %s (%v)", rows[0].Item, err)
		}
		strict.Store(false) // the validation was too strict
		if n, err := eng.Parked().Retry(ctx, "orders", "", rows[0].ID); err != nil || n != 1 {
			t.Fatalf("retry: %d, %v", n, err)
		}
		e.settle(eng)
		checkFinal(t, e)
	})
}

// ---------------------------------------------------------------------------------------
// G2: a versioned poller's ids leave the count out: a version that comes back repeats an id.
// ---------------------------------------------------------------------------------------

// TestAdversary3G2VersionThatComesBackRepeatsAnID: a versioned poller's created/updated ids
// are (identity, "observed", hash(version, fingerprint), schema, life) and nothing else, so
// one content under one version has ONE id per life, however often the identity comes back to
// it. Versions that come back are common: a content checksum used as the version (md5, an
// item-level etag), a revision restored from history. closed (md5 c) → open (md5 o) → closed
// (md5 c): the third event has the first one's id; a consumer that dedupes by id drops it and
// keeps "open", while the API has "closed". (With the count in the id, as before 2d14693 and
// as a version-less poller still has it, the three ids differ.) The control is the same
// poller without a version.
func TestAdversary3G2VersionThatComesBackRepeatsAnID(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, versioned := range []bool{false, true} {
			t.Run(fmt.Sprintf("versioned-%v", versioned), func(t *testing.T) {
				e := newEnv(t, b)
				var mu sync.Mutex
				state := ""
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = fmt.Sprintf("versioned-%v", versioned)
					p.Strategy = SnapshotDiff
					p.Version = nil
					if versioned {
						p.Version = Field("md5")
					}
					p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
						mu.Lock()
						defer mu.Unlock()
						return Page{Items: []json.RawMessage{json.RawMessage(fmt.Sprintf(
							`{"id":"o1","md5":"md5-of-%s","state":%q}`, state, state))}}, nil
					}
				}), nil)
				for _, s := range []string{"closed", "open", "closed"} {
					mu.Lock()
					state = s
					mu.Unlock()
					e.settle(eng)
				}
				evs := e.rec.events()
				if len(evs) != 3 {
					t.Fatalf("%d events for 3 observed changes", len(evs))
				}
				got, repeats := dedupingConsumer(evs)
				for _, r := range repeats {
					t.Logf("repeat: %s", r)
				}
				if got["o1"] != "closed" {
					t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q (%d ids repeated)", got["o1"], "closed", len(repeats))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: writes that change rows without clearing the committed ETag.
// ---------------------------------------------------------------------------------------

// TestAdversary3G3ParkedRetryUnderACommittedTag: "every commit that changes rows clears the
// committed tag in the same write" holds for the live lane only. A parked invalid item
// retried by an operator is committed by retryInvalid with c.commit, which never touches
// etag.live. 0y is listed invalid and parked (base "gone/0"), then deleted by the API; the
// next listing {0a} is quiet and commits its tag T. The validation is fixed and 0y retried:
// its identity never had a row, so the base still matches and 0y is created (and delivered).
// The rows hold {0a, 0y}, the tag still names {0a}: every later listing is answered 304 and
// 0y's delete is never emitted. The control is the same listing without ETags: the next
// listing deletes 0y.
func TestAdversary3G3ParkedRetryUnderACommittedTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tagged := range []bool{false, true} {
			t.Run(fmt.Sprintf("etags-%v", tagged), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("tags-%v", tagged)
				l := &taggedListing{items: map[string]string{"0a": "1", "0y": "1"}, pages: 1}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.Fetch
					if !tagged {
						p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
							pg, err := l.Fetch(ctx, req)
							pg.ETag = ""
							return pg, err
						}
					}
					p.Validate = func(item json.RawMessage) error {
						mu.Lock()
						defer mu.Unlock()
						var it struct {
							ID string `json:"id"`
						}
						_ = json.Unmarshal(item, &it)
						if strict && it.ID == "0y" {
							return fmt.Errorf("bad item")
						}
						return nil
					}
				}), nil)
				ctx := t.Context()
				e.settle(eng) // 0a created, 0y parked invalid
				l.set("0y", "")
				e.settle(eng) // {0a}: quiet, the tag is committed
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				mu.Lock()
				strict = false
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, name, "", rows[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				for i := 0; i < 3; i++ { // a few more listings, for good measure
					e.clock.Advance(3 * time.Minute)
					e.tick(eng)
				}
				ki, _ := eng.Inspect(ctx, name, "")
				t.Logf("last poll: %s", ki.LastPoll)
				got := e.rec.final()
				l.mu.Lock()
				defer l.mu.Unlock()
				for id := range got {
					if _, ok := l.items[id]; !ok {
						t.Errorf("G3: %s delivered as present, the API deleted it (rows changed under a committed tag: 304s)", id)
					}
				}
			})
		}
	})
}

// dieAfterChunkStore, once armed, lets one commit with events through and then dies (a
// crash, or a lost lease, between two chunks of one page).
type dieAfterChunkStore struct {
	core.Store
	armed atomic.Bool
}

func (d *dieAfterChunkStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	r, err := d.Store.CommitPoll(ctx, l, c)
	if err == nil && len(c.Events) > 0 && d.armed.CompareAndSwap(true, false) {
		return core.CommitResult{}, errKilled
	}
	return r, err
}

// TestAdversary3G3DeathBetweenChunksKeepsTheTag: a page is committed in chunks of
// CommitMaxItems changes, and the page's state patch, where commitAndDeliver puts the tag's
// clearing, goes with the LAST chunk only. The first chunk changes rows (0y created, its event
// in the outbox) under the old committed tag. The process dies before the last chunk: the
// rows hold {0a, 0y}, etag.live still names {0a}. The API deletes 0y and 0z (a content-hash
// tag, as Express, Rails or Django compute it, is T again): every later listing is answered
// 304; 0y's created is delivered from the outbox and its delete never comes. The control is
// the same cycle without the death.
func TestAdversary3G3DeathBetweenChunksKeepsTheTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, die := range []bool{false, true} {
			t.Run(fmt.Sprintf("die-%v", die), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("die-%v", die)
				l := &taggedListing{items: map[string]string{"0a": "1"}, pages: 1}
				d := &dieAfterChunkStore{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.Fetch
					p.CommitMaxItems = 1
				}), func(s core.Store) core.Store { d.Store = s; return d })
				e.settle(eng) // {0a}; the quiet listing commits its tag
				l.set("0y", "1")
				l.set("0z", "1")
				d.armed.Store(die)
				e.clock.Advance(3 * time.Minute)
				t.Logf("the cycle of {0a, 0y, 0z}: %+v", e.tick(eng))
				l.set("0y", "")
				l.set("0z", "")
				e.settle(eng)
				for i := 0; i < 3; i++ {
					e.clock.Advance(3 * time.Minute)
					e.tick(eng)
				}
				ki, _ := eng.Inspect(t.Context(), name, "")
				t.Logf("last poll: %s", ki.LastPoll)
				got := e.rec.final()
				l.mu.Lock()
				defer l.mu.Unlock()
				for id := range got {
					if _, ok := l.items[id]; !ok {
						t.Errorf("G3: %s delivered as present, the API deleted it (a 304 to the tag the first chunk left)", id)
					}
				}
			})
		}
	})
}

// TestAdversary3G3ThrottledDetailCommitsDeletesUnderTheTag: listingDeletes clears the tag
// only in its final switch. When a Detail request is throttled, the deletes already decided
// are committed on the spot (commitAndDeliver of the partial pageWrites) and the cycle ends,
// with the tag untouched. The tag T names {0a, 0x, 0y}; the API deletes 0x and 0y; the
// listing {0a} is not 304, its delete pass asks Detail: the first missing identity is gone
// (deleted, delivered), the second answers 429. Rows {0a, <other>}, tag still T. The API
// writes both back as they were (the collection's content, and its content-hash tag, are T
// again): every later listing is answered 304, and the re-creation of the deleted one is never
// emitted: the consumer misses an item the API has. The control is the same without the 429.
func TestAdversary3G3ThrottledDetailCommitsDeletesUnderTheTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, throttle := range []bool{false, true} {
			t.Run(fmt.Sprintf("throttle-%v", throttle), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("throttle-%v", throttle)
				l := &taggedListing{items: map[string]string{"0a": "1", "0x": "1", "0y": "1"}, pages: 1}
				var mu sync.Mutex
				calls := 0
				armed := false
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.Fetch = l.Fetch
					p.Detail = func(ctx context.Context, key Key, id string) (json.RawMessage, bool, error) {
						mu.Lock()
						defer mu.Unlock()
						calls++
						if armed && calls == 2 {
							return nil, false, &HTTPError{Key: key, StatusCode: 429, RetryAfter: 10 * time.Second}
						}
						l.mu.Lock()
						defer l.mu.Unlock()
						v, ok := l.items[id]
						if !ok {
							return nil, false, nil
						}
						return json.RawMessage(fmt.Sprintf(`{"id":%q,"version":%s}`, id, v)), true, nil
					}
				}), nil)
				e.settle(eng) // {0a, 0x, 0y}; the quiet listing commits its tag
				l.set("0x", "")
				l.set("0y", "")
				mu.Lock()
				calls, armed = 0, throttle
				mu.Unlock()
				e.clock.Advance(3 * time.Minute)
				t.Logf("listing {0a}, Detail of the first missing: gone, of the second: 429: %+v", e.tick(eng))
				l.set("0x", "1") // both back as they were: the collection's tag is T again
				l.set("0y", "1")
				e.settle(eng)
				for i := 0; i < 3; i++ {
					e.clock.Advance(3 * time.Minute)
					e.tick(eng)
				}
				ki, _ := eng.Inspect(t.Context(), name, "")
				t.Logf("last poll: %s", ki.LastPoll)
				got := e.rec.final()
				l.mu.Lock()
				defer l.mu.Unlock()
				for id := range l.items {
					if _, ok := got[id]; !ok {
						t.Errorf("G3: %s is in the API, the consumer got its delete and never its re-creation (a 304 to the tag the throttled delete pass left)", id)
					}
				}
			})
		}
	})
}

// TestAdversary3G3InvalidItemParkedAgainKeepsItsOldBase: a parked row's id is a hash of the
// raw item and commit_poll parks with HSETNX, so the same raw item parked again keeps the
// base of its FIRST parking. x toggles: active/basic (valid), suspended (invalid: no plan),
// active/pro (valid, x moves to change 2), suspended again, byte for byte: its parking is a
// no-op and its row still says base "0/1". The validation is fixed and the row retried: x is
// at "0/2", so the API's current state is taken for superseded and dropped; the cursor is past
// it: the consumer holds active/pro, the API suspended. The control parks "suspended" only
// once (after active/pro): the retry commits it.
func TestAdversary3G3InvalidItemParkedAgainKeepsItsOldBase(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, again := range []bool{false, true} {
			t.Run(fmt.Sprintf("parked-again-%v", again), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("again-%v", again)
				f := &changeLog{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Version = nil
					p.Fingerprint = func(item json.RawMessage) ([]byte, error) { return item, nil }
					p.Fetch = f.fetch
					p.Validate = func(item json.RawMessage) error {
						mu.Lock()
						defer mu.Unlock()
						var it struct {
							Plan string `json:"plan"`
						}
						_ = json.Unmarshal(item, &it)
						if strict && it.Plan == "" {
							return fmt.Errorf("no plan")
						}
						return nil
					}
				}), nil)
				ctx := t.Context()
				const suspended = `{"id":"x","state":"suspended"}`
				steps := []string{`{"id":"x","state":"active","plan":"basic"}`, suspended, `{"id":"x","state":"active","plan":"pro"}`, suspended}
				if !again {
					steps = []string{`{"id":"x","state":"active","plan":"basic"}`, `{"id":"x","state":"active","plan":"pro"}`, suspended}
				}
				for _, raw := range steps {
					f.addRaw(raw)
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				mu.Lock()
				strict = false // a suspended account has no plan: that is fine
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, name, "", rows[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				got := ""
				for _, ev := range e.rec.events() {
					got = stateOf(ev.Item)
				}
				if got != "suspended" {
					t.Errorf("G3: the consumer holds x %q, the API %q (the current item was dropped as superseded)", got, "suspended")
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------
// G3: a committed ETag outlives the poller definition it was committed under.
// ---------------------------------------------------------------------------------------

// TestAdversary3G3SchemaChangeHiddenByTheCommittedTag: the committed tag says "the rows hold
// all this answer names", but the rows are a function of the answer AND the poller's schema
// (fingerprint, version, validation). A deploy that bumps schemaVersion with onSchemaChange:
// emit and a new fingerprint must emit "updated" once for every item whose hash changed
// (README, Schema drift; TestSchemaDrift on an untagged listing). Over the fake API's /list
// with its collection ETag, the new workers' first request carries the tag committed under
// schema 0 and gets a 304: nothing is emitted or rebaselined for as long as the collection does
// not change. The control is the same deploy over a listing without ETags.
func TestAdversary3G3SchemaChangeHiddenByTheCommittedTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tagged := range []bool{false, true} {
			t.Run(fmt.Sprintf("etags-%v", tagged), func(t *testing.T) {
				e := newEnv(t, b)
				putN(e, 10)
				srv, _ := e.server(fakeapi.ServerOptions{})
				lc := listCursor(srv, 100)
				lc.CollectionETag = tagged
				name := fmt.Sprintf("schema-%v", tagged)
				listing := func(p *Poller) {
					p.Name = name
					p.Strategy = SnapshotDiff
					p.Fetch = lc.Fetch
					p.Version = nil
				}
				e.settle(e.engine(e.poller(listing), nil))
				start := len(e.rec.events())
				eng := e.engine(e.poller(listing, func(p *Poller) {
					p.SchemaVersion, p.EmitOnSchemaChange = 2, true
					p.Fingerprint = func(item json.RawMessage) ([]byte, error) { id, err := Field("id")(item); return []byte(id), err }
				}), nil)
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), name, "")
				t.Logf("last poll after the deploy: %s", ki.LastPoll)
				if n := len(e.rec.events()) - start; n != 10 {
					t.Errorf("G3: the schema change emitted %d updated events, want 10 (every hash changed)", n)
				}
			})
		}
	})
}

// TestAdversary3G3ClearSnapshotMakesAParkedItemLookSuperseded: the base a parked invalid item
// records is the identity's (life, count), and the count moves for reasons other than a newer
// observation. A change log: o1 v1 "new" (valid), o1 v2 "bad" (invalid, parked at base 0/1).
// reset-cursor --clear-snapshot passes the log again: o1 v1 meets a forgotten row and is
// created again (count 2); v2 is parked again, a no-op (HSETNX). The validation is fixed and
// v2, the API's current state, retried: its base 0/1 is not 0/2, so it is dropped as
// superseded. The consumer holds v1, the API v2, and the cursor is past v2. The control
// retries without the reset: v2 is committed.
func TestAdversary3G3ClearSnapshotMakesAParkedItemLookSuperseded(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, reset := range []bool{false, true} {
			t.Run(fmt.Sprintf("clear-snapshot-%v", reset), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("clear-%v", reset)
				log := &changeLog{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name = name
					p.Fetch = log.fetch
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
				e.settle(eng)
				log.add("o1", 2, "bad")
				e.settle(eng)
				if reset {
					if err := eng.ResetCursor(ctx, name, "", "", true); err != nil {
						t.Fatal(err)
					}
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, name, "", "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				mu.Lock()
				strict = false
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, name, "", rows[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q (its current state dropped as superseded)", got["o1"], "bad")
				}
			})
		}
	})
}

// TestG3DeleteSupersedesAParkedInvalidItem: an invalid observation parked before its identity
// was deleted is older than the deletion; retried, it would bring the identity back. The
// deletion removes it.
func TestG3DeleteSupersedesAParkedInvalidItem(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.Fetch = e.api.Listing(10)
			p.Validate = rejectBad(nil)
		}), nil)
		ctx := t.Context()
		e.api.Put("o1", map[string]any{"n": 1})
		e.api.Put("o2", map[string]any{"n": 1})
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 2, "bad": true})
		e.settle(eng)
		if rows, err := eng.Parked().List(ctx, "orders", "", "invalid"); err != nil || len(rows) != 1 {
			t.Fatalf("parked: want o1 v2, got %v, %v", rows, err)
		}
		e.api.Delete("o1")
		e.settle(eng)
		checkFinal(t, e)
		if rows, err := eng.Parked().List(ctx, "orders", "", "invalid"); err != nil || len(rows) != 0 {
			t.Fatalf("parked after the delete: want none, got %v, %v", rows, err)
		}
		checkFinal(t, e)
	})
}

// TestG3EachParkedInvalidItemIsSupersededInTurn: v3 parked supersedes v2 in one commit (the
// index then names v3, not nothing), and the valid v4 supersedes v3: nothing is left to retry.
func TestG3EachParkedInvalidItemIsSupersededInTurn(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *Poller) { p.Validate = rejectBad(nil) }), nil)
		ctx := t.Context()
		parked := func(want int) {
			t.Helper()
			if rows, err := eng.Parked().List(ctx, "orders", "", "invalid"); err != nil || len(rows) != want {
				t.Fatalf("parked: want %d, got %v, %v", want, rows, err)
			}
		}
		e.api.Put("o1", map[string]any{"n": 1})
		e.settle(eng)
		for n := 2; n <= 3; n++ {
			e.api.Put("o1", map[string]any{"n": n, "bad": true})
			e.settle(eng)
			parked(1)
		}
		e.api.Put("o1", map[string]any{"n": 4})
		e.settle(eng)
		parked(0)
		checkFinal(t, e)
	})
}
