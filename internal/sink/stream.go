package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/watukuytype"
)

// Stream field names of every entry the stream sink adds.
const (
	StreamFieldID    = "id"
	StreamFieldEvent = "event"
)

// Stream XADDs the envelope to a Redis stream that programs in any language read with their
// own consumer groups. Each entry has two fields, in this order: "id" (the event id) and
// "event" (the envelope JSON). With MaxLen > 0 every XADD trims with MAXLEN ~ MaxLen
// (approximate trimming: the stream keeps at least MaxLen entries, a little more until a
// whole node can go). Trimming drops the oldest entries whether or not a consumer group has
// read them, so size MaxLen for the slowest reader; 0 keeps everything.
//
// Delivery is at least once: an XADD whose answer was lost (a timeout) is retried by the
// engine and adds the event again, so readers deduplicate by the "id" field.
type Stream struct {
	Client redis.UniversalClient
	Key    string
	MaxLen int64
}

// Handle adds one event. It is safe for concurrent use.
func (s *Stream) Handle(ctx context.Context, ev watukuytype.Event) error {
	if s == nil || s.Client == nil {
		return errors.New("sink: stream: no redis client")
	}
	if s.Key == "" {
		return errors.New("sink: stream: no stream key")
	}
	if s.MaxLen < 0 {
		return fmt.Errorf("sink: stream %q: negative maxLen %d", s.Key, s.MaxLen)
	}
	body, err := Envelope(ev)
	if err != nil {
		return err
	}
	args := &redis.XAddArgs{
		Stream: s.Key,
		Values: []any{StreamFieldID, ev.ID, StreamFieldEvent, body},
	}
	if s.MaxLen > 0 {
		args.MaxLen, args.Approx = s.MaxLen, true
	}
	if err := s.Client.XAdd(ctx, args).Err(); err != nil {
		return fmt.Errorf("sink: stream %q: event %s: xadd: %w", s.Key, ev.ID, err)
	}
	return nil
}
