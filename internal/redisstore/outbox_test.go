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
	r, err := f.s.Begin(context.Background(), f.key, "a", time.Minute, core.BeginForAdd)
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

// The outbox stream exists only while it holds entries. Begin makes none; the first
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
		if _, err := f.s.Ack(ctx, l, outboxEntries("1-1")); err != nil {
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
		if _, err := f.s.Ack(ctx, l, outboxEntries(first[:1]...)); err != nil {
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
			if _, err := f.s.Ack(ctx, l, outboxEntries(want)); err != nil {
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
// empties; a later event of the held ordering key joins its held events; a retry makes the
// poison event and the held one deliverable, read in their commit order without an outbox; a
// discard of a row whose events are gone leaves nothing.
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
		if err := f.s.Park(ctx, l, core.Parking{Poison: []core.Poison{{Entry: core.Entry{StreamID: ids[0], OrderingKey: "p1"}, ParkedID: "p1", Row: []byte(row)}}}); err != nil {
			t.Fatal(err)
		}
		if f.exists() {
			t.Fatal("park emptied the outbox and left it")
		}
		// An event of the held ordering key, committed after the park, joins its held events at
		// once: the outbox stays empty.
		later := f.commit(l, "p1")
		if f.exists() {
			t.Fatal("an event of a held ordering key went to the outbox")
		}
		released, returned, err := f.s.ReleaseParked(ctx, l, true, []string{"p1"})
		if err != nil || released != 1 || returned != 2 {
			t.Fatalf("retry: %d released, %d returned, %v; want 1 and 2", released, returned, err)
		}
		batch, err = f.s.ReadOutbox(ctx, l, 10)
		if err != nil || len(batch.Entries) != 2 || batch.Entries[0].Seq != ids[0] || batch.Entries[1].Seq != later[0] ||
			batch.Entries[0].Member == "" || batch.Entries[0].StreamID != "" {
			t.Fatalf("read after the retry: %+v %v, want the poison event then the held one, as held members", batch, err)
		}
		if f.exists() {
			t.Fatal("the retry made an outbox")
		}
		if _, err := f.s.Ack(ctx, l, batch.Entries); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"held", "released", "holds"} {
			if n := b.Client.Exists(ctx, f.s.Key(f.key, k)).Val(); n != 0 {
				t.Errorf("after the released events were acked, %s exists", k)
			}
		}
		// A discard on the missing outbox: nothing returned, nothing made.
		ids = f.commit(l, "p2")
		row = fmt.Sprintf(`{"kind":"poison","id":"p2","event":{"id":"p2","ok":"p2","ev":"{}","seq":%q}}`, ids[0])
		if _, err := f.s.ReadOutbox(ctx, l, 10); err != nil {
			t.Fatal(err)
		}
		if err := f.s.Park(ctx, l, core.Parking{Poison: []core.Poison{{Entry: core.Entry{StreamID: ids[0], OrderingKey: "p2"}, ParkedID: "p2", Row: []byte(row)}}}); err != nil {
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

// outboxEntries are outbox entries by stream id, for Ack.
func outboxEntries(ids ...string) []core.Entry {
	es := make([]core.Entry, len(ids))
	for i, id := range ids {
		es[i] = core.Entry{StreamID: id}
	}
	return es
}

// A re-sent ack (go-redis after a read timeout) whose first attempt drained and deleted the
// outbox: it finds no stream, writes nothing, keeps outboxLast, and the next event still gets
// an id above every earlier one.
func TestG7OutboxAckResentAfterTheDrain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		l := f.begin()
		ids := f.commit(l, "e1", "e2")
		if _, err := f.s.ReadOutbox(ctx, l, 10); err != nil {
			t.Fatal(err)
		}
		for attempt := 1; attempt <= 2; attempt++ {
			if _, err := f.s.Ack(ctx, l, outboxEntries(ids...)); err != nil {
				t.Fatalf("ack attempt %d: %v", attempt, err)
			}
			if f.exists() || f.last() != ids[1] {
				t.Fatalf("after ack attempt %d: outbox there %v, outboxLast %q; want none and %s", attempt, f.exists(), f.last(), ids[1])
			}
		}
		if batch, err := f.s.ReadOutbox(ctx, l, 10); err != nil || batch.Read != 0 {
			t.Fatalf("read re-sent after the drain: %+v %v", batch, err)
		}
		if next := f.commit(l, "e3"); !streamLess(ids[1], next[0]) {
			t.Fatalf("id %s after the re-sent ack, not above %s", next[0], ids[1])
		}
	})
}

// A holder frozen with entries pending while another took the key, drained and deleted the
// outbox, and made it again for a new event: every call of the frozen one is fenced and the
// new outbox keeps its entry and group.
func TestG1FrozenHolderAfterTheOutboxWasMadeAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		f := &outboxFixture{t: t, b: b, s: s, key: newOutboxFixture(t, b).key}
		a := f.begin()
		ids := f.commit(a, "e1")
		if batch, err := s.ReadOutbox(ctx, a, 10); err != nil || len(batch.Entries) != 1 {
			t.Fatalf("read: %+v %v", batch, err)
		}
		clk.Advance(2 * time.Minute) // a's lease (1 minute) expires while it is frozen
		r, err := s.Begin(ctx, f.key, "b", time.Minute, core.BeginForAdd)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("b's begin: %+v %v", r, err)
		}
		bl := r.Lease
		batch, err := s.ReadOutbox(ctx, bl, 10)
		if err != nil || len(batch.Entries) != 1 || batch.Entries[0].StreamID != ids[0] {
			t.Fatalf("b's read of a's pending entry: %+v %v", batch, err)
		}
		if _, err := s.Ack(ctx, bl, outboxEntries(ids...)); err != nil {
			t.Fatal(err)
		}
		if f.exists() {
			t.Fatal("b's drain left the outbox")
		}
		next := f.commit(bl, "e2")
		// a resumes.
		if _, err := s.ReadOutbox(ctx, a, 10); err == nil {
			t.Error("the frozen holder's read was not fenced")
		}
		if _, err := s.Ack(ctx, a, outboxEntries(next...)); err == nil {
			t.Error("the frozen holder's ack was not fenced")
		}
		if err := s.Park(ctx, a, core.Parking{Held: []core.Held{{Entry: core.Entry{StreamID: next[0], OrderingKey: "e2", Seq: next[0]}, JSON: []byte("{}")}}}); err == nil {
			t.Error("the frozen holder's park was not fenced")
		}
		batch, err = s.ReadOutbox(ctx, bl, 10)
		if err != nil || len(batch.Entries) != 1 || batch.Entries[0].StreamID != next[0] {
			t.Fatalf("b's read of the outbox made again: %+v %v, want %s", batch, err, next[0])
		}
	})
}
