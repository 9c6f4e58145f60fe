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
	// Changes, on an updated event of a poller with Changes.Patch, is the RFC 6902 JSON Patch
	// (add, remove and replace operations, RFC 6901 paths) that turns the item as last emitted
	// into Item. It is JSON null when no patch could be made, and ChangesOmitted says why.
	Changes json.RawMessage `json:"changes,omitempty"`
	// ChangesOmitted says why an updated event of a poller with Changes.Patch carries no
	// patch: ChangesTooLarge, ChangesUnknown or ChangesFailed.
	ChangesOmitted string `json:"changesOmitted,omitempty"`
	// Previous, on a deleted event of a poller with Changes.Patch, is the item as last
	// emitted (absent when it was not kept).
	Previous json.RawMessage `json:"previous,omitempty"`
}

// Why an updated event carries no patch (Event.ChangesOmitted).
const (
	// ChangesTooLarge: the item, or the one before it, is larger than Changes.MaxBytes and
	// was not kept, or the patch would be.
	ChangesTooLarge = "too large"
	// ChangesUnknown: no payload was kept for the item before it (it was emitted before
	// Changes.Patch was turned on).
	ChangesUnknown = "no previous payload"
	// ChangesFailed: the diff of the two items failed (e.g. nesting deeper than a JSON decoder
	// takes); the worker's log says why.
	ChangesFailed = "diff failed"
)

// Handler receives events. An error (or a panic) is a failed attempt.
type Handler func(ctx context.Context, ev Event) error
