package watukuy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/watukuy/watukuy/internal/changeset"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// patched applies ev's patch to prev with an independent RFC 6902 implementation and fails
// unless it gives ev's item.
func patched(t *testing.T, prev json.RawMessage, ev watukuytype.Event) {
	t.Helper()
	p, err := jsonpatch.DecodePatch(ev.Changes)
	if err != nil {
		t.Fatalf("event %s: changes %s do not decode as a JSON Patch: %v", ev.ID, ev.Changes, err)
	}
	got, err := p.Apply(prev)
	if err != nil {
		t.Fatalf("event %s: changes %s do not apply to %s: %v", ev.ID, ev.Changes, prev, err)
	}
	if !changeset.Same(got, ev.Item) {
		t.Fatalf("event %s: changes %s applied to %s give %s, want %s", ev.ID, ev.Changes, prev, got, ev.Item)
	}
}

// With Changes.Patch, an updated event carries the patch from the item as last emitted to
// the new one, a deleted event the item as last emitted; a created event carries neither.
func TestUpdatedEventsCarryTheirPatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy, p.Fetch, p.Version, p.ConfirmDeletes = watukuytype.SnapshotDiff, e.api.Listing(10), nil, 1
			p.Changes = watukuytype.Changes{Patch: true, Ignore: []string{"/updated_at", "updated_seq", "/version"}}
		}), nil)
		e.api.Put("A", map[string]any{"status": "open", "lines": []any{map[string]any{"sku": "x", "qty": 1}}})
		e.settle(eng)
		e.api.Put("A", map[string]any{"status": "paid", "lines": []any{map[string]any{"sku": "x", "qty": 1}, map[string]any{"sku": "y", "qty": 2}}})
		e.settle(eng)
		e.api.Delete("A")
		e.settle(eng)
		evs := e.rec.events()
		if len(evs) != 3 || evs[0].Type != watukuytype.Created || evs[1].Type != watukuytype.Updated || evs[2].Type != watukuytype.Deleted {
			t.Fatalf("events %v, want created, updated, deleted", types(evs))
		}
		if evs[0].Changes != nil || evs[0].Previous != nil || evs[0].ChangesOmitted != "" {
			t.Errorf("the created event carries changes %s, previous %s, omitted %q", evs[0].Changes, evs[0].Previous, evs[0].ChangesOmitted)
		}
		patched(t, evs[0].Item, evs[1])
		if !strings.Contains(string(evs[1].Changes), `"replace"`) || !strings.Contains(string(evs[1].Changes), `"/status"`) {
			t.Errorf("the patch %s does not replace /status", evs[1].Changes)
		}
		if !changeset.Same(evs[2].Previous, evs[1].Item) {
			t.Errorf("the deleted event's previous is %s, want the last item %s", evs[2].Previous, evs[1].Item)
		}
		env, err := json.Marshal(evs[1])
		if err != nil || !strings.Contains(string(env), `"changes":[{"op":`) {
			t.Errorf("the envelope %s does not carry the patch as changes (%v)", env, err)
		}
	})
}

// Changes.Ignore: a touch that changes only ignored fields makes no event; the next real
// change's patch carries the touch too, so it still applies to the consumer's copy.
func TestIgnoredFieldsAloneMakeNoEvent(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	eng := e.engine(e.poller(func(p *watukuytype.Poller) {
		p.Strategy, p.Fetch, p.Version = watukuytype.SnapshotDiff, e.api.Listing(10), nil
		p.Changes = watukuytype.Changes{Patch: true, Ignore: []string{"/updated_at", "updated_seq", "/version"}}
	}), nil)
	e.api.Put("A", map[string]any{"status": "open"})
	e.settle(eng)
	e.api.Put("A", map[string]any{"status": "open"}) // a touch: version, updated_at, updated_seq
	e.settle(eng)
	if evs := e.rec.events(); len(evs) != 1 {
		t.Fatalf("events %v after a touch, want only the created one", types(evs))
	}
	e.api.Put("A", map[string]any{"status": "paid"})
	e.settle(eng)
	evs := e.rec.events()
	if len(evs) != 2 {
		t.Fatalf("events %v, want created and updated", types(evs))
	}
	patched(t, evs[0].Item, evs[1])
	if !strings.Contains(string(evs[1].Changes), `"/updated_seq"`) {
		t.Errorf("the patch %s leaves out the touch's fields", evs[1].Changes)
	}
}

// An item larger than Changes.MaxBytes is not kept: its updates carry changes: null and say
// why, and deliver; once an item fits again, the next update has its patch.
func TestATooLargeItemHasNoPatch(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	eng := e.engine(e.poller(func(p *watukuytype.Poller) {
		p.Changes = watukuytype.Changes{Patch: true, MaxBytes: 200}
	}), nil)
	big := strings.Repeat("x", 300)
	e.api.Put("A", map[string]any{"note": big})
	e.settle(eng)
	e.api.Put("A", map[string]any{"note": "short"})
	e.settle(eng)
	e.api.Put("A", map[string]any{"note": "shorter"})
	e.settle(eng)
	evs := e.rec.events()
	if len(evs) != 3 {
		t.Fatalf("events %v, want created and two updated", types(evs))
	}
	if string(evs[1].Changes) != "null" || evs[1].ChangesOmitted != watukuytype.ChangesTooLarge {
		t.Errorf("the update after a large item: changes %s, omitted %q; want null, %q", evs[1].Changes, evs[1].ChangesOmitted, watukuytype.ChangesTooLarge)
	}
	if env, _ := json.Marshal(evs[1]); !strings.Contains(string(env), `"changes":null`) {
		t.Errorf("the envelope %s does not say changes: null", env)
	}
	patched(t, evs[1].Item, evs[2])
}

