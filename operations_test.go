package watukuy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/jcs"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// seqPosition places a fakeapi change-feed cursor (a sequence number) on a line.
func seqPosition(cursor string) (float64, bool) {
	n, err := strconv.ParseFloat(cursor, 64)
	return n, err == nil
}

func reached(cursor string, target float64) bool {
	at, ok := seqPosition(cursor)
	return ok && at >= target
}

// byLane splits delivered events by lane and counts distinct identities per lane.
func byLane(evs []watukuytype.Event) map[string][]watukuytype.Event {
	m := map[string][]watukuytype.Event{}
	for _, ev := range evs {
		m[string(ev.Lane)] = append(m[string(ev.Lane)], ev)
	}
	return m
}

// backfillDone ticks until the key's backfill is done (a backfill page of known items emits
// nothing, so settle alone could stop early), then settles.
func (e *env) backfillDone(eng *Engine) {
	e.t.Helper()
	for i := 0; i < 50; i++ {
		ki, err := eng.Inspect(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""})
		if err != nil {
			e.t.Fatal(err)
		}
		if ki.Backfill != nil && ki.Backfill.Done {
			e.settle(eng)
			return
		}
		e.clock.Advance(time.Minute) // past the interval, for a backfill retried after a failure
		e.tick(eng)
	}
	e.t.Fatal("the backfill did not finish in 50 cycles")
}

// Backfill over a history of 10,000 items: the live lane started half way, so the backfill
// emits the 5,000 items it never saw (and only those); the live lane keeps running and goes
// first in every cycle; a forced backfill re-emits all 10,000 as updated with new ids.
func TestBackfillTenThousand(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		e.api.PutMany(10_000, "o", map[string]any{"total": 1})
		p := e.poller(func(p *watukuytype.Poller) {
			p.Fetch = e.api.ChangeFeed(100)
			p.MaxPagesPerCycle = 20
			p.CursorPosition = seqPosition
			p.Delivery.Concurrency = 16
		})
		eng := e.engine(p, nil)
		if err := eng.ResetCursor(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "5000", false); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		if n := len(e.rec.events()); n != 5000 {
			t.Fatalf("live lane from 5000 delivered %d events, want 5000", n)
		}

		bp, err := eng.Backfill(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if bp.From != "" || bp.To != "10000" || bp.Generation != 1 {
			t.Fatalf("backfill started as %+v; want from the beginning to the live cursor 10000", bp)
		}
		// A live change while the backfill runs: the next cycle delivers it before any
		// backfill page.
		e.api.Put("o9000", map[string]any{"total": 2})
		before := len(e.rec.events())
		if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders"}); rep.Err != nil || rep.Outcome != watukuytype.Ran {
			t.Fatalf("cycle: %+v", rep)
		}
		next := e.rec.events()[before:]
		if len(next) < 2 || next[0].Lane != "live" || next[0].Identity != "o9000" || next[1].Lane != "backfill" {
			t.Fatalf("first events of the cycle: %+v", next[:min(len(next), 2)])
		}
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Backfill == nil || ki.Backfill.Done || ki.Backfill.Pages == 0 || ki.Backfill.Fraction == nil || *ki.Backfill.Fraction >= 1 {
			t.Fatalf("backfill progress after one cycle: %+v", ki.Backfill)
		}
		e.backfillDone(eng)

		lanes := byLane(e.rec.events())
		seen := map[string]bool{}
		for _, ev := range lanes["backfill"] {
			n, _ := strconv.Atoi(ev.Identity[1:])
			if ev.Type != watukuytype.Created || n >= 5000 || seen[ev.Identity] {
				t.Fatalf("backfill emitted %s %s (known, or twice)", ev.Type, ev.Identity)
			}
			seen[ev.Identity] = true
		}
		if len(seen) != 5000 || len(lanes["live"]) != 5001 {
			t.Fatalf("backfill emitted %d identities (want 5000), live %d events (want 5001)", len(seen), len(lanes["live"]))
		}
		ki, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if bf := ki.Backfill; bf == nil || !bf.Done || bf.Items < 9_999 || bf.Events != 5000 || *bf.Fraction != 1 || ki.Cursors["backfill"] != bf.Cursor || !reached(bf.Cursor, 10_000) {
			t.Fatalf("finished backfill: %+v cursors %v", bf, ki.Cursors)
		}

		// Forced: every identity again, as updated, with ids no earlier event had.
		ids := map[string]bool{}
		for _, ev := range e.rec.events() {
			ids[ev.ID] = true
		}
		start := len(e.rec.events())
		null := ""
		if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{To: &null, Force: true}); err != nil {
			t.Fatal(err)
		}
		e.backfillDone(eng)
		forced := e.rec.events()[start:]
		again := map[string]bool{}
		for _, ev := range forced {
			if ev.Lane != "backfill" || ev.Type != watukuytype.Updated || ids[ev.ID] {
				t.Fatalf("forced backfill event %+v (lane, type, or a reused id)", ev)
			}
			again[ev.Identity] = true
		}
		if len(forced) != 10_000 || len(again) != 10_000 {
			t.Fatalf("forced backfill delivered %d events for %d identities, want 10000", len(forced), len(again))
		}
	})
}

