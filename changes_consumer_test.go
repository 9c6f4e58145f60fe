package watukuy

// The promise of Changes.Patch, checked from the consumer's side: a consumer that dedupes by
// event id and applies each identity's events in delivery order can apply every updated
// event's patch to its copy (the item of the identity's previous event it applied) and get
// exactly the event's item; a deleted event's previous is that copy.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/watukuy/watukuy/internal/changeset"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// patchConsumer applies deliveries as the promised consumer does and returns every place
// where a patch or a previous does not match its copy.
func patchConsumer(evs []watukuytype.Event) []string {
	seen := map[string]bool{}
	copies := map[string]json.RawMessage{}
	var bad []string
	for _, ev := range evs {
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		have, ok := copies[ev.Identity]
		switch ev.Type {
		case watukuytype.Created:
			copies[ev.Identity] = ev.Item
		case watukuytype.Updated:
			if ev.Changes == nil || string(ev.Changes) == "null" {
				copies[ev.Identity] = ev.Item
				continue
			}
			if !ok {
				bad = append(bad, fmt.Sprintf("%s %s v%s: patch %s, but the consumer has no copy", ev.Identity, ev.ID, ev.Version, ev.Changes))
				copies[ev.Identity] = ev.Item
				continue
			}
			p, err := jsonpatch.DecodePatch(ev.Changes)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s v%s: patch %s does not decode: %v", ev.Identity, ev.Version, ev.Changes, err))
				copies[ev.Identity] = ev.Item
				continue
			}
			got, err := p.Apply(have)
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s v%s: patch %s does not apply to the copy %s: %v", ev.Identity, ev.Version, ev.Changes, have, err))
			case !changeset.Same(got, ev.Item):
				bad = append(bad, fmt.Sprintf("%s v%s: patch %s applied to the copy %s gives %s, the item is %s", ev.Identity, ev.Version, ev.Changes, have, got, ev.Item))
			}
			copies[ev.Identity] = ev.Item
		case watukuytype.Deleted:
			if ev.Previous != nil && (!ok || !changeset.Same(ev.Previous, have)) {
				bad = append(bad, fmt.Sprintf("%s deleted: previous %s, the copy %s", ev.Identity, ev.Previous, have))
			}
			delete(copies, ev.Identity)
		}
	}
	return bad
}

func failPatchChain(t *testing.T, evs []watukuytype.Event) {
	t.Helper()
	bad := patchConsumer(evs)
	for _, b := range bad {
		t.Error(b)
	}
	if len(bad) > 0 {
		for _, ev := range evs {
			t.Logf("delivered %s %s v%s %s item=%s changes=%s omitted=%q previous=%s", ev.Type, ev.Identity, ev.Version, ev.ID, ev.Item, ev.Changes, ev.ChangesOmitted, ev.Previous)
		}
	}
}

// A config reload that turns Changes.Patch off and on again (or reaches the workers at
// different times, so one cycle runs without it): the cycle without Patch emits an event and
// moves the row but leaves the kept payload where it was, and the next patch starts from
// that older item, not from the one the consumer applied last.
func TestChangesPatchAfterACycleWithoutPatchStartsFromTheItemLastEmitted(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		on := func(p *watukuytype.Poller) { p.Changes.Patch = true }
		e.api.Put("A", map[string]any{"status": "open"})
		e.settle(e.engine(e.poller(on), nil))
		e.api.Put("A", map[string]any{"status": "paid", "note": "gift"})
		e.settle(e.engine(e.poller(), nil)) // Patch off for one cycle
		e.api.Put("A", map[string]any{"status": "shipped"})
		e.settle(e.engine(e.poller(on), nil))
		failPatchChain(t, e.rec.events())
	})
}

// A shadow cycle between live ones: nothing is emitted, but the kept payload moves to what
// the shadow cycle saw, so the next live patch starts from an item the consumer never got.
func TestChangesShadowCyclesLeaveThePayloadAtTheItemLastEmitted(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		live := func(p *watukuytype.Poller) { p.Changes.Patch = true }
		shadow := func(p *watukuytype.Poller) { p.Changes.Patch, p.Shadow = true, true }
		e.api.Put("A", map[string]any{"status": "open", "note": "gift"})
		e.settle(e.engine(e.poller(live), nil))
		e.api.Put("A", map[string]any{"status": "paid"})
		e.settle(e.engine(e.poller(shadow), nil))
		e.api.Put("A", map[string]any{"status": "shipped"})
		e.settle(e.engine(e.poller(live), nil))
		failPatchChain(t, e.rec.events())
	})
}

