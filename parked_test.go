package watukuy

// Parked invalid items (G3): an identity's latest invalid observation is parked, a later
// observation supersedes it, and a retry never takes the consumer back past a later change.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// o1 v2 is parked invalid, then v3 (valid) is committed: v3 supersedes the parked v2 in its
// commit, so nothing stale is left to retry once the validation is fixed.
func TestG3ValidVersionSupersedesAParkedInvalidOne(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var strict atomic.Bool
		strict.Store(true)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Validate = rejectBad(&strict)
		}), nil)
		ctx := t.Context()
		e.api.Put("o1", map[string]any{"n": 1})
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 2, "bad": true}) // v2: parked invalid
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 3}) // v3: valid, committed, delivered
		e.settle(eng)
		rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "invalid")
		if err != nil || len(rows) != 0 {
			t.Fatalf("parked: want v2 superseded by v3, got %v, %v", rows, err)
		}
		strict.Store(false) // the validation was fixed
		e.settle(eng)
		checkFinal(t, e)
	})
}

// An identity has one parked invalid observation, its latest: v3 parked supersedes v2, and the
// retry of v3 once the validation is fixed ends at the API's state.
func TestG3LaterInvalidVersionSupersedesTheParkedOne(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var strict atomic.Bool
		strict.Store(true)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Validate = rejectBad(&strict)
		}), nil)
		ctx := t.Context()
		e.api.Put("o1", map[string]any{"n": 1})
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 2, "bad": true}) // v2: parked invalid
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 3, "bad": true}) // v3: parked invalid, supersedes v2
		e.settle(eng)
		rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "invalid")
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
		if n, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, rows[0].ID); err != nil || n != 1 {
			t.Fatalf("retry: %d, %v", n, err)
		}
		e.settle(eng)
		checkFinal(t, e)
	})
}

// TestG3DeleteSupersedesAParkedInvalidItem: an invalid observation parked before its identity
// was deleted is older than the deletion; retried, it would bring the identity back. The
// deletion removes it.
func TestG3DeleteSupersedesAParkedInvalidItem(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = e.api.Listing(10)
			p.Validate = rejectBad(nil)
		}), nil)
		ctx := t.Context()
		e.api.Put("o1", map[string]any{"n": 1})
		e.api.Put("o2", map[string]any{"n": 1})
		e.settle(eng)
		e.api.Put("o1", map[string]any{"n": 2, "bad": true})
		e.settle(eng)
		if rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "invalid"); err != nil || len(rows) != 1 {
			t.Fatalf("parked: want o1 v2, got %v, %v", rows, err)
		}
		e.api.Delete("o1")
		e.settle(eng)
		checkFinal(t, e)
		if rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "invalid"); err != nil || len(rows) != 0 {
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
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Validate = rejectBad(nil) }), nil)
		ctx := t.Context()
		parked := func(want int) {
			t.Helper()
			if rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "invalid"); err != nil || len(rows) != want {
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

// The same raw item parked again (x suspended, active/pro, suspended again byte for byte) is
// still the API's current state when retried: it is committed, not dropped as superseded by the
// change before it (the control parks it once).
func TestG3InvalidItemParkedAgainIsRetriedAsCurrent(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, again := range []bool{false, true} {
			t.Run(fmt.Sprintf("parked-again-%v", again), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("again-%v", again)
				f := &changeLog{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
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
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				mu.Lock()
				strict = false // a suspended account has no plan: that is fine
				mu.Unlock()
				if n, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, rows[0].ID); err != nil || n != 1 {
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

// A page whose invalid items spread over commit chunks (CommitMaxItems 1), the process dying
// before the last: o1 still has one parked invalid row, its latest, and its retry ends at the
// API's state (the control runs without the death).
func TestG3DeathBetweenChunksLeavesOneParkedRowPerIdentity(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, die := range []bool{false, true} {
			t.Run(fmt.Sprintf("die-%v", die), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("die-%v", die)
				log := &changeLog{}
				d := &dieAfterParkStore{}
				var mu sync.Mutex
				strict := true
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
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
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil {
					t.Fatal(err)
				}
				var o1 []watukuytype.ParkedInfo
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
				if n, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, o1[0].ID); err != nil || n != 1 {
					t.Fatalf("retry: %d, %v", n, err)
				}
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad-v3" {
					rows, _ := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
					t.Errorf("G3: after retrying o1's oldest parked row the consumer holds o1 %q, the API %q; %d rows still parked", got["o1"], "bad-v3", len(rows))
				}
			})
		}
	})
}