// A snapshotDiff poller has no cursor to go back to: Backfill refuses with a ConfigError.
func TestBackfillRefusesSnapshotDiff(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Strategy = watukuytype.SnapshotDiff; p.Fetch = e.api.Listing(10) }), nil)
	var ce *watukuytype.ConfigError
	if _, err := eng.Backfill(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{}); !errors.As(err, &ce) || ce.Field != "cursor.strategy" {
		t.Fatalf("backfill of a snapshotDiff poller: %v", err)
	}
}

// Replay after the handler lost its data: the logged events come back with the same ids, a
// fresh sequence and lane replay. Without log.retention: ReplayUnavailableError.
func TestReplayAfterDataLoss(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 30)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.LogRetention = time.Hour }), nil)
		from := time.Now().Add(-time.Minute)
		e.settle(eng)
		first := e.rec.events()
		if len(first) != 30 {
			t.Fatalf("delivered %d events, want 30", len(first))
		}
		e.rec = &recorder{} // the consumer's database is gone
		eng = e.engine(e.poller(func(p *watukuytype.Poller) { p.LogRetention = time.Hour; p.Handler = e.rec.handle }), nil)
		n, err := eng.Replay(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, from, time.Time{})
		if err != nil || n != 30 {
			t.Fatalf("replay: %d, %v", n, err)
		}
		e.settle(eng)
		again := e.rec.events()
		if len(again) != 30 {
			t.Fatalf("redelivered %d events, want 30", len(again))
		}
		byID := map[string]watukuytype.Event{}
		for _, ev := range first {
			byID[ev.ID] = ev
		}
		for _, ev := range again {
			orig, ok := byID[ev.ID]
			if !ok || ev.Lane != "replay" || ev.Seq == orig.Seq || ev.Version != orig.Version || ev.Identity != orig.Identity {
				t.Fatalf("replayed %+v; first delivery %+v", ev, orig)
			}
			delete(byID, ev.ID)
		}
		// A window before the events holds nothing.
		if n, err := eng.Replay(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, from.Add(-time.Hour), from); err != nil || n != 0 {
			t.Fatalf("replay of an empty window: %d, %v", n, err)
		}

		plain := e.engine(e.poller(func(p *watukuytype.Poller) { p.Name = "plain" }), nil)
		var ru *watukuytype.ReplayUnavailableError
		if _, err := plain.Replay(ctx, watukuytype.Key{Poller: "plain", Partition: ""}, from, time.Time{}); !errors.As(err, &ru) {
			t.Fatalf("replay without a log: %v", err)
		}
	})
}

// The log keeps log.retention: a commit trims entries older than that.
func TestReplayLogIsTrimmed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 3)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.LogRetention = time.Hour }), nil)
		logKey := eng.store.Key(watukuytype.Key{Poller: "orders"}, "log")
		old := strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMilli(), 10) + "-0"
		if err := b.Client.XAdd(ctx, &redis.XAddArgs{Stream: logKey, ID: old, Values: []string{"id", "ev_old", "ok", "x", "ev", "{}"}}).Err(); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		msgs, err := b.Client.XRange(ctx, logKey, "-", "+").Result()
		if err != nil || len(msgs) != 3 || msgs[0].ID == old {
			t.Fatalf("log after a commit: %d entries (want the 3 new ones), %v", len(msgs), err)
		}
	})
}

