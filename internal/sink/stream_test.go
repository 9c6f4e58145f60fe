package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redistest"
)

func TestStreamXAdd(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := &Stream{Client: b.Client, Key: "watukuy:{orders}:events"}
		// A reader's group exists before the first event; it starts at the end ("$").
		if err := b.Client.XGroupCreateMkStream(ctx, s.Key, "billing", "$").Err(); err != nil {
			t.Fatal(err)
		}
		evs := []string{"ev_1", "ev_2", "ev_3"}
		for _, id := range evs {
			if err := s.Handle(ctx, testEvent(id)); err != nil {
				t.Fatalf("Handle(%s): %v", id, err)
			}
		}

		msgs, err := b.Client.XRange(ctx, s.Key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != len(evs) {
			t.Fatalf("XRANGE has %d entries, want %d", len(msgs), len(evs))
		}
		for i, m := range msgs {
			want, _ := Envelope(testEvent(evs[i]))
			if len(m.Values) != 2 || m.Values[StreamFieldID] != evs[i] || m.Values[StreamFieldEvent] != string(want) {
				t.Errorf("entry %d = %v, want id %s and event %s", i, m.Values, evs[i], want)
			}
		}
		// The raw reply keeps the field order: id, then event.
		raw, err := b.Client.Do(ctx, "XRANGE", s.Key, "-", "+", "COUNT", 1).Slice()
		if err != nil {
			t.Fatal(err)
		}
		fields := raw[0].([]any)[1].([]any)
		if len(fields) != 4 || fields[0] != StreamFieldID || fields[2] != StreamFieldEvent {
			t.Errorf("field order %v", fields)
		}

		// A consumer group reads every event once and acks it.
		got, err := b.Client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: "billing", Consumer: "c1", Streams: []string{s.Key, ">"}, Count: 10, Block: -1,
		}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || len(got[0].Messages) != len(evs) {
			t.Fatalf("XREADGROUP = %v, want the %d events", got, len(evs))
		}
		for i, m := range got[0].Messages {
			if m.Values[StreamFieldID] != evs[i] {
				t.Errorf("group read %d: %v", i, m.Values)
			}
			if err := b.Client.XAck(ctx, s.Key, "billing", m.ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if p := b.Client.XPending(ctx, s.Key, "billing").Val(); p == nil || p.Count != 0 {
			t.Errorf("pending after ack: %+v", p)
		}
		// A group created later from "0" still sees the whole stream (no MaxLen here).
		if err := b.Client.XGroupCreate(ctx, s.Key, "audit", "0").Err(); err != nil {
			t.Fatal(err)
		}
		late, err := b.Client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: "audit", Consumer: "c1", Streams: []string{s.Key, ">"}, Count: 10, Block: -1,
		}).Result()
		if err != nil || len(late) != 1 || len(late[0].Messages) != len(evs) {
			t.Fatalf("late group read = %v, %v", late, err)
		}
	})
}

func TestStreamMaxLen(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		const maxLen, n = 100, 1000
		s := &Stream{Client: b.Client, Key: "events:trimmed", MaxLen: maxLen}
		for i := 0; i < n; i++ {
			if err := s.Handle(ctx, testEvent(fmt.Sprintf("ev_%04d", i))); err != nil {
				t.Fatal(err)
			}
		}
		l := b.Client.XLen(ctx, s.Key).Val()
		// "MAXLEN ~" keeps at least maxLen and removes only whole nodes (stream-node-max-entries,
		// 100 by default), so the length stays below maxLen plus one node.
		if l < maxLen || l >= maxLen+100 {
			t.Errorf("XLEN = %d after %d events with MaxLen %d, want [%d, %d)", l, n, maxLen, maxLen, maxLen+100)
		}
		last := b.Client.XRevRangeN(ctx, s.Key, "+", "-", 1).Val()
		if len(last) != 1 || last[0].Values[StreamFieldID] != fmt.Sprintf("ev_%04d", n-1) {
			t.Errorf("newest entry %v, want the last event", last)
		}
		oldest := b.Client.XRangeN(ctx, s.Key, "-", "+", 1).Val()
		if len(oldest) != 1 || oldest[0].Values[StreamFieldID] != fmt.Sprintf("ev_%04d", n-l) {
			t.Errorf("oldest entry %v, want ev_%04d (only the oldest are trimmed)", oldest, n-l)
		}
	})
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ev := testEvent("ev_e")
	b := redistest.Miniredis(t)
	for _, c := range []struct {
		s    *Stream
		want string
	}{
		{nil, "no redis client"},
		{&Stream{Key: "k"}, "no redis client"},
		{&Stream{Client: b.Client}, "no stream key"},
		{&Stream{Client: b.Client, Key: "k", MaxLen: -1}, "negative maxLen"},
	} {
		if err := c.s.Handle(ctx, ev); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Handle = %v, want %q", err, c.want)
		}
	}
	bad := testEvent("ev_bad")
	bad.Item = []byte("{")
	if err := (&Stream{Client: b.Client, Key: "k"}).Handle(ctx, bad); err == nil || !strings.Contains(err.Error(), "ev_bad") {
		t.Errorf("bad item: %v", err)
	}
	if n := b.Client.Exists(ctx, "k").Val(); n != 0 {
		t.Errorf("a bad item was added")
	}
}

func TestStreamRedisError(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		if err := b.Client.Set(ctx, "not-a-stream", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		err := (&Stream{Client: b.Client, Key: "not-a-stream"}).Handle(ctx, testEvent("ev_wrong"))
		var re redis.Error
		if err == nil || !strings.Contains(err.Error(), "ev_wrong") || !strings.Contains(err.Error(), `"not-a-stream"`) ||
			!strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Handle = %v, want a WRONGTYPE error naming the event and the key", err)
		}
		if !errors.As(err, &re) {
			t.Errorf("error %v does not wrap the redis error", err)
		}
	})
}