// reset-cursor --clear-snapshot with Changes.Ignore: an item whose ignored fields changed
// since it was emitted is emitted again as created under the id of that emission (G2: its
// content did not change), which the consumer drops as a repeat; the payload becomes the item
// with the new ignored fields all the same, so the next patch does not touch them and the
// consumer's copy keeps the old ones.
func TestChangesClearSnapshotKeepsThePayloadOfADroppedRepeat(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy, p.Fetch, p.Version, p.ConfirmDeletes = watukuytype.SnapshotDiff, e.api.Listing(10), nil, 1
			p.Changes = watukuytype.Changes{Patch: true, Ignore: []string{"/seen_at", "/updated_at", "/updated_seq", "/version"}}
		}), nil)
		e.api.Put("A", map[string]any{"status": "open", "seen_at": 1})
		e.settle(eng)
		e.api.Put("A", map[string]any{"status": "open", "seen_at": 2}) // ignored: no event
		e.settle(eng)
		if err := eng.ResetCursor(t.Context(), watukuytype.Key{Poller: "orders"}, "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		e.api.Put("A", map[string]any{"status": "paid", "seen_at": 2})
		e.settle(eng)
		failPatchChain(t, e.rec.events())
	})
}

// A dotted Ignore path in gjson's query syntax ("lines.#.qty", "a.*") is taken at Register,
// and then no item can be stripped: every item of the poller is parked invalid.
func TestChangesIgnorePathThatCannotBeStrippedIsRefusedAtRegister(t *testing.T) {
	for _, path := range []string{"lines.#.qty", "meta.*", "a|b", "@this"} {
		t.Run(path, func(t *testing.T) {
			e := newEnv(t, redistest.Miniredis(t))
			p := e.poller(func(p *watukuytype.Poller) { p.Changes = watukuytype.Changes{Patch: true, Ignore: []string{path}} })
			eng, err := newEngine(Options{Redis: e.b.Client, InstanceID: "instance-a"}, seams{clock: e.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.Register(p); err != nil {
				return // refused: what this test wants
			}
			e.api.Put("A", map[string]any{"lines": []any{map[string]any{"qty": 1}}, "meta": map[string]any{"etag": "e"}})
			e.clock.Advance(3 * time.Minute)
			e.tick(eng)
			ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders"})
			t.Errorf("Ignore %q was accepted at Register; then %d events were delivered, %d rows parked, last error %s",
				path, len(e.rec.events()), ki.Parked, ki.LastError)
		})
	}
}

// Adding a field to Changes.Ignore changes the content hash of every item that holds it; with
// schemaVersion bumped in the same change (as configuration.md says), the rows rebaseline and
// nothing that did not change is emitted (G7).
func TestG7ChangingIgnoreWithASchemaBumpEmitsNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		listing := func(schema int, ignore ...string) func(p *watukuytype.Poller) {
			return func(p *watukuytype.Poller) {
				p.Strategy, p.Fetch, p.Version, p.ConfirmDeletes = watukuytype.SnapshotDiff, e.api.Listing(10), nil, 1
				p.Changes = watukuytype.Changes{Patch: true, Ignore: ignore}
				p.SchemaVersion = schema
			}
		}
		for _, id := range []string{"A", "B", "C"} {
			e.api.Put(id, map[string]any{"status": "open"})
		}
		e.settle(e.engine(e.poller(listing(0)), nil))
		before := len(e.rec.events())
		e.settle(e.engine(e.poller(listing(1, "/updated_at")), nil))
		if evs := e.rec.events()[before:]; len(evs) > 0 {
			t.Errorf("G7: %d events for items that did not change, after /updated_at was added to Ignore with a schema bump: %v with changes %s",
				len(evs), types(evs), changesOf(evs))
		}
	})
}

// pagedLog is a change log whose first page is pages[0] and so on; the cursor is the
// page number. Each item is {"id", "v", ...}.
type pagedLog struct {
	pages [][]json.RawMessage
}

func (s *pagedLog) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	n := 0
	if req.Cursor != "" {
		fmt.Sscan(req.Cursor, &n)
	}
	if n >= len(s.pages) {
		return watukuytype.Page{Next: req.Cursor}, nil
	}
	return watukuytype.Page{Items: s.pages[n], Next: fmt.Sprint(n + 1), HasMore: n+1 < len(s.pages)}, nil
}

func rawItems(specs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(specs))
	for i, s := range specs {
		out[i] = json.RawMessage(s)
	}
	return out
}

