// Package core is the engine: the cycle runner, the dispatcher, the lease keeper and the Store
// interface they drive. It knows nothing of Redis, asynq or the network (a test enforces it);
// internal/redisstore implements Store.
package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Key names the unit of scheduling, leasing, state and ordering: one partition of a poller.
type Key struct {
	Poller    string
	Partition string
}

// String renders the key as "poller|partition", its member name in the due set.
func (k Key) String() string { return k.Poller + "|" + k.Partition }

// ParseKey is the inverse of Key.String.
func ParseKey(s string) (Key, error) {
	for i := 0; i < len(s); i++ {
		if s[i] == '|' {
			return Key{Poller: s[:i], Partition: s[i+1:]}, nil
		}
	}
	return Key{}, fmt.Errorf("core: malformed key %q (want poller|partition)", s)
}

// Page is one response of a poller's Fetch.
type Page struct {
	// Items are the raw JSON items of the page, in the API's order.
	Items []json.RawMessage
	// Next is the cursor after this page; it is committed together with the page's events.
	Next string
	// HasMore asks for another page in the same cycle.
	HasMore bool
	// NotModified marks a 304: the page is empty, the cycle is idle and deletes are off.
	NotModified bool
	// RateLimit carries the response's rate-limit headers; the engine paces by it.
	RateLimit *RateLimit
	// ETag is the response's entity tag. The engine commits it with what the page wrote, so
	// the next request for the same cursor can be conditional (FetchRequest.ETag) and a 304
	// always means "what is committed".
	ETag string
}

// FetchRequest is what the engine hands a poller's Fetch.
type FetchRequest struct {
	Key Key
	// Cursor is the lane's cursor ("" at the very start).
	Cursor string
	// Lane is "live", "reconcile" or "backfill".
	Lane string
	// Page counts the pages of this lane's pass in the cycle, from 0.
	Page int
	// ETag is the committed entity tag of the last answer to this same request (live lane,
	// same cursor): send it as If-None-Match. It is empty when there is none or the answer
	// must be a full one (a listing with delete candidates to confirm).
	ETag string
}

// FetchFunc fetches one page.
type FetchFunc func(ctx context.Context, req FetchRequest) (Page, error)

// DetailFunc fetches one item by identity; found is false when the API says it does not
// exist (HTTP 404 or 410).
type DetailFunc func(ctx context.Context, key Key, identity string) (item json.RawMessage, found bool, err error)

// Strategy is how a poller's cursor works.
type Strategy int

const (
	// Custom: Fetch derives the next cursor and HasMore itself.
	Custom Strategy = iota
	// SnapshotDiff: a full listing every cycle (the cursor only pages within the cycle);
	// identities missing from a complete listing are deleted (G6).
	SnapshotDiff
)

// PoisonMode says what happens to an event whose handler keeps failing.
type PoisonMode int

const (
	// PoisonPark parks the event and holds its ordering key (the default).
	PoisonPark PoisonMode = iota
	// PoisonHalt leaves the event in the outbox and opens the key's circuit.
	PoisonHalt
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
	Lane          string          `json:"lane"`
	Identity      string          `json:"identity"`
	Version       string          `json:"version,omitempty"`
	Seq           string          `json:"seq,omitempty"`
	ObservedAt    time.Time       `json:"observedAt"`
	SchemaVersion int             `json:"schemaVersion"`
	Item          json.RawMessage `json:"item,omitempty"`
}

// Handler receives events. An error (or a panic) is a failed attempt.
type Handler func(ctx context.Context, ev Event) error

// ConfigError is an invalid poller definition or setting; it names the poller and field.
type ConfigError struct {
	Poller string
	Field  string
	Msg    string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("watukuy: config: poller %q: %s: %s", e.Poller, e.Field, e.Msg)
}

// LeaseLostError reports a fenced write rejected because the lease's epoch is stale or the
// lease expired; the write changed nothing.
type LeaseLostError struct {
	Key    Key
	Epoch  int64
	Reason string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("watukuy: lease lost on %s (epoch %d): %s", e.Key, e.Epoch, e.Reason)
}

// HTTPError is a non-success answer of a third-party API.
type HTTPError struct {
	Key        Key
	StatusCode int
	URL        string
	// Body is the start of the response body (at most 512 bytes), for lastError.
	Body string
	// RetryAfter is the parsed Retry-After header (0 when absent or malformed).
	RetryAfter time.Duration
	// RateLimit is what the response's rate-limit headers said, if anything.
	RateLimit *RateLimit
}

// RateLimit is a rate-limit window as an API reported it in its response headers.
type RateLimit struct {
	// Limit is the request quota of the window (0 when unknown).
	Limit int
	// Remaining is what is left of it.
	Remaining int
	// Reset is the time until the window resets.
	Reset time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("watukuy: %s: HTTP %d from %s", e.Key, e.StatusCode, e.URL)
}

// CursorStallError reports a cursor that cannot advance: a full page whose items all carry
// the cursor's own timestamp, from an API without a tie-breaker. Re-asking would loop forever.
type CursorStallError struct {
	Key    Key
	Cursor string
	Msg    string
}

func (e *CursorStallError) Error() string {
	return fmt.Sprintf("watukuy: cursor stall on %s at %q: %s", e.Key, e.Cursor, e.Msg)
}

// IsLeaseLost reports whether err is (or wraps) a LeaseLostError.
func IsLeaseLost(err error) bool {
	var l *LeaseLostError
	return errors.As(err, &l)
}

// NotFoundError names a poller or partition that neither this engine nor the registry knows.
type NotFoundError struct {
	Poller    string
	Partition string
	// PartitionMissing is true when the poller exists but the partition does not.
	PartitionMissing bool
	// Known lists the pollers (or the poller's partitions) that exist.
	Known []string
	// Hint says what to do, when there is more to say than the list.
	Hint string
}

func (e *NotFoundError) Error() string {
	var msg string
	if e.PartitionMissing {
		msg = fmt.Sprintf("watukuy: poller %q has no partition %q", e.Poller, e.Partition)
	} else {
		msg = fmt.Sprintf("watukuy: unknown poller %q", e.Poller)
	}
	if len(e.Known) > 0 {
		shown := make([]string, len(e.Known))
		for i, k := range e.Known {
			shown[i] = fmt.Sprintf("%q", k)
		}
		msg += "; known: " + strings.Join(shown, ", ")
	} else if !e.PartitionMissing {
		msg += "; no poller is registered in this Redis (start a worker with the config, or check --redis and --prefix)"
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// ReplayUnavailableError reports a replay of a poller that keeps no event log.
type ReplayUnavailableError struct {
	Key Key
}

func (e *ReplayUnavailableError) Error() string {
	return fmt.Sprintf("watukuy: replay of %s is unavailable: poller %q keeps no event log; set log.retention (e.g. 168h) in its config and restart the workers: events committed from then on can be replayed",
		e.Key, e.Key.Poller)
}

// LayoutError reports a database whose data layout this build cannot run on.
type LayoutError struct {
	Found int
	Known int
}

func (e *LayoutError) Error() string {
	if e.Found > e.Known {
		return fmt.Sprintf("watukuy: the Redis data layout is version %d, newer than this build knows (%d): upgrade watukuy before starting workers against it", e.Found, e.Known)
	}
	return fmt.Sprintf("watukuy: the Redis data layout is version %d, older than this build's %d: run `watukuy migrate` first", e.Found, e.Known)
}
