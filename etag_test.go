package watukuy

// G3 and ETags: a tag is remembered or committed only for a collection state the rows hold
// whole, so a 304 to it never hides a change, whoever wrote the rows and however the listing
// went.

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
	"github.com/watukuy/watukuy/watukuytype"
)

// The ETag of a page whose commit then failed (a Redis timeout; the process lives on) is not
// sent again: the next cycle lists the collection and emits the change.
func TestG3ETagOfAnUncommittedPageIsNotUsed(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(5, "i", nil)
		fs := &faultyStore{}
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = listCursor(srv, 10).Fetch
		}), faulty(fs))
		e.settle(eng)
		e.api.Put("i0001", nil) // version 2
		fs.mu.Lock()
		fs.failCommt = 1 // this page's commit fails (Redis timed out); the process lives on
		fs.mu.Unlock()
		e.clock.Advance(3 * time.Minute)
		rep := e.tick(eng)
		t.Logf("cycle whose commit failed: %+v", rep)
		e.settle(eng)
		checkFinal(t, e)
	})
}

// A request sent unconditionally (FetchRequest.Fresh: a listing with delete candidates) leaves
// no older ETag to match: a collection that comes back to an older state (y created, then
// deleted) is listed again and y's delete is emitted.
func TestG3FreshAnswerLeavesNoOlderETag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(3, "i", nil)
		e.api.Put("x", nil)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = listCursor(srv, 10).Fetch
		}), nil)
		e.settle(eng) // tag of {i0..i2, x} remembered
		tick := func(what string) {
			e.clock.Advance(3 * time.Minute)
			rep := e.tick(eng)
			t.Logf("%s: %+v", what, rep)
		}
		e.api.Delete("x")
		tick("x gone: a delete candidate (tag of {i0..i2} remembered)")
		e.api.Put("y", nil)
		tick("y created, x's second miss: a fresh listing (its tag is not remembered)")
		e.api.Delete("y") // the collection is {i0..i2} again: the remembered tag matches
		e.settle(eng)
		checkFinal(t, e)
	})
}

// An ETag is remembered per process while the committed state is shared: after worker B
// committed y and the API deleted it again, worker A's old tag hides nothing, and y's delete is
// emitted.
func TestG3ETagRememberedBeforeAnotherWorkersCommit(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(3, "i", nil)
		worker := func() *Engine {
			return e.engine(e.poller(func(p *watukuytype.Poller) {
				p.Strategy = watukuytype.SnapshotDiff
				p.Fetch = listCursor(srv, 10).Fetch // each process has its own
			}), nil)
		}
		a, bw := worker(), worker()
		e.settle(a)
		e.api.Put("y", nil)
		e.clock.Advance(3 * time.Minute)
		if rep := e.tick(bw); rep.Events != 1 {
			t.Fatalf("worker B: %+v", rep)
		}
		e.api.Delete("y")
		e.settle(a)
		checkFinal(t, e)
	})
}

// A listing paged while the collection changes commits no tag, even when its first and last
// pages carry the same tag or nothing changed in the rows: a 304 to that tag, once the
// collection is back in its state, would hide a delete.
func TestG3TagOfAListingPagedWhileTheCollectionChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(l *taggedListing) // before the listing
		during func(l *taggedListing, page int)
		then   func(l *taggedListing) // after it: the collection is back in the first tag's state
	}{
		{"created and deleted again while paged: first and last tags agree",
			func(l *taggedListing) { l.salt = "deployed" }, // a new tag, the same content: listed again
			func(l *taggedListing, page int) {
				switch page {
				case 0:
					l.set("1y", "1")
				case 1:
					l.set("1y", "")
				}
			},
			nil},
		{"deleted before the listing, back while paged: the rows do not change",
			func(l *taggedListing) { l.set("1a", "") },
			func(l *taggedListing, page int) {
				if page == 0 {
					l.set("1a", "1")
				}
			},
			func(l *taggedListing) { l.set("1a", "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachLight(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				l := &taggedListing{items: map[string]string{"0a": "1", "0b": "1", "1a": "1", "2a": "1"}, pages: 3}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Strategy = watukuytype.SnapshotDiff
					p.Fetch = l.Fetch
					p.ConfirmDeletes = 1
				}), nil)
				e.settle(eng)
				if tc.before != nil {
					tc.before(l)
				}
				l.mu.Lock()
				l.after = func(page int) { tc.during(l, page) }
				l.mu.Unlock()
				e.clock.Advance(3 * time.Minute)
				t.Logf("the listing paged while the collection changes: %+v", e.tick(eng))
				l.mu.Lock()
				l.after = nil
				l.mu.Unlock()
				if tc.then != nil {
					tc.then(l)
				}
				e.settle(eng)
				got := e.rec.final()
				l.mu.Lock()
				defer l.mu.Unlock()
				for id := range got {
					if _, ok := l.items[id]; !ok {
						t.Errorf("G3: %s delivered as present, the API deleted it (a 304 to a tag the rows do not hold)", id)
					}
				}
				if len(got) != len(l.items) {
					t.Errorf("delivered %v, the API has %v", got, l.items)
				}
			})
		})
	}
}

