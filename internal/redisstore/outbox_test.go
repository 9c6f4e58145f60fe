package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// outboxFixture is one key with its store, on one backend.
type outboxFixture struct {
	t   *testing.T
	b   redistest.Backend
	s   *Store
	key watukuytype.Key
}

func newOutboxFixture(t *testing.T, b redistest.Backend) *outboxFixture {
	s, _ := newStore(t, b)
	return &outboxFixture{t: t, b: b, s: s, key: watukuytype.Key{Poller: "orders", Partition: "t1"}}
}

func (f *outboxFixture) begin() core.Lease {
	f.t.Helper()
	r, err := f.s.Begin(context.Background(), f.key, "a", time.Minute, core.BeginForDelete)
	if err != nil || r.Status != core.BeginOK {
		f.t.Fatalf("begin: %+v %v", r, err)
	}
	return r.Lease
}

func (f *outboxFixture) commit(l core.Lease, ids ...string) []string {
	f.t.Helper()
	c := core.Commit{}
	for _, id := range ids {
		c.Events = append(c.Events, core.OutboxEvent{ID: id, OrderingKey: id, Envelope: []byte(`{"id":"` + id + `"}`)})
	}
	res, err := f.s.CommitPoll(context.Background(), l, c)
	if err != nil {
		f.t.Fatalf("commit %v: %v", ids, err)
	}
	return res.StreamIDs
}

func (f *outboxFixture) exists() bool {
	f.t.Helper()
	n, err := f.b.Client.Exists(context.Background(), f.s.Key(f.key, "outbox")).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return n == 1
}

func (f *outboxFixture) last() string {
	return f.b.Client.HGet(context.Background(), f.s.Key(f.key, "state"), statehash.OutboxLast).Val()
}

// streamLess orders stream ids "ms-seq".
func streamLess(a, b string) bool {
	var am, as, bm, bs uint64
	_, _ = fmt.Sscanf(a, "%d-%d", &am, &as)
	_, _ = fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am < bm || am == bm && as < bs
}

// Issue 14: the outbox stream exists only while it holds entries. Begin makes none; the first
// event makes it with its group; the ack that drains it deletes it and keeps its last id; the
// next event makes it again with ids above every id handed out before.
func TestOutboxExistsOnlyWhileItHoldsEntries(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		l := f.begin()
		if f.exists() {
			t.Fatal("Begin made an outbox for a key without events")
		}
		if batch, err := f.s.ReadOutbox(ctx, l, 10); err != nil || batch.Read != 0 {
			t.Fatalf("read of a missing outbox: %+v %v, want an empty batch", batch, err)
		}
		if _, err := f.s.Ack(ctx, l, []string{"1-1"}); err != nil {
			t.Fatalf("ack on a missing outbox: %v", err)
		}
		if snap, err := f.s.Inspect(ctx, f.key); err != nil || snap.OutboxLen != 0 || !snap.OutboxOldest.IsZero() {
			t.Fatalf("inspect of a missing outbox: %+v %v", snap, err)
		}
		first := f.commit(l, "e1", "e2")
		if !f.exists() {
			t.Fatal("a commit with events left no outbox")
		}
		batch, err := f.s.ReadOutbox(ctx, l, 10)
		if err != nil || len(batch.Entries) != 2 {
			t.Fatalf("read: %+v %v", batch, err)
		}
		// A reader holding entries pending: an ack of one of them leaves the other, and a
		// commit in between adds to the stream that is there.
		if _, err := f.s.Ack(ctx, l, first[:1]); err != nil {
			t.Fatal(err)
		}
		if !f.exists() {
			t.Fatal("the outbox went with an entry still pending")
		}
		more := f.commit(l, "e3")
		if !streamLess(first[1], more[0]) {
			t.Fatalf("ids went backwards: %v then %v", first, more)
		}
		// Pending entries come first, then the new one.
		for _, want := range []string{first[1], more[0]} {
			batch, err = f.s.ReadOutbox(ctx, l, 10)
			if err != nil || len(batch.Entries) != 1 || batch.Entries[0].StreamID != want {
				t.Fatalf("read after the partial ack: %+v %v, want %s", batch, err, want)
			}
			if _, err := f.s.Ack(ctx, l, []string{want}); err != nil {
				t.Fatal(err)
			}
		}
		if f.exists() {
			t.Fatal("the drained outbox is still there")
		}
		if got := f.last(); got != more[0] {
			t.Fatalf("outboxLast %q, want the last id handed out, %s", got, more[0])
		}
		again := f.commit(l, "e4")
		if !streamLess(more[0], again[0]) {
			t.Fatalf("the outbox made again gave %s, not above %s", again[0], more[0])
		}
		batch, err = f.s.ReadOutbox(ctx, l, 10)
		if err != nil || len(batch.Entries) != 1 || batch.Entries[0].ID != "e4" {
			t.Fatalf("the outbox made again is not read through its group: %+v %v", batch, err)
		}
	})
}