// A paused key sends no request and delivers nothing, even with events in its outbox; resume
// brings both back.
func TestPauseStopsRequestsAndDelivery(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 5)
		e.rec.setFail(func(watukuytype.Event) error { return errors.New("consumer down") })
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Delivery.Poison = watukuytype.PoisonHalt
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
		}), nil)
		e.tick(eng)
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.OutboxPending != 5 {
			t.Fatalf("outbox holds %d events, want 5", ki.OutboxPending)
		}
		if err := eng.Pause(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		e.rec.setFail(nil)
		e.api.Put("o01", map[string]any{"total": 7})
		fetches := e.api.Fetches()
		for i := 0; i < 5; i++ {
			e.clock.Advance(10 * time.Minute)
			if rep := e.tick(eng); rep.Ran != 0 || rep.Delivered != 0 {
				t.Fatalf("a paused key ran: %+v", rep)
			}
		}
		ki, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if e.api.Fetches() != fetches || len(e.rec.events()) != 0 || ki.OutboxPending != 5 || ki.Status != "paused" {
			t.Fatalf("while paused: %d requests, %d deliveries, outbox %d, status %s",
				e.api.Fetches()-fetches, len(e.rec.events()), ki.OutboxPending, ki.Status)
		}
		if err := eng.Resume(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		if n := len(e.rec.events()); n != 6 || e.api.Fetches() == fetches {
			t.Fatalf("after resume: %d deliveries (want 5 pending + 1 update)", n)
		}
	})
}

// A pause that lands while a cycle runs stops it at its next step: no further request, no more
// of the delivery batch than was under way; resume then delivers the rest.
func TestPauseStopsARunningCycle(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 50)
		var mu sync.Mutex
		paused, resumed := false, false
		var after []string
		ops, err := newEngine(Options{Redis: b.Client}, seams{clock: e.clock.Now}) // an operator: the Redis URL only
		if err != nil {
			t.Fatal(err)
		}
		p := e.poller(func(p *watukuytype.Poller) {
			feed := e.api.ChangeFeed(10)
			p.Delivery.Concurrency = 1
			p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				mu.Lock()
				if paused {
					after = append(after, fmt.Sprintf("request page %d", req.Page))
				}
				mu.Unlock()
				return feed(ctx, req)
			}
			p.Handler = func(ctx context.Context, ev watukuytype.Event) error {
				mu.Lock()
				defer mu.Unlock()
				if paused {
					after = append(after, "deliver "+ev.Identity)
				}
				if ev.Identity == "o12" && !paused && !resumed { // page 2 is being delivered
					if err := ops.Pause(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
						return err
					}
					paused = true
				}
				return e.rec.handle(ctx, ev)
			}
		})
		eng := e.engine(p, nil)
		e.tick(eng)
		mu.Lock()
		defer mu.Unlock()
		for _, a := range after {
			if strings.HasPrefix(a, "request") {
				t.Fatalf("after the pause returned: %v", after)
			}
		}
		if len(after) > 9 { // at most the rest of page 2's batch
			t.Fatalf("after the pause returned, %d more deliveries: %v", len(after), after)
		}
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Status != "paused" || ki.Cursor != "20" {
			t.Fatalf("after the cycle: status %s, cursor %q (want paused at page 2's end)", ki.Status, ki.Cursor)
		}
		paused, resumed = false, true
		mu.Unlock()
		if err := ops.Resume(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		mu.Lock()
		if got := len(e.api.Final()); len(e.rec.final()) != got {
			t.Fatalf("after resume: %d identities delivered, the API has %d", len(e.rec.final()), got)
		}
	})
}

// reset-cursor without clearing the snapshot emits only real differences; with
// --clear-snapshot every item comes again as created with the ids of the first time (G2).
func TestResetCursor(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 20)
		eng := e.engine(e.poller(), nil)
		e.settle(eng)
		first := e.rec.events()
		e.api.Put("o03", map[string]any{"total": 3})
		if err := eng.ResetCursor(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "", false); err != nil {
			t.Fatal(err)
		}
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.Cursor != "" || ki.NextDueAt == nil || ki.NextDueAt.After(e.clock.Now()) {
			t.Fatalf("after reset: cursor %q, due %v (now %v)", ki.Cursor, ki.NextDueAt, e.clock.Now())
		}
		e.tick(eng) // due now: no clock advance needed
		if evs := e.rec.events()[len(first):]; len(evs) != 1 || evs[0].Identity != "o03" || evs[0].Type != watukuytype.Updated {
			t.Fatalf("rewind without clearing emitted %+v", evs)
		}
		if err := eng.ResetCursor(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "", true); err != nil {
			t.Fatal(err)
		}
		start := len(e.rec.events())
		e.settle(eng)
		again := e.rec.events()[start:]
		firstIDs := map[string]string{}
		for _, ev := range first {
			firstIDs[ev.Identity] = ev.ID
		}
		if len(again) != 20 {
			t.Fatalf("clear-snapshot re-emitted %d events, want 20", len(again))
		}
		// Created again, each with the id of the change that made its content (G2): the first
		// one's, but o03's update since.
		for _, ev := range again {
			if ev.Type != watukuytype.Created || ev.Identity != "o03" && ev.ID != firstIDs[ev.Identity] {
				t.Fatalf("re-emitted %+v; first id %s", ev, firstIDs[ev.Identity])
			}
		}
	})
}

