package watukuytype

import (
	"encoding/json"
	"time"
)

// Outcome says whether a cycle ran or why it was skipped.
type Outcome int

// Cycle outcomes.
const (
	Ran           Outcome = iota // the cycle ran (it may still report an Err)
	SkippedNotDue                // the key was not due
	SkippedLeased                // another instance holds the key's lease
	SkippedPaused                // the key is paused, removed or deleted
	Failed                       // the cycle could not begin (Redis, configuration)
)

// CycleReport is what one cycle did.
type CycleReport struct {
	Key       Key
	Outcome   Outcome
	Pages     int
	Items     int
	Events    int
	Delivered int
	Parked    int
	Invalid   int
	// DeleteCandidates counts stored identities a complete listing missed that are not
	// deleted yet: the next listings (or a Detail request) confirm them first (G6).
	DeleteCandidates int
	Truncated        bool
	NotModified      bool
	// Deferred is how long the shared budget asked the key to wait when it refused one of
	// the cycle's requests (0: it never did); the key is due again after it.
	Deferred time.Duration
	Err      error
}

// LastError is the JSON of KeyInfo.LastError: a key's last failed cycle, kept until one
// succeeds.
type LastError struct {
	// Code is FETCH, THROTTLED, CURSOR_STALL, POISON_HALT, STORE, REPLICATION, CONFIG or
	// INVALID_ITEMS.
	//
	// INVALID_ITEMS (phase "validate") is set by a cycle that ran without any other failure,
	// whose live and reconcile lanes read at least one item, and none of whose items passed
	// identity, version, validation and fingerprint (each was parked as invalid, or skipped as
	// an earlier duplicate of an invalid one on the same page): the cursor moved past items
	// that produced no event. The key's status is then "degraded". A cycle that reads no item
	// (nothing new, a 304) keeps it; it is cleared by a cycle that reads at least one valid
	// item, by a parked retry or discard that leaves the key no parked invalid row, or
	// replaced by another failure's code (which the next successful cycle clears).
	Code    ErrorCode `json:"code"`
	Phase   string    `json:"phase"`
	Message string    `json:"message"`
	At      string    `json:"at"`
}

// PollSummary is the JSON of KeyInfo.LastPoll: what a key's last cycle did. The state hash
// keeps it in a compact form of its own, which stays under Redis's
// listpack value limit so that an idle key's state stays a small listpack.
type PollSummary struct {
	At         string `json:"at"`
	Outcome    string `json:"outcome"` // "ok" or the failure's code
	DurationMs int64  `json:"durationMs"`
	Pages      int    `json:"pages"`
	Items      int    `json:"items"`
	Events     int    `json:"events"`
	Delivered  int    `json:"delivered"`
	Parked     int    `json:"parked"`
	Invalid    int    `json:"invalid"`
	// DeleteCandidates are identities a complete listing missed, not deleted until confirmed.
	DeleteCandidates int  `json:"deleteCandidates,omitempty"`
	Truncated        bool `json:"truncated"`
	NotModified      bool `json:"notModified"`
	Reconciled       bool `json:"reconciled"`
	BackfillPending  bool `json:"backfillPending"`
	// Fresh: this poll found the key current with its API, so KeyInfo.FreshAt is its At (the
	// state then keeps no freshAt of its own, which adds up over a million keys).
	Fresh bool `json:"fresh,omitempty"`
}

// TickReport sums the cycles of one Tick.
type TickReport struct {
	Ran           int `json:"ran"`
	SkippedNotDue int `json:"skippedNotDue"`
	SkippedLeased int `json:"skippedLeased"`
	SkippedPaused int `json:"skippedPaused"`
	Events        int `json:"events"`
	Delivered     int `json:"delivered"`
	// Items counts the items read; Invalid those of them parked as invalid, Parked the events
	// parked as poison. Rows parked while the report says "errors 0" are work that needs an
	// operator (parked ls).
	Items   int `json:"items"`
	Parked  int `json:"parked"`
	Invalid int `json:"invalid"`
	// DeleteCandidates counts identities missed by a complete listing and not yet deleted.
	DeleteCandidates int `json:"deleteCandidates,omitempty"`
	// Repaired counts the keys the repair sweep gave back their missing due entry.
	Repaired int     `json:"repaired"`
	Errors   []error `json:"-"`
}