// Ids never go backwards when the outbox is made again after the server clock moved back
// (a failover to a replica whose clock is behind): its first id follows outboxLast.
func TestOutboxIDsStayAboveALastIDAheadOfTheClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		l := f.begin()
		ahead := fmt.Sprintf("%d-7", time.Now().Add(time.Hour).UnixMilli())
		if err := b.Client.HSet(ctx, f.s.Key(f.key, "state"), statehash.OutboxLast, ahead).Err(); err != nil {
			t.Fatal(err)
		}
		ids := f.commit(l, "e1", "e2", "e3")
		var ms int64
		_, _ = fmt.Sscanf(ahead, "%d-", &ms)
		if want := fmt.Sprintf("%d-8", ms); ids[0] != want || !streamLess(ids[0], ids[1]) || !streamLess(ids[1], ids[2]) {
			t.Fatalf("ids %v after outboxLast %s, want %s and on", ids, ahead, want)
		}
		batch, err := f.s.ReadOutbox(ctx, l, 10)
		if err != nil || len(batch.Entries) != 3 || batch.Entries[0].StreamID != ids[0] {
			t.Fatalf("read: %+v %v, want the ids the commit reported %v", batch, err, ids)
		}
	})
}

// Park and parked retry/discard on a drained (missing) outbox: park deletes the outbox it
// empties; a retry makes it again, with its group, for the events it returns, which are read
// in their commit order; a discard of a row whose events are gone leaves none.
func TestOutboxParkedPathsOnAMissingOutbox(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		l := f.begin()
		ids := f.commit(l, "p1")
		batch, err := f.s.ReadOutbox(ctx, l, 10)
		if err != nil || len(batch.Entries) != 1 {
			t.Fatalf("read: %+v %v", batch, err)
		}
		row := fmt.Sprintf(`{"kind":"poison","id":"p1","event":{"id":"p1","ok":"p1","ev":"{}","seq":%q}}`, ids[0])
		if err := f.s.Park(ctx, l, []core.Poison{{StreamID: ids[0], ParkedID: "p1", OrderingKey: "p1", Row: []byte(row)}}, nil); err != nil {
			t.Fatal(err)
		}
		if f.exists() {
			t.Fatal("park emptied the outbox and left it")
		}
		// A held event of the same ordering key, committed after the park: it goes to the
		// held hash on read, emptying the outbox again.
		later := f.commit(l, "p1")
		if batch, err := f.s.ReadOutbox(ctx, l, 10); err != nil || batch.Read != 1 || len(batch.Entries) != 0 {
			t.Fatalf("read of a held ordering key: %+v %v", batch, err)
		}
		if f.exists() {
			t.Fatal("the read that moved the only entry to the held hash left an empty outbox")
		}
		released, returned, err := f.s.ReleaseParked(ctx, l, true, []string{"p1"})
		if err != nil || released != 1 || returned != 2 {
			t.Fatalf("retry: %d released, %d returned, %v; want 1 and 2", released, returned, err)
		}
		batch, err = f.s.ReadOutbox(ctx, l, 10)
		if err != nil || len(batch.Entries) != 2 || batch.Entries[0].Seq != ids[0] || batch.Entries[1].Seq != later[0] {
			t.Fatalf("read after the retry: %+v %v, want the poison event then the held one", batch, err)
		}
		if !streamLess(later[0], batch.Entries[0].StreamID) {
			t.Fatalf("the returned events got id %s, not above %s", batch.Entries[0].StreamID, later[0])
		}
		var acks []string
		for _, e := range batch.Entries {
			acks = append(acks, e.StreamID)
		}
		if _, err := f.s.Ack(ctx, l, acks); err != nil {
			t.Fatal(err)
		}
		if f.exists() {
			t.Fatal("the drained outbox is still there")
		}
		// A discard on the missing outbox: nothing returned, nothing made.
		ids = f.commit(l, "p2")
		row = fmt.Sprintf(`{"kind":"poison","id":"p2","event":{"id":"p2","ok":"p2","ev":"{}","seq":%q}}`, ids[0])
		if _, err := f.s.ReadOutbox(ctx, l, 10); err != nil {
			t.Fatal(err)
		}
		if err := f.s.Park(ctx, l, []core.Poison{{StreamID: ids[0], ParkedID: "p2", OrderingKey: "p2", Row: []byte(row)}}, nil); err != nil {
			t.Fatal(err)
		}
		if released, returned, err := f.s.ReleaseParked(ctx, l, false, []string{"p2"}); err != nil || released != 1 || returned != 0 {
			t.Fatalf("discard: %d released, %d returned, %v", released, returned, err)
		}
		if f.exists() {
			t.Fatal("a discard that returned nothing left an outbox")
		}
	})
}

// Data an older release wrote: an empty outbox (made by every Begin) goes at the next grant,
// a non-empty one stays and is read; partitions delete keeps the last id for the partition
// added again.
func TestOutboxOfAnOlderReleaseAndDelete(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		outbox := f.s.Key(f.key, "outbox")
		if err := b.Client.XGroupCreateMkStream(ctx, outbox, "dispatch", "0").Err(); err != nil {
			t.Fatal(err)
		}
		l := f.begin()
		if f.exists() {
			t.Fatal("Begin kept an older release's empty outbox")
		}
		if got := f.last(); got != "" {
			t.Fatalf("an outbox that never gave an id left outboxLast %q", got)
		}
		ids := f.commit(l, "e1")
		if err := f.s.End(ctx, l, core.EndRequest{NextDue: time.Now()}); err != nil {
			t.Fatal(err)
		}
		l = f.begin()
		if !f.exists() {
			t.Fatal("Begin dropped an outbox with an undelivered entry")
		}
		if err := f.s.DeleteKey(ctx, l); err != nil {
			t.Fatal(err)
		}
		if f.exists() || f.last() != ids[0] {
			t.Fatalf("after partitions delete: outbox there %v, outboxLast %q; want none and %s", f.exists(), f.last(), ids[0])
		}
	})
}
