package watukuy

// Item versions that start over, repeat, come back or change kind: every change is emitted,
// under an id of its own (G2, G3).

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A record deleted and created again under the same identity restarts its revision (rev 5, then
// rev 1): the new record is emitted, not dropped as older than the row, even when no listing
// saw the deletion in between (the control lets one see it).
func TestG3RecreatedItemWithARevisionThatStartsOverIsEmitted(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, seenGone := range []bool{true, false} {
			t.Run(fmt.Sprintf("listing-between-%v", seenGone), func(t *testing.T) {
				e := newEnv(t, b)
				l := &rawListing{items: map[string]string{"sku-1": `{"id":"sku-1","rev":5,"state":"old record"}`}}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = fmt.Sprintf("rev-%v", seenGone)
					p.Strategy = watukuytype.SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = watukuytype.Field("rev")
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

// A version that does not name the change (a second-granular updated_at: closed, open, closed,
// open inside one second) still gives each change an id of its own, and a consumer that dedupes
// by id ends at the API's "open".
func TestG2VersionThatRepeatsWithContentGetsNewIDs(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		state := ""
		p := e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Version = watukuytype.Field("updated_at")
			p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				mu.Lock()
				defer mu.Unlock()
				return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(fmt.Sprintf(
					`{"id":"o1","state":%q,"updated_at":"2026-11-30T10:00:00Z"}`, state))}}, nil
			}
		})
		eng := e.engine(p, nil)
		for _, s := range []string{"closed", "open", "closed", "open"} {
			mu.Lock()
			state = s
			mu.Unlock()
			e.clock.Advance(3 * time.Minute)
			e.tick(eng)
		}
		evs := e.rec.events()
		if len(evs) != 4 {
			t.Fatalf("%d events for 4 observed changes", len(evs))
		}
		seen := map[string]int{}
		applied := ""
		for i, ev := range evs {
			if j, dup := seen[ev.ID]; dup {
				t.Errorf("G2: event %d (%s %s) has the id of event %d (%s %s)", i, ev.Type, ev.Item, j, evs[j].Type, evs[j].Item)
				continue
			}
			seen[ev.ID] = i
			var it struct {
				State string `json:"state"`
			}
			_ = json.Unmarshal(ev.Item, &it)
			applied = it.State
		}
		if applied != "open" {
			t.Errorf("a consumer that dedupes by id ends with %q, the API has \"open\"", applied)
		}
	})
}

// A version that comes back (a content checksum: closed, open, closed) gives the third change a
// new id, as a poller without a version does (the control).
func TestG2VersionThatComesBackGetsANewID(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, versioned := range []bool{false, true} {
			t.Run(fmt.Sprintf("versioned-%v", versioned), func(t *testing.T) {
				e := newEnv(t, b)
				var mu sync.Mutex
				state := ""
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = fmt.Sprintf("versioned-%v", versioned)
					p.Strategy = watukuytype.SnapshotDiff
					p.Version = nil
					if versioned {
						p.Version = watukuytype.Field("md5")
					}
					p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
						mu.Lock()
						defer mu.Unlock()
						return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(fmt.Sprintf(
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

// A version not always of one kind (6, then "draft", 5, then 6 again) gives each of the four
// changes an id of its own: a consumer that dedupes by id ends at the API's x.
func TestG2ForwardAgainAfterAnOpaqueVersionGetsANewID(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		l := &rawListing{items: map[string]string{}}
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.ConfirmDeletes = 1
			p.Fetch = l.fetch
			p.Version = watukuytype.Field("version")
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