// Schema drift: bumping schemaVersion with rebaseline (the default) rewrites the stored rows
// silently as items are re-observed; with emit, items whose hash changed are emitted once as
// updated. Event ids include the schema version.
func TestSchemaDrift(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 10)
		listing := func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = e.api.Listing(100)
			p.Version = nil
		}
		eng := e.engine(e.poller(listing), nil)
		e.settle(eng)
		key := watukuytype.Key{Poller: "orders"}
		rowSchema := func(id string) int {
			raw, _ := b.Client.HGet(ctx, eng.store.Key(key, "items"), id).Bytes()
			r, ok := diff.ParseRow(raw)
			if !ok {
				t.Fatalf("no row for %s", id)
			}
			return r.Schema
		}
		// v1, rebaseline: no event, every row rewritten under schema 1.
		eng = e.engine(e.poller(listing, func(p *watukuytype.Poller) { p.SchemaVersion = 1 }), nil)
		start := len(e.rec.events())
		e.settle(eng)
		if n := len(e.rec.events()) - start; n != 0 || rowSchema("o00") != 1 || rowSchema("o09") != 1 {
			t.Fatalf("rebaseline emitted %d events; row schema %d", n, rowSchema("o00"))
		}
		// v2, emit, with a fingerprint that now counts only the id for o05..o09: their hashes
		// change and are emitted once; o00..o04 keep theirs and are rebaselined silently.
		onlyID := func(p *watukuytype.Poller) {
			p.SchemaVersion, p.EmitOnSchemaChange = 2, true
			p.Fingerprint = func(item json.RawMessage) ([]byte, error) {
				id, err := watukuytype.Field("id")(item)
				if id >= "o05" {
					return []byte(id), err
				}
				var cz jcs.Canonicalizer
				h, err := cz.Hash(item)
				return h[:], err
			}
		}
		eng = e.engine(e.poller(listing, onlyID), nil)
		start = len(e.rec.events())
		e.settle(eng)
		evs := e.rec.events()[start:]
		if len(evs) != 5 {
			t.Fatalf("emit after a fingerprint change: %d events, want 5", len(evs))
		}
		for _, ev := range evs {
			if ev.Type != watukuytype.Updated || ev.SchemaVersion != 2 || ev.Identity < "o05" {
				t.Fatalf("schema-change event %+v", ev)
			}
		}
		for i := 0; i < 10; i++ {
			if s := rowSchema(fmt.Sprintf("o%02d", i)); s != 2 {
				t.Fatalf("row o%02d has schema %d after the bump to 2", i, s)
			}
		}
		start = len(e.rec.events())
		e.settle(eng)
		if n := len(e.rec.events()) - start; n != 0 {
			t.Fatalf("emit is once: %d more events", n)
		}
		// Same item, same content, two schema versions: two different ids.
		var vf diff.VF
		if diff.EventID("orders", "", "o0001", "updated", vf, 1, 0, 2) == diff.EventID("orders", "", "o0001", "updated", vf, 2, 0, 2) {
			t.Fatal("event ids do not include the schema version")
		}
	})
}

// Shadow mode polls and commits state but delivers nothing; the would-be events are counted
// in Inspect. Once the flag is removed, only changes from then on are delivered.
func TestShadowDeliversNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 12)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Shadow = true; p.LogRetention = time.Hour }), nil)
		e.settle(eng)
		e.api.Put("o02", map[string]any{"total": 5})
		e.settle(eng)
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if len(e.rec.events()) != 0 || ki.OutboxPending != 0 || ki.Items != 12 || ki.Cursor == "" || !ki.Shadow ||
			ki.ShadowEvents["created"] != 12 || ki.ShadowEvents["updated"] != 1 {
			t.Fatalf("shadow: %d deliveries, inspect %+v", len(e.rec.events()), ki)
		}
		if n, _ := b.Client.XLen(ctx, eng.store.Key(watukuytype.Key{Poller: "orders"}, "log")).Result(); n != 0 {
			t.Fatalf("shadow events reached the replay log: %d", n)
		}
		eng = e.engine(e.poller(), nil) // the flag is removed
		e.api.Put("o03", map[string]any{"total": 6})
		e.settle(eng)
		if evs := e.rec.events(); len(evs) != 1 || evs[0].Identity != "o03" || evs[0].Type != watukuytype.Updated {
			t.Fatalf("after shadow: %+v", evs)
		}
	})
}

