package watukuytype

import (
	"context"
	"encoding/json"
	"time"
)

// EventType is created, updated or deleted.
type EventType string

// The three event types.
const (
	Created EventType = "created"
	Updated EventType = "updated"
	Deleted EventType = "deleted"
)

// Event is the envelope every handler and sink receives.
type Event struct {
	ID            string          `json:"id"`
	Poller        string          `json:"poller"`
	Partition     string          `json:"partition"`
	Type          EventType       `json:"type"`
	Lane          Lane            `json:"lane"`
	Identity      string          `json:"identity"`
	Version       string          `json:"version,omitempty"`
	Seq           string          `json:"seq,omitempty"`
	ObservedAt    time.Time       `json:"observedAt"`
	SchemaVersion int             `json:"schemaVersion"`
	Item          json.RawMessage `json:"item,omitempty"`
}

// Handler receives events. An error (or a panic) is a failed attempt.
type Handler func(ctx context.Context, ev Event) error
