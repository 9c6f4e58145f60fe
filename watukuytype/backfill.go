package watukuytype

import "time"

// BackfillProgress is a backfill's state: its range, where its cursor is, what it did.
type BackfillProgress struct {
	From string `json:"from"`
	// To is the target cursor ("" runs until the API has no more).
	To     string `json:"to"`
	Cursor string `json:"cursor"`
	Force  bool   `json:"force"`
	// Generation counts the backfills of the key; forced events carry it in their ids.
	Generation int64 `json:"generation"`
	Pages      int   `json:"pages"`
	Items      int   `json:"items"`
	Events     int   `json:"events"`
	Done       bool  `json:"done"`
	// Failed stops a backfill whose cursor the API or the poller refuses (a malformed cursor,
	// a cursor stall); start a new one.
	Failed bool `json:"failed,omitempty"`
	// LastError is the backfill's last failed request; a transient one is retried at the
	// key's next cycle.
	LastError string `json:"lastError,omitempty"`
	// Fraction is how far the cursor is between From and To, when the poller can place
	// cursors (CursorPosition); from the very beginning (no From) it counts from Origin.
	Fraction *float64 `json:"fraction,omitempty"`
	// Origin is where a backfill from the very beginning began on the cursor's line: its
	// first item's position (Poller.ItemPosition); without one, 0.
	Origin *float64 `json:"origin,omitempty"`
	// Tie holds the identities the last page ended with at its cursor's position (at most
	// 100; Poller.ItemPosition): the next page, which lists them again when its query is
	// inclusive, skips them.
	Tie       []string   `json:"tie,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	DoneAt    *time.Time `json:"doneAt,omitempty"`
}

// BackfillRequest is what Backfill is asked for.
type BackfillRequest struct {
	// From is the cursor to start at ("" from the very beginning).
	From string
	// To is the cursor to stop at; nil means the live cursor at the time of the call.
	To *string
	// Force re-emits identities already known at the same version, as updated.
	Force bool
}