// Partitions added at run time are run by the poller's workers; remove pauses and keeps the
// state (resume goes on from the last cursor); delete drops everything, and a stale task of a
// deleted partition neither runs nor brings it back.
func TestPartitionsAtRunTime(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 4)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Partitions = []string{"a"} }), nil)
		e.settle(eng)
		ops, err := newEngine(Options{Redis: b.Client}, seams{clock: e.clock.Now}) // an operator's: the Redis URL only
		if err != nil {
			t.Fatal(err)
		}
		var nf *watukuytype.NotFoundError
		if err := ops.Partitions().Remove(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); !errors.As(err, &nf) || !nf.PartitionMissing {
			t.Fatalf("remove of an unknown partition: %v", err)
		}
		if err := ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		if err := ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err == nil {
			t.Fatal("adding an existing partition succeeded")
		}
		e.settle(eng)
		got := map[string]int{}
		for _, ev := range e.rec.events() {
			got[ev.Partition]++
		}
		if got["a"] != 4 || got["b"] != 4 {
			t.Fatalf("events per partition: %v", got)
		}
		list, err := ops.InspectAll(ctx, "orders")
		if err != nil || len(list) != 2 || list[1].Partition != "b" || list[1].Source != "cli" || list[0].Source != "config" {
			t.Fatalf("partitions: %d, %v", len(list), err)
		}

		if err := ops.Partitions().Remove(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		e.api.Put("o01", map[string]any{"total": 9})
		e.settle(eng)
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: "b"})
		if ki.Status != "removed" || ki.Items != 4 || ki.Cursor == "" {
			t.Fatalf("removed partition: %+v", ki)
		}
		if err := ops.Resume(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		start := len(e.rec.events())
		e.settle(eng)
		if evs := e.rec.events()[start:]; len(evs) != 1 || evs[0].Partition != "b" || evs[0].Identity != "o01" {
			t.Fatalf("resume from the last cursor: %+v", evs)
		}

		if err := ops.Partitions().Delete(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		kb := watukuytype.Key{Poller: "orders", Partition: "b"}
		for _, s := range []string{"items", "outbox", "parked"} {
			if n, _ := b.Client.Exists(ctx, eng.store.Key(kb, s)).Result(); n != 0 {
				t.Fatalf("%s of a deleted partition is still there", s)
			}
		}
		if _, err := ops.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); !errors.As(err, &nf) {
			t.Fatalf("inspect of a deleted partition: %v", err)
		}
		if rep := eng.RunCycle(ctx, kb); rep.Outcome == watukuytype.Ran || rep.Err != nil {
			t.Fatalf("a stale task of a deleted partition: %+v", rep)
		}
		if n, _ := b.Client.Exists(ctx, eng.store.Key(kb, "items")).Result(); n != 0 {
			t.Fatal("a stale task recreated the deleted partition")
		}
		if _, err := b.Client.ZScore(ctx, eng.store.DueKey(kb.Poller), kb.String()).Result(); err == nil {
			t.Fatal("the deleted partition is still in the due set")
		}
		// Added again, it starts afresh.
		if err := ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		start = len(e.rec.events())
		e.settle(eng)
		if n := len(e.rec.events()) - start; n != 4 {
			t.Fatalf("a re-added partition emitted %d events, want 4", n)
		}
	})
}

// Workers refuse a layout newer than they know, and a database holding watukuy data without
// a recorded layout; an empty database is marked current by the first worker, and migrate on
// the current layout changes nothing.
func TestLayoutAndMigrate(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		eng := e.engine(e.poller(), nil)
		if err := eng.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err := eng.Layout(ctx); err != nil || l.Version != l.Current || l.Version != 1 {
			t.Fatalf("a fresh database: %+v, %v", l, err)
		}
		if m, err := eng.Migrate(ctx); err != nil || m.From != 1 || m.To != 1 || len(m.Steps) != 0 {
			t.Fatalf("migrate on the current layout: %+v, %v", m, err)
		}
		var le *watukuytype.LayoutError
		if err := b.Client.Set(ctx, "wk:{global}:layout", "99", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.engine(e.poller(func(p *watukuytype.Poller) { p.Name = "w3" }), nil).Setup(ctx); !errors.As(err, &le) || le.Found != 99 {
			t.Fatalf("a worker on a newer layout: %v", err)
		}
		if _, err := eng.Migrate(ctx); !errors.As(err, &le) {
			t.Fatalf("migrate of a newer layout: %v", err)
		}
		if err := b.Client.Del(ctx, "wk:{global}:layout").Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.engine(e.poller(func(p *watukuytype.Poller) { p.Name = "w4" }), nil).Setup(ctx); !errors.As(err, &le) || le.Found != 0 {
			t.Fatalf("a worker on data without a layout: %v", err)
		}
	})
}

