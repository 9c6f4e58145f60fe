package watukuy

// G6: an identity is deleted only when complete listings showed it gone.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// ConfirmDeletes counts consecutive complete listings that miss an identity: a listing that
// shows it, even invalid (parked), breaks the streak, so b, missed, listed invalid, then missed
// again, is not deleted.
func TestG6ListedInvalidItemBreaksTheMissStreak(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		var listing []string
		set := func(items ...string) { mu.Lock(); listing = items; mu.Unlock() }
		p := e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Version = nil
			p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				mu.Lock()
				defer mu.Unlock()
				var pg watukuytype.Page
				for _, it := range listing {
					pg.Items = append(pg.Items, json.RawMessage(it))
				}
				return pg, nil
			}
			p.Validate = func(item json.RawMessage) error {
				var it struct {
					Name *string `json:"name"`
				}
				if err := json.Unmarshal(item, &it); err != nil || it.Name == nil {
					return fmt.Errorf("name is missing")
				}
				return nil
			}
		})
		eng := e.engine(p, nil)
		a, bOK, bBad := `{"id":"a","name":"A"}`, `{"id":"b","name":"B"}`, `{"id":"b"}`
		for i, l := range [][]string{
			{a, bOK},  // created a, b
			{a},       // b missed (a listing anomaly): candidate, 1 miss
			{a, bBad}, // b listed (invalid: parked, still present)
			{a},       // b missed again: not consecutive with the first miss
		} {
			set(l...)
			e.clock.Advance(3 * time.Minute)
			if rep := e.tick(eng); rep.Ran != 1 {
				t.Fatalf("listing %d: %+v", i, rep)
			}
		}
		for _, ev := range e.rec.events() {
			if ev.Type == watukuytype.Deleted {
				t.Fatalf("G6: %s deleted after two non-consecutive misses (the listing between them showed it); the API never deleted it", ev.Identity)
			}
		}
	})
}

// Items shift onto pages already read while a listing is paged by offset and the API deletes
// others: with confirmDeletes (the default 2) or a Detail request nothing the API kept is
// deleted. confirmDeletes 1 does delete such items (the check that the setup shifts them).
func TestG6NoFalseDeletesWhileAListingShifts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		confirm int
		detail  bool
		every   bool // deletes while paging in every listing, not every other one
		false0  bool // false deletes expected (confirmDeletes 1: the check that the setup shifts items)
	}{
		{"one listing decides (confirmDeletes 1)", 1, false, false, true},
		{"confirmDeletes 2", 0, false, false, false},
		{"detail request", 0, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				srv, _ := e.server(fakeapi.ServerOptions{})
				e.api.PutMany(60, "i", nil)
				p := e.poller(func(p *watukuytype.Poller) {
					p.Strategy = watukuytype.SnapshotDiff
					p.Fetch = (&httppoll.PageCursor{Source: httppoll.Source{URL: srv.URL + "/list", Items: "data"}, Param: "offset", Offset: true,
						SizeParam: "limit", Size: 10, HasMore: "has_more"}).Fetch
					p.ConfirmDeletes = tc.confirm
					if tc.detail {
						p.Detail = (&httppoll.DetailRequest{Source: httppoll.Source{URL: srv.URL + "/items/{id}"}}).Fetch
					}
				})
				eng := e.engine(p, nil)
				e.settle(eng)
				for round := range 8 {
					if tc.every || round%2 == 0 {
						srv.DeleteWhilePaging(1, 5)
					} else {
						srv.DeleteWhilePaging(0, 0)
					}
					e.api.Put(fmt.Sprintf("n%02d", round), nil) // the listing changes, so it is read again
					e.clock.Advance(3 * time.Minute)
					e.tick(eng)
				}
				srv.DeleteWhilePaging(0, 0)
				e.settle(eng)
				deletedInAPI := map[string]bool{}
				for _, c := range e.api.Changes() {
					if c.Deleted {
						deletedInAPI[c.ID] = true
					}
				}
				var falseDeletes []string
				for _, ev := range e.rec.events() {
					if ev.Type == watukuytype.Deleted && !deletedInAPI[ev.Identity] {
						falseDeletes = append(falseDeletes, ev.Identity)
					}
				}
				if srv.DeletedWhilePaging() == 0 {
					t.Fatal("no item was deleted while a listing was paged: the setup did nothing")
				}
				switch {
				case tc.false0 && len(falseDeletes) == 0:
					t.Fatalf("%d items deleted while paging, no false delete: the setup does not shift items onto pages already read", srv.DeletedWhilePaging())
				case !tc.false0 && len(falseDeletes) > 0:
					t.Fatalf("deleted events for items the API never deleted: %v", falseDeletes)
				}
				if !tc.false0 {
					checkFinal(t, e)
				}
			})
		})
	}
}