// One identity changed several times in one page larger than CommitMaxItems, its changes in
// two chunks, the worker dying after the first chunk: the chain of patches holds across the
// death, and across an identity deleted and created again in the page.
func TestChangesPatchChainHoldsAcrossChunksAndADeathBetweenThem(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		log := &pagedLog{pages: [][]json.RawMessage{
			rawItems(`{"id":"A","v":1,"a":1}`, `{"id":"D","v":1,"a":1}`),
		}}
		mod := func(p *watukuytype.Poller) {
			p.Fetch, p.Version, p.Identity = log.fetch, watukuytype.Field("v"), watukuytype.Field("id")
			p.Tombstone = watukuytype.Flag("gone")
			p.CommitMaxItems = 3
			p.Changes.Patch = true
		}
		e.settle(e.engine(e.poller(mod), nil))
		// Each version of A and D has a field of its own: a patch from any other version than
		// the one before does not apply.
		log.pages = append(log.pages, rawItems(`{"id":"A","v":2,"b":2}`, `{"id":"B","v":1}`, `{"id":"C","v":1}`,
			`{"id":"A","v":3,"c":3}`, `{"id":"D","v":2,"gone":true}`, `{"id":"D","v":3,"c":3}`,
			`{"id":"E","v":1}`, `{"id":"A","v":4,"d":[1,2,3]}`, `{"id":"D","v":4,"d":[1]}`))
		fs := &faultyStore{dieCommit: 1}
		e.clock.Advance(3 * time.Minute)
		e.tick(e.engine(e.poller(mod), faulty(fs)))
		if fs.commitCount() != 1 {
			t.Fatalf("%d commits before the death, want the first chunk only", fs.commitCount())
		}
		e.settle(e.engine(e.poller(mod), nil))
		if n := len(e.rec.events()); n != 11 {
			t.Errorf("%d events delivered, want 11: %v", n, types(e.rec.events()))
		}
		failPatchChain(t, e.rec.events())
	})
}

// An item of exactly Changes.MaxBytes is kept, one byte more is not: the update after it says
// so, and the chain goes on once items fit again.
func TestChangesMaxBytesBoundary(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	log := &pagedLog{}
	at := func(id string, v, size int) json.RawMessage {
		head := fmt.Sprintf(`{"id":%q,"v":%d,"pad":"`, id, v)
		return json.RawMessage(head + strings.Repeat("x", size-len(head)-2) + `"}`)
	}
	const limit = 300
	log.pages = [][]json.RawMessage{
		{at("A", 1, limit), at("B", 1, limit+1)},
		{at("A", 2, limit), at("B", 2, limit)},
		{at("A", 3, 100), at("B", 3, 100)},
	}
	eng := e.engine(e.poller(func(p *watukuytype.Poller) {
		p.Fetch, p.Version, p.Identity = log.fetch, watukuytype.Field("v"), watukuytype.Field("id")
		p.Changes = watukuytype.Changes{Patch: true, MaxBytes: limit}
	}), nil)
	e.settle(eng)
	evs := e.rec.events()
	failPatchChain(t, evs)
	for _, ev := range evs {
		switch {
		case ev.Identity == "A" && ev.Type == watukuytype.Updated && ev.ChangesOmitted != "":
			t.Errorf("A@%s (items of exactly MaxBytes) has no patch: %q", ev.Version, ev.ChangesOmitted)
		case ev.Identity == "B" && ev.Version == "2" && ev.ChangesOmitted != watukuytype.ChangesTooLarge:
			t.Errorf("B@2 after an item one byte over MaxBytes: changes %s, omitted %q", ev.Changes, ev.ChangesOmitted)
		case ev.Identity == "B" && ev.Version == "3" && ev.ChangesOmitted != "":
			t.Errorf("B@3 after an item that fits has no patch: %q", ev.ChangesOmitted)
		}
	}
}

