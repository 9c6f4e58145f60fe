package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
)

// G4 (per-key order) after an outbox made by the release before: a drained stream is deleted
// and its last id kept in outboxLast; a layout-3 worker (reproduced here by its commands: its
// begin.lua makes the outbox with XGROUP CREATE ... MKSTREAM, its commit_poll.lua adds with
// XADD *) would make it again with ids from the server clock, below outboxLast when the clock
// is behind the ids given (the failover outboxLast exists for). Layout 4 keeps such workers
// from running next to this build (they refuse it); what this build must still do is never
// lower outboxLast on the drain of such an outbox, and give its own next id above every id it
// gave.
func TestG4OutboxLastSurvivesAnOlderReleasesOutbox(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		outbox := f.s.Key(f.key, "outbox")
		// The ids given so far are an hour ahead of this server's clock.
		ahead := fmt.Sprintf("%d-7", time.Now().Add(time.Hour).UnixMilli())
		if err := b.Client.HSet(ctx, f.s.Key(f.key, "state"), statehash.OutboxLast, ahead).Err(); err != nil {
			t.Fatal(err)
		}
		var seqs []string // delivered seqs of ordering key "k", in delivery order
		deliver := func(l core.Lease) {
			t.Helper()
			batch, err := f.s.ReadOutbox(ctx, l, 10)
			if err != nil {
				t.Fatal(err)
			}
			var acks []string
			for _, e := range batch.Entries {
				seqs = append(seqs, e.Seq)
				acks = append(acks, e.StreamID)
			}
			if _, err := f.s.Ack(ctx, l, acks); err != nil {
				t.Fatal(err)
			}
		}
		commitK := func(l core.Lease, id string) string {
			t.Helper()
			res, err := f.s.CommitPoll(ctx, l, core.Commit{Events: []core.OutboxEvent{{ID: id, OrderingKey: "k", Envelope: []byte(`{}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			return res.StreamIDs[0]
		}

		// New worker: e1, delivered; the drain deletes the outbox and keeps its id.
		l := f.begin()
		e1 := commitK(l, "e1")
		deliver(l)
		if f.exists() || f.last() != e1 {
			t.Fatalf("after the first drain: outbox there %v, outboxLast %q, want none and %s", f.exists(), f.last(), e1)
		}
		if err := f.s.End(ctx, l, core.EndRequest{NextDue: time.Now()}); err != nil {
			t.Fatal(err)
		}

		// A worker of the release before takes the key: its begin.lua makes the missing outbox
		// (XGROUP CREATE outbox dispatch 0 MKSTREAM), its commit_poll.lua adds e2 with XADD *.
		if err := b.Client.XGroupCreateMkStream(ctx, outbox, "dispatch", "0").Err(); err != nil {
			t.Fatal(err)
		}
		e2, err := b.Client.XAdd(ctx, &redis.XAddArgs{Stream: outbox, ID: "*", Values: []any{"id", "e2", "ok", "k", "ev", "{}"}}).Result()
		if err != nil {
			t.Fatal(err)
		}

		// New worker again: delivers e2, drains, then commits e3.
		l = f.begin()
		deliver(l)
		last := f.last()
		e3 := commitK(l, "e3")
		deliver(l)

		t.Logf("ids: e1 %s (new), e2 %s (older release), e3 %s (new); outboxLast after e2's drain %s", e1, e2, e3, last)
		if streamLess(last, e1) {
			t.Errorf("G4: the drain of the older release's outbox lowered outboxLast from %s to %s", e1, last)
		}
		if !streamLess(e1, e3) {
			t.Errorf("G4: the new code's next id %s is not above %s, an id it gave before", e3, e1)
		}
		if len(seqs) != 3 || seqs[0] != e1 || seqs[2] != e3 {
			t.Errorf("delivered %v, want e1 %s, e2, e3 %s", seqs, e1, e3)
		}
	})
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
			if _, err := f.s.Ack(ctx, l, ids); err != nil {
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
		r, err := s.Begin(ctx, f.key, "b", time.Minute, core.BeginForDelete)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("b's begin: %+v %v", r, err)
		}
		bl := r.Lease
		batch, err := s.ReadOutbox(ctx, bl, 10)
		if err != nil || len(batch.Entries) != 1 || batch.Entries[0].StreamID != ids[0] {
			t.Fatalf("b's read of a's pending entry: %+v %v", batch, err)
		}
		if _, err := s.Ack(ctx, bl, ids); err != nil {
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
		if _, err := s.Ack(ctx, a, next); err == nil {
			t.Error("the frozen holder's ack was not fenced")
		}
		if err := s.Park(ctx, a, nil, []core.Held{{StreamID: next[0], JSON: []byte("{}")}}); err == nil {
			t.Error("the frozen holder's park was not fenced")
		}
		batch, err = s.ReadOutbox(ctx, bl, 10)
		if err != nil || len(batch.Entries) != 1 || batch.Entries[0].StreamID != next[0] {
			t.Fatalf("b's read of the outbox made again: %+v %v, want %s", batch, err, next[0])
		}
	})
}

// An older release's op (its begin.lua makes an empty outbox with its group) on a key whose
// outboxLast is ahead of the clock: the next grant deletes the empty stream and keeps
// outboxLast (the stream gave no id), so ids stay above it.
func TestG4EmptyOutboxOfAnOlderReleaseKeepsOutboxLast(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newOutboxFixture(t, b)
		ahead := fmt.Sprintf("%d-7", time.Now().Add(time.Hour).UnixMilli())
		if err := b.Client.HSet(ctx, f.s.Key(f.key, "state"), statehash.OutboxLast, ahead).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.XGroupCreateMkStream(ctx, f.s.Key(f.key, "outbox"), "dispatch", "0").Err(); err != nil {
			t.Fatal(err)
		}
		l := f.begin()
		if f.exists() || f.last() != ahead {
			t.Fatalf("after the grant: outbox there %v, outboxLast %q; want none and %s", f.exists(), f.last(), ahead)
		}
		if ids := f.commit(l, "e1"); !streamLess(ahead, ids[0]) {
			t.Fatalf("id %s, not above outboxLast %s", ids[0], ahead)
		}
	})
}