// A parked invalid item retried by an operator changes rows, so its commit clears the committed
// tag: 0y, created by the retry and gone from the API, is deleted by a later listing instead of
// hidden behind a 304 (the control lists without ETags).
func TestG3ParkedRetryClearsTheCommittedTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tagged := range []bool{false, true} {
			t.Run(fmt.Sprintf("etags-%v", tagged), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("tags-%v", tagged)
				l := &taggedListing{items: map[string]string{"0a": "1", "0y": "1"}, pages: 1}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.Fetch
					if !tagged {
						p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
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
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				mu.Lock()
				strict = false
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, rows[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				for i := 0; i < 3; i++ { // a few more listings, for good measure
					e.clock.Advance(3 * time.Minute)
					e.tick(eng)
				}
				ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: name, Partition: ""})
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

// A death between the chunks of a page leaves no committed tag naming the collection without
// the rows the first chunk wrote: once the API deletes those items again, their deletes are
// emitted (the control runs without the death).
func TestG3DeathBetweenChunksLeavesNoStaleTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, die := range []bool{false, true} {
			t.Run(fmt.Sprintf("die-%v", die), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("die-%v", die)
				l := &taggedListing{items: map[string]string{"0a": "1"}, pages: 1}
				d := &dieAfterChunkStore{}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
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
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
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

// A delete pass whose second Detail request is throttled commits the deletes already decided
// and leaves no tag of the older collection: once the API writes the items back as they were,
// their re-creation is emitted (the control runs without the 429).
func TestG3ThrottledDeletePassLeavesNoStaleTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, throttle := range []bool{false, true} {
			t.Run(fmt.Sprintf("throttle-%v", throttle), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("throttle-%v", throttle)
				l := &taggedListing{items: map[string]string{"0a": "1", "0x": "1", "0y": "1"}, pages: 1}
				var mu sync.Mutex
				calls := 0
				armed := false
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
					p.Fetch = l.Fetch
					p.Detail = func(ctx context.Context, key watukuytype.Key, id string) (json.RawMessage, bool, error) {
						mu.Lock()
						defer mu.Unlock()
						calls++
						if armed && calls == 2 {
							return nil, false, &watukuytype.HTTPError{Key: key, StatusCode: 429, RetryAfter: 10 * time.Second}
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
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
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

// A tag committed under one schema says nothing of the rows under another: a bump with emit and
// a new fingerprint emits every item whose hash changed, over a listing with a collection ETag
// as over one without (the control).
func TestG3SchemaChangeIsNotHiddenByTheCommittedTag(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, tagged := range []bool{false, true} {
			t.Run(fmt.Sprintf("etags-%v", tagged), func(t *testing.T) {
				e := newEnv(t, b)
				putN(e, 10)
				srv, _ := e.server(fakeapi.ServerOptions{})
				lc := listCursor(srv, 100)
				lc.CollectionETag = tagged
				name := fmt.Sprintf("schema-%v", tagged)
				listing := func(p *watukuytype.Poller) {
					p.Name = name
					p.Strategy = watukuytype.SnapshotDiff
					p.Fetch = lc.Fetch
					p.Version = nil
				}
				e.settle(e.engine(e.poller(listing), nil))
				start := len(e.rec.events())
				eng := e.engine(e.poller(listing, func(p *watukuytype.Poller) {
					p.SchemaVersion, p.EmitOnSchemaChange = 2, true
					p.Fingerprint = func(item json.RawMessage) ([]byte, error) {
						id, err := watukuytype.Field("id")(item)
						return []byte(id), err
					}
				}), nil)
				e.settle(eng)
				ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: name, Partition: ""})
				t.Logf("last poll after the deploy: %s", ki.LastPoll)
				if n := len(e.rec.events()) - start; n != 10 {
					t.Errorf("G3: the schema change emitted %d updated events, want 10 (every hash changed)", n)
				}
			})
		}
	})
}
