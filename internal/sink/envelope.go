package sink

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/watukuy/watukuy/watukuytype"
)

// Sink is what every sink of this package implements; Handle has the signature of a
// watukuytype.Handler, so a sink's method value (s.Handle) can be registered as the handler.
type Sink interface {
	Handle(ctx context.Context, ev watukuytype.Event) error
}

// Envelope renders the event envelope every sink emits: exactly json.Marshal(ev) of the
// watukuytype.Event, so one event gives the same bytes on a webhook, in a stream and on stdout.
// An item that is not valid JSON is an error (no sink sends a broken envelope).
func Envelope(ev watukuytype.Event) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("sink: envelope of event %s: %w", ev.ID, err)
	}
	return b, nil
}
