package watukuytype

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Key names the unit of scheduling, leasing, state and ordering: one partition of a poller.
type Key struct {
	Poller    string
	Partition string
}

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
	// Lane is LaneLive, LaneReconcile or LaneBackfill.
	Lane Lane
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

// RateLimit is a rate-limit window as an API reported it in its response headers.
type RateLimit struct {
	// Limit is the request quota of the window (0 when unknown).
	Limit int
	// Remaining is what is left of it.
	Remaining int
	// Reset is the time until the window resets.
	Reset time.Duration
}

// String renders the key as "poller|partition", its member name in the due set.
func (k Key) String() string { return k.Poller + "|" + k.Partition }

// Describe names the key for people as the CLI flags do: `poller "orders", partition "eu"`,
// or `poller "orders"` for the key of an unpartitioned poller. Messages use it; String is the
// key's Redis member.
func (k Key) Describe() string {
	if k.Partition == "" {
		return fmt.Sprintf("poller %q", k.Poller)
	}
	return fmt.Sprintf("poller %q, partition %q", k.Poller, k.Partition)
}
