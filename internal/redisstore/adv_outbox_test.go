package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
)

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