// An item emitted before Changes.Patch was turned on has no kept payload: its first update
// says so, the next one has its patch.
func TestPatchTurnedOnLater(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	e.api.Put("A", map[string]any{"status": "open"})
	e.settle(e.engine(e.poller(), nil))
	eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Changes.Patch = true }), nil)
	e.api.Put("A", map[string]any{"status": "paid"})
	e.settle(eng)
	e.api.Put("A", map[string]any{"status": "shipped"})
	e.settle(eng)
	evs := e.rec.events()
	if len(evs) != 3 {
		t.Fatalf("events %v, want created and two updated", types(evs))
	}
	if string(evs[1].Changes) != "null" || evs[1].ChangesOmitted != watukuytype.ChangesUnknown {
		t.Errorf("first update: changes %s, omitted %q; want null, %q", evs[1].Changes, evs[1].ChangesOmitted, watukuytype.ChangesUnknown)
	}
	patched(t, evs[1].Item, evs[2])
}

func types(evs []watukuytype.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Type)+" "+ev.Identity)
	}
	return out
}

// A replayed event carries the patch it had when first emitted (replay copies the logged
// event); a forced backfill's updated events carry a patch against the kept payload (empty
// when nothing changed since).
func TestReplayAndBackfillKeepTheirPatches(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		key := watukuytype.Key{Poller: "orders"}
		withPatch := func(p *watukuytype.Poller) {
			p.LogRetention, p.Changes.Patch, p.Handler = time.Hour, true, e.rec.handle
		}
		eng := e.engine(e.poller(withPatch), nil)
		from := time.Now().Add(-time.Minute)
		e.api.Put("A", map[string]any{"status": "open"})
		e.settle(eng)
		e.api.Put("A", map[string]any{"status": "paid"})
		e.settle(eng)
		first := e.rec.events()
		if len(first) != 2 || first[1].Changes == nil {
			t.Fatalf("events %v, want created then updated with a patch", types(first))
		}
		e.rec = &recorder{}
		eng = e.engine(e.poller(withPatch), nil)
		if n, err := eng.Replay(ctx, key, from, time.Time{}); err != nil || n != 2 {
			t.Fatalf("replay: %d, %v", n, err)
		}
		e.settle(eng)
		again := e.rec.events()
		if len(again) != 2 || again[1].ID != first[1].ID || string(again[1].Changes) != string(first[1].Changes) {
			t.Fatalf("replayed %v with changes %s, want the first delivery's %s", types(again), changesOf(again), first[1].Changes)
		}

		e.rec = &recorder{}
		eng = e.engine(e.poller(withPatch), nil)
		if _, err := eng.Backfill(ctx, key, watukuytype.BackfillRequest{From: "", Force: true}); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		forced := e.rec.events()
		if len(forced) != 1 || forced[0].Type != watukuytype.Updated || string(forced[0].Changes) != "[]" {
			t.Fatalf("forced backfill: %v with changes %s, want one updated event with an empty patch", types(forced), changesOf(forced))
		}
	})
}

func changesOf(evs []watukuytype.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Changes))
	}
	return out
}

// The kept payloads are the key's data like its rows: partitions delete drops them.
func TestPartitionsDeleteDropsThePayloads(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		e.api.Put("A", map[string]any{"status": "open"})
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Partitions, p.Changes.Patch = []string{"a"}, true }), nil)
		e.settle(eng)
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		payloads := eng.store.Key(key, "payloads")
		if n, _ := b.Client.HLen(ctx, payloads).Result(); n != 1 {
			t.Fatalf("%d payloads kept, want 1", n)
		}
		if err := eng.Partitions().Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.Client.Exists(ctx, payloads).Result(); n != 0 {
			t.Fatal("the payloads of a deleted partition are still there")
		}
	})
}

// Turning patch off and on again never patches against an item older than the last one
// emitted: while it is off, each change drops its identity's payload.
func TestPatchTurnedOffAndOnAgain(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	on := func(p *watukuytype.Poller) { p.Changes.Patch = true }
	e.api.Put("A", map[string]any{"status": "open"})
	e.api.Put("B", map[string]any{"status": "open"})
	e.settle(e.engine(e.poller(on), nil))
	e.api.Put("A", map[string]any{"status": "paid"}) // while patch is off
	e.settle(e.engine(e.poller(), nil))
	eng := e.engine(e.poller(on), nil)
	e.api.Put("A", map[string]any{"status": "shipped"})
	e.api.Put("B", map[string]any{"status": "paid"})
	e.settle(eng)
	evs := e.rec.events()
	if len(evs) != 5 {
		t.Fatalf("events %v, want 2 created and 3 updated", types(evs))
	}
	for _, ev := range evs[3:] {
		switch ev.Identity {
		case "A":
			if string(ev.Changes) != "null" || ev.ChangesOmitted != watukuytype.ChangesUnknown {
				t.Errorf("A after patch was off: changes %s, omitted %q; want null, %q", ev.Changes, ev.ChangesOmitted, watukuytype.ChangesUnknown)
			}
		case "B": // unchanged while patch was off: its kept payload is its last item
			patched(t, evs[1].Item, ev)
		}
	}
}