// A rewind drops the committed ETag: a snapshot listing cleared by reset-cursor would
// otherwise get a 304 to its first request and never emit the items again.
func TestResetCursorDropsTheCommittedTag(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 25)
		srv, _ := e.server(fakeapi.ServerOptions{})
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = listCursor(srv, 10).Fetch
		}), nil)
		e.settleTo304(eng)
		start := len(e.rec.events())
		if err := eng.ResetCursor(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		if n := len(e.rec.events()) - start; n != 25 {
			t.Fatalf("reset-cursor --clear-snapshot re-emitted %d items, want 25", n)
		}
	})
}

// A backfill never asks conditionally: a 304 means "unchanged since *you* last asked", and
// the live lane's ETag would end a forced backfill of an unchanged collection at once.
func TestBackfillIgnoresConditionalRequests(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 25)
		srv, _ := e.server(fakeapi.ServerOptions{})
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = listCursor(srv, 10).Fetch }), nil) // page strategy, collection ETag
		e.settleTo304(eng)
		start := len(e.rec.events())
		null := ""
		if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{To: &null, Force: true}); err != nil {
			t.Fatal(err)
		}
		e.backfillDone(eng)
		if n := len(e.rec.events()) - start; n != 25 {
			t.Fatalf("a forced backfill of an unchanged collection emitted %d events, want 25", n)
		}
	})
}

// A failing backfill request does not fail the key: the live lane goes on, no failure is
// counted and no circuit opens. A transient failure is retried at the next cycle; a cursor the
// poller refuses stops the backfill, with the reason in inspect.
func TestBackfillFailureSparesTheLiveLane(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 30)
		var mu sync.Mutex
		failNext := false
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case req.Lane == "backfill" && req.Cursor == "garbage":
				return &watukuytype.ConfigError{Poller: req.Key.Poller, Field: "cursor", Msg: "not a sequence number"}
			case req.Lane == "backfill" && failNext:
				failNext = false
				return errors.New("503 from the API")
			}
			return nil
		})
		eng := e.engine(e.poller(), nil)
		e.settle(eng)
		if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		failNext = true
		mu.Unlock()
		e.api.Put("o01", map[string]any{"total": 100})
		start := len(e.rec.events())
		e.tick(eng)
		ki, _ := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if evs := e.rec.events()[start:]; len(evs) != 1 || evs[0].Identity != "o01" || evs[0].Lane != "live" {
			t.Fatalf("the live lane beside a failing backfill delivered %+v", evs)
		}
		if bf := ki.Backfill; bf == nil || bf.Done || bf.Failed || !strings.Contains(bf.LastError, "503") ||
			ki.LastError != nil || ki.Failures != 0 || ki.Circuit != "closed" {
			t.Fatalf("after a transient backfill failure: backfill %+v, lastError %s, failures %d, circuit %s", bf, ki.LastError, ki.Failures, ki.Circuit)
		}
		e.backfillDone(eng)
		if ki, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); ki.Backfill.LastError != "" {
			t.Fatalf("a finished backfill keeps the old error: %+v", ki.Backfill)
		}

		if _, err := eng.Backfill(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, watukuytype.BackfillRequest{From: "garbage"}); err != nil {
			t.Fatal(err)
		}
		e.tick(eng)
		fetches := e.api.Fetches()
		e.settle(eng)
		ki, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
		if bf := ki.Backfill; bf == nil || !bf.Failed || bf.Done || !strings.Contains(bf.LastError, "CONFIG") || ki.LastError != nil || ki.Status != "idle" {
			t.Fatalf("a refused cursor: backfill %+v, lastError %s, status %s", bf, ki.LastError, ki.Status)
		}
		if n := e.api.Fetches() - fetches; n > 5 {
			t.Fatalf("a failed backfill is retried: %d requests while settling", n)
		}
	})
}
