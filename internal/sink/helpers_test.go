package sink

import (
	"encoding/json"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// The official Standard Webhooks test vector.
const (
	vecSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTimestamp = int64(1614265330)
	vecPayload   = `{"test": 2432232314}`
	vecSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// secondSecret is a second valid secret (24 bytes), for rotation tests.
const secondSecret = "whsec_c2Vjb25kLXNlY3JldC1rZXktMjQtYnl0ZXM="

func testEvent(id string) watukuytype.Event {
	return watukuytype.Event{
		ID:            id,
		Poller:        "orders",
		Partition:     "t_42",
		Type:          watukuytype.Updated,
		Lane:          "live",
		Identity:      "A-1",
		Version:       "2026-11-29T10:00:00Z",
		Seq:           "1764410400000-0",
		ObservedAt:    time.Date(2026, 11, 29, 10, 0, 1, 123456789, time.UTC),
		SchemaVersion: 2,
		// Whitespace, HTML characters and non-ASCII, so every sink must keep the exact bytes.
		Item: json.RawMessage(`{"id": "A-1", "total": 12.5, "note": "<b>&é", "tags": []}`),
	}
}