// KeyInfo is what Inspect reports for a key.
type KeyInfo struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	// Status is idle, running, paused, removed, deleted, circuitOpen, throttled, failing or
	// degraded (the last cycle that read items found none valid: LastError INVALID_ITEMS).
	Status Status `json:"status"`
	Paused bool   `json:"paused"`
	// Source is where the key comes from: "config" or "cli" (partitions add).
	Source string `json:"source,omitempty"`
	// Cursor is the live lane's cursor; Cursors holds every lane's (live, backfill).
	Cursor         string            `json:"cursor"`
	Cursors        map[string]string `json:"cursors"`
	LeaseOwner     string            `json:"leaseOwner,omitempty"`
	LeaseEpoch     int64             `json:"leaseEpoch"`
	LeaseExpires   *time.Time        `json:"leaseExpiresAt,omitempty"`
	NextDueAt      *time.Time        `json:"nextDueAt,omitempty"`
	Interval       time.Duration     `json:"intervalMs"`
	Circuit        CircuitState      `json:"circuit"`
	Failures       int               `json:"consecutiveFailures"`
	ThrottledUntil *time.Time        `json:"throttledUntil,omitempty"`
	RateLimit      json.RawMessage   `json:"rateLimit,omitempty"`
	ReconcileDue   *time.Time        `json:"reconcileDueAt,omitempty"`
	LastPoll       json.RawMessage   `json:"lastPoll,omitempty"`
	// LastError is {code, phase, message, at} of the last failed cycle, until one succeeds.
	LastError json.RawMessage `json:"lastError,omitempty"`
	LagMs     int64           `json:"lagMs"`
	// FreshAt is when a cycle last found the key current with its API (it ran through without
	// failing or degrading, whether or not anything was new: a quiet API stays fresh) or moved
	// it forward with data (committed a page with a valid item, even if it failed later). A
	// cursor stall, failing requests, a throttle, a halted delivery or pages of invalid items
	// leave it where it was. nil until the first such cycle. FreshnessMs is the time since
	// (server clock at Inspect), -1 when FreshAt is nil.
	FreshAt       *time.Time `json:"freshAt,omitempty"`
	FreshnessMs   int64      `json:"freshnessMs"`
	OutboxPending int64      `json:"outboxPending"`
	// OutboxOldestAt is when the oldest event still in the outbox (committed, not yet acked,
	// not held) entered it, by the Redis server's clock; OutboxOldestAgeMs is its age. Both
	// are absent when the outbox is empty.
	OutboxOldestAt    *time.Time `json:"outboxOldestAt,omitempty"`
	OutboxOldestAgeMs int64      `json:"outboxOldestAgeMs,omitempty"`
	// Parked counts every parked row; ParkedPoison and ParkedInvalid split it by kind.
	Parked        int64 `json:"parked"`
	ParkedPoison  int64 `json:"parkedPoison"`
	ParkedInvalid int64 `json:"parkedInvalid"`
	Held          int64 `json:"held"`
	// Blocked is set while the key's delivery is blocked because its sink fails as a whole:
	// events wait in the outbox, the cycles keep polling, and the sink is tried again at
	// NextTry (a trigger tries it at once).
	Blocked *DeliveryBlocked `json:"blocked,omitempty"`
	// Retrying counts the ordering keys whose first event failed and waits for its next try
	// (Delivery.Retry), the first of them at NextRetryAt.
	Retrying      int64      `json:"retrying,omitempty"`
	NextRetryAt   *time.Time `json:"nextRetryAt,omitempty"`
	Items         int64      `json:"items"`
	SchemaVersion int        `json:"schemaVersion"`
	// Backfill is the last backfill's progress, nil when none was started.
	Backfill *BackfillProgress `json:"backfill,omitempty"`
	// Shadow is true for a poller in shadow mode; ShadowEvents counts the events it would
	// have delivered, by type.
	Shadow       bool           `json:"shadow,omitempty"`
	ShadowEvents map[string]int `json:"shadowEvents,omitempty"`
	// LogRetention is how long events are kept for replay (0: no log).
	LogRetention time.Duration `json:"logRetentionMs,omitempty"`
	// CursorFormats are the poller's Poller.CursorFormats, from the registry: set when its
	// cursor is a time written in them.
	CursorFormats []string `json:"cursorFormats,omitempty"`
	// Listings are the complete listings (a snapshotDiff live lane, a reconcile) under way
	// over several cycles: each goes on from where it stopped in the key's next cycle.
	Listings []ListingProgress `json:"listings,omitempty"`
}

// DeliveryBlocked is a key's blocked delivery: "delivery blocked since Since: Error".
type DeliveryBlocked struct {
	Since   time.Time `json:"since"`
	Error   string    `json:"error"`
	Tries   int       `json:"tries"` // failed tries of the sink since
	NextTry time.Time `json:"nextTry"`
}

// ListingProgress is a complete listing that goes on over several cycles.
type ListingProgress struct {
	Lane   Lane      `json:"lane"`
	Pages  int       `json:"pages"`  // read so far
	Cycles int       `json:"cycles"` // that it took so far
	Since  time.Time `json:"since"`  // when its first page was read
}

// ParkedInfo is one parked row.
type ParkedInfo struct {
	ID     string   `json:"id"`
	Kind   string   `json:"kind"`
	Error  string   `json:"error"`
	Errors []string `json:"errors,omitempty"`
	// Stack is the stack of the last failure that carried one (a handler's panic, an error
	// that formats one with %+v), at most 8 KiB.
	Stack       string          `json:"stack,omitempty"`
	Attempts    int             `json:"attempts,omitempty"`
	OrderingKey string          `json:"orderingKey,omitempty"`
	Identity    string          `json:"identity,omitempty"`
	Event       json.RawMessage `json:"event,omitempty"`
	Item        json.RawMessage `json:"item,omitempty"`
	ParkedAt    time.Time       `json:"parkedAt"`
}

// CircuitState is a key's circuit breaker: closed (polling) or open (failing: waiting for
// its probe). Half-open is not stored: a cycle that runs while the circuit is open is the
// probe.
type CircuitState string

// Circuit states.
const (
	CircuitClosed CircuitState = "closed"
	CircuitOpen   CircuitState = "open"
)

// MarshalJSON writes the durations as milliseconds, as their names say.
func (ki KeyInfo) MarshalJSON() ([]byte, error) {
	type plain KeyInfo
	out := struct {
		plain
		Interval     int64 `json:"intervalMs"`
		LogRetention int64 `json:"logRetentionMs,omitempty"`
	}{plain(ki), ki.Interval.Milliseconds(), ki.LogRetention.Milliseconds()}
	return json.Marshal(out)
}