// An item parked without an identity (the identity path was wrong) is superseded by nothing;
// its retry is refused once a later change of that identity was committed, so the consumer
// keeps the later change (the control retries before o1 changes: committed).
func TestG3RetryOfAnItemParkedWithoutIdentityIsRefusedAfterALaterChange(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, laterChange := range []bool{false, true} {
			t.Run(fmt.Sprintf("later-change-%v", laterChange), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("noid-%v", laterChange)
				f := &changeLog{}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = f.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
				}
				ctx := t.Context()
				f.addRaw(`{"id":"o0","state":"x"}`)
				f.addRaw(`{"ID":"o1","state":"a"}`) // no "id": parked without identity
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					p.Identity = func(item json.RawMessage) (string, error) {
						if id, err := watukuytype.Field("id")(item); err == nil {
							return id, nil
						}
						return watukuytype.Field("ID")(item)
					}
				}), nil)
				want := "a"
				if laterChange {
					f.addRaw(`{"id":"o1","state":"b"}`)
					want = "b"
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				// With a later change of o1 committed, the retry is refused (the row
				// may be older than o1's), and the row stays for a discard.
				if _, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, rows[0].ID); laterChange != (err != nil) {
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

// An invalid observation whose version is below the parked one's (a record deleted and created
// again restarts its revision) is parked in its place, not dropped: the retry brings the
// consumer to the API's current record (the control continues the old record's revisions).
func TestG3InvalidObservationOlderThanTheParkedOneIsParked(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, recreated := range []bool{false, true} {
			t.Run(fmt.Sprintf("recreated-%v", recreated), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("older-%v", recreated)
				log := &changeLog{}
				var strict atomic.Bool
				strict.Store(true)
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.Validate = strictBadPrefix(&strict)
				}), nil)
				log.add("o1", 4, "old record")
				e.settle(eng)
				log.add("o1", 5, "bad old record") // parked invalid
				e.settle(eng)
				next := 6
				if recreated {
					next = 1 // deleted and created again: its revision starts over
				}
				log.add("o1", next, "new record")
				e.settle(eng)
				log.add("o1", next+1, "bad new record") // the API's current state
				e.settle(eng)
				rows, _ := eng.Parked().List(t.Context(), watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				var parked []string
				for _, r := range rows {
					parked = append(parked, stateOf(r.Item))
				}
				strict.Store(false) // the validation was too strict
				retryAllParked(t, eng, name)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad new record" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; parked before the retry: %q", got["o1"], "bad new record", parked)
				}
			})
		}
	})
}

// The retry of an item parked without an identity whose identity was deleted since does not
// create it again, even once the tombstone has expired (TombstoneRetention; the control retries
// within it).
func TestG3IdentitylessRetryAfterTheTombstoneExpiredRecreatesNothing(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, expired := range []bool{false, true} {
			t.Run(fmt.Sprintf("tombstone-expired-%v", expired), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("noid-tomb-%v", expired)
				f := &changeLog{}
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = f.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
					p.Tombstone = watukuytype.Flag("deleted")
					p.TombstoneRetention = time.Hour
				}
				ctx := t.Context()
				f.addRaw(`{"id":"o0","state":"x"}`)
				f.addRaw(`{"ID":"o1","state":"a"}`) // no "id": parked without identity
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					p.Identity = func(item json.RawMessage) (string, error) {
						if id, err := watukuytype.Field("id")(item); err == nil {
							return id, nil
						}
						return watukuytype.Field("ID")(item)
					}
				}), nil)
				f.addRaw(`{"id":"o1","state":"b"}`)
				f.addRaw(`{"id":"o1","deleted":true}`)
				e.settle(eng)
				if expired {
					e.clock.Advance(2 * time.Hour)
					f.addRaw(`{"id":"o2","state":"y"}`)
					f.addRaw(`{"id":"o2","deleted":true}`) // its tombstone trims o1's
					e.settle(eng)
				}
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(rows) != 1 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				_, rerr := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, rows[0].ID)
				t.Logf("retry: %v", rerr)
				e.settle(eng)
				got, _ := dedupingConsumer(e.rec.events())
				if s, ok := got["o1"]; ok {
					t.Errorf("G3: the consumer holds o1 %q, the API deleted it (an identity-less parked row was retried once the tombstone had gone)", s)
				}
			})
		}
	})
}

// The retry of an item parked without an identity, older than its identity's parked invalid
// observation, does not supersede that later one: retried oldest or newest first (the control),
// the consumer ends at the API's "bad b".
func TestG3IdentitylessRetryKeepsTheLaterParkedObservation(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, oldestFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("oldest-first-%v", oldestFirst), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("noid-sup-%v", oldestFirst)
				log := &changeLog{}
				var strict atomic.Bool
				strict.Store(true)
				base := func(p *watukuytype.Poller) {
					p.Name = name
					p.Fetch = log.fetch
					p.Validate = strictBadPrefix(&strict)
				}
				ctx := t.Context()
				log.addRaw(`{"ID":"o1","version":"1","state":"a"}`) // no "id": parked without identity
				e.settle(e.engine(e.poller(base), nil))
				eng := e.engine(e.poller(base, func(p *watukuytype.Poller) {
					p.Identity = func(item json.RawMessage) (string, error) {
						if id, err := watukuytype.Field("id")(item); err == nil {
							return id, nil
						}
						return watukuytype.Field("ID")(item)
					}
				}), nil)
				log.add("o1", 2, "bad b") // the API's current state, parked invalid
				e.settle(eng)
				rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				if err != nil || len(rows) != 2 {
					t.Fatalf("parked: %v, %v", rows, err)
				}
				if !oldestFirst {
					rows[0], rows[1] = rows[1], rows[0]
				}
				strict.Store(false) // the validation was too strict
				for _, r := range rows {
					_, rerr := eng.Parked().Retry(ctx, watukuytype.Key{Poller: name, Partition: ""}, r.ID)
					t.Logf("retry %q (%s): %v", r.Identity, stateOf(r.Item), rerr)
				}
				e.settle(eng)
				left, _ := eng.Parked().List(ctx, watukuytype.Key{Poller: name, Partition: ""}, "invalid")
				got, _ := dedupingConsumer(e.rec.events())
				if got["o1"] != "bad b" {
					t.Errorf("G3: the consumer holds o1 %q, the API %q; %d rows left parked", got["o1"], "bad b", len(left))
				}
			})
		}
	})
}