// Items that are arrays: the patch addresses their elements, and the chain holds.
func TestChangesPatchOfItemsThatAreArrays(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	log := &pagedLog{pages: [][]json.RawMessage{
		rawItems(`["A",1,"open",[1,2]]`, `["B",1,{"x":1}]`),
		rawItems(`["A",2,"paid",[1,2,3]]`, `["B",2,{"x":2},"tail"]`, `["A",3,"paid",[0,1,2,3]]`),
		rawItems(`["A",4]`, `["B",3,null]`),
	}}
	eng := e.engine(e.poller(func(p *watukuytype.Poller) {
		p.Fetch, p.Version, p.Identity = log.fetch, watukuytype.Field("1"), watukuytype.Field("0")
		p.Changes = watukuytype.Changes{Patch: true, Ignore: []string{"/updated_at"}}
	}), nil)
	e.settle(eng)
	evs := e.rec.events()
	if len(evs) != 7 {
		t.Fatalf("%d events, want 7: %v", len(evs), types(evs))
	}
	for _, ev := range evs {
		if ev.Type == watukuytype.Updated && (ev.Changes == nil || ev.ChangesOmitted != "") {
			t.Errorf("%s@%s carries no patch: %q", ev.Identity, ev.Version, ev.ChangesOmitted)
		}
	}
	failPatchChain(t, evs)
}

// An item nested deeper than encoding/json reads (10,000 levels), which a poller with its own
// Fingerprint does not check: no patch can be made for it, nor an envelope. It must not stop
// the key: the item is parked, or its event goes out without a patch; the items after it are
// delivered.
func TestChangesAnItemNestedTooDeepDoesNotStopTheKey(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	log := &pagedLog{pages: [][]json.RawMessage{
		rawItems(`{"id":"A","state":"open"}`),
		rawItems(`{"id":"A","state":"paid","x":`+deep+`}`, `{"id":"B","state":"open"}`),
	}}
	eng := e.engine(e.poller(func(p *watukuytype.Poller) {
		p.Fetch, p.Version, p.Identity = log.fetch, nil, watukuytype.Field("id")
		p.Fingerprint = func(item json.RawMessage) ([]byte, error) { return []byte(gjsonState(item)), nil }
		p.Changes.Patch = true
	}), nil)
	var errs []string
	for range 5 {
		e.clock.Advance(3 * time.Minute)
		rep, err := eng.Tick(t.Context(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, ke := range rep.Errors {
			errs = append(errs, fmt.Sprint(ke))
		}
	}
	for _, ev := range e.rec.events() {
		if ev.Identity == "B" {
			return
		}
	}
	t.Errorf("B was never delivered in 5 cycles: %v delivered; the cycles failed with %q", types(e.rec.events()), errs)
}

// gjsonState reads an item's state field without decoding the whole item.
func gjsonState(item json.RawMessage) string {
	i := strings.Index(string(item), `"state":"`)
	if i < 0 {
		return ""
	}
	rest := string(item[i+len(`"state":"`):])
	return rest[:strings.IndexByte(rest, '"')]
}

// A worker frozen past its lease between the chunks of a page that changes one identity in
// both, after it read the payloads its patches start from: another worker takes the key and
// commits the page and the identity's later change; the frozen one's next chunk is refused,
// and the chain the consumer sees holds.
func TestChangesWorkerFrozenBetweenChunksPastItsLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		log := &pagedLog{pages: [][]json.RawMessage{rawItems(`{"id":"A","v":1,"a":1}`)}}
		mod := func(p *watukuytype.Poller) {
			p.Fetch, p.Version, p.Identity = log.fetch, watukuytype.Field("v"), watukuytype.Field("id")
			p.CommitMaxItems = 2
			p.Changes.Patch = true
		}
		e.settle(e.engine(e.poller(mod), nil))
		var commits atomic.Int32
		var other *Engine
		h := &hookStore{beforeCommit: func(c core.Commit) {
			if commits.Add(1) == 2 { // before the second chunk
				e.clock.Advance(3 * time.Minute) // past the lease
				e.settle(other)
				log.pages = append(log.pages, rawItems(`{"id":"A","v":4,"d":4}`))
				e.settle(other)
			}
		}}
		frozen := e.engine(e.poller(mod), hooked(h))
		other = e.engine(e.poller(mod), nil)
		log.pages = append(log.pages, rawItems(`{"id":"A","v":2,"b":2}`, `{"id":"B","v":1}`, `{"id":"C","v":1}`, `{"id":"A","v":3,"c":3}`))
		e.clock.Advance(3 * time.Minute)
		rep := e.tick(frozen)
		if commits.Load() < 2 {
			t.Fatalf("the worker was not frozen between chunks (%d commits)", commits.Load())
		}
		if len(rep.Errors) == 0 {
			t.Errorf("the frozen worker's second chunk was not refused: %+v", rep)
		}
		e.settle(other)
		if n := len(e.rec.events()); n != 6 {
			t.Errorf("%d events delivered, want 6: %v", n, types(e.rec.events()))
		}
		failPatchChain(t, e.rec.events())
	})
}
