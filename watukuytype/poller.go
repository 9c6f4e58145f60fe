package watukuytype

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidwall/gjson"
)

// Poller is one configured API source.
type Poller struct {
	// Name identifies the poller: letters, digits, '_', '-', '.'; at most 64.
	Name string
	// Partitions lists the instances of the poller (e.g. tenants); empty means one, "".
	Partitions []string
	// Fetch fetches one page for a cursor.
	Fetch FetchFunc
	// Strategy is Custom (default) or SnapshotDiff.
	Strategy Strategy
	// Identity extracts an item's identity; default Field("id"). An error or "" parks the
	// item as invalid.
	Identity func(item json.RawMessage) (string, error)
	// Version extracts an item's version; optional.
	Version func(item json.RawMessage) (string, error)
	// Fingerprint returns the bytes that identify an item's content; default: the RFC 8785
	// canonical SHA-256 of the whole item.
	Fingerprint func(item json.RawMessage) ([]byte, error)
	// SchemaVersion is part of every event id; bump it when the meaning of items changes.
	SchemaVersion int
	// EmitOnSchemaChange emits updated for items whose hash changed across a schema bump;
	// the default (false) is onSchemaChange: rebaseline.
	EmitOnSchemaChange bool
	// Validate checks an item; an error parks it as invalid with the error's text.
	Validate func(item json.RawMessage) error
	// ConfirmDeletes is how many consecutive complete listings (snapshotDiff, reconcile) must
	// miss a stored identity before it is deleted: a listing paged while the API deletes items
	// can miss items that shifted onto pages already read (G6). Default 2; 1 deletes at the
	// first miss.
	ConfirmDeletes int
	// Detail, when set, fetches one item by identity: an identity a complete listing missed is
	// deleted at once when Detail reports it not found (HTTP 404/410), and diffed like a listed
	// item when found. Deletes then wait for Detail's answer: a failed request leaves the
	// identity a candidate for the next listing, and ConfirmDeletes does not apply.
	Detail DetailFunc
	// Tombstone marks items that report a deletion (sync/delta APIs); optional.
	Tombstone func(item json.RawMessage) bool
	// History says the API serves history (a change log, an events API: every change as an
	// entry, old ones included), not items as they are now. A backfill then never writes an
	// entry over a row it is not known to be newer than (versions that order); without it a
	// backfill applies what it reads, as the present.
	History bool
	// Reconcile, when set, lists everything every Reconcile.Every with the same diff and
	// emits deleted for stored identities the complete listing lacks (G6).
	Reconcile *Reconcile
	// Handler receives the events.
	Handler Handler
	// Delivery sets concurrency, ordering, attempts and poison handling.
	Delivery Delivery
	// Schedule sets the polling interval.
	Schedule Schedule
	// LeaseTTL is the lease length; default 30s.
	LeaseTTL time.Duration
	// MaxPagesPerCycle bounds one cycle's pages, its lanes together; default 100. It bounds
	// a cycle's work, never what the poller sees: a cut-short cycle is due again at once, and
	// a complete listing (SnapshotDiff, Reconcile) goes on from where it stopped.
	MaxPagesPerCycle int
	// Failures is the consecutive failure count that opens the circuit; default 5.
	Failures int
	// ProbeEvery is how long an open circuit waits for its probe; default Schedule.Max.
	ProbeEvery time.Duration
	// Backoff spaces failed cycles; default 1s×2 up to 10m. Zero fields take the default's.
	Backoff Backoff
	// LogRetention, when set, keeps every committed event in the key's replay log for this
	// long (log.retention), so Replay can deliver it again.
	LogRetention time.Duration
	// Shadow polls and commits state but delivers nothing: the would-be events are only
	// counted (Inspect shows them). For onboarding a new API safely.
	Shadow bool
	// CommitMaxItems and CommitMaxBytes bound one commit script: a larger page is committed in
	// chunks (only the last moves the cursor), so no single script holds Redis for long.
	// Defaults 1,000 changes and 1 MiB.
	CommitMaxItems int
	CommitMaxBytes int
	// TombstoneRetention is how long a deleted identity is remembered, so that if it is
	// created again its events get ids of their own; default 30 days.
	TombstoneRetention time.Duration
	// CursorPosition places a cursor on a line (e.g. its time in seconds) so a backfill can
	// stop at its target and report how far it is; optional (then a backfill runs until its
	// cursor equals the target or the API has no more).
	CursorPosition func(cursor string) (float64, bool)
	// ItemPosition places an item on CursorPosition's line (e.g. its change time), so that a
	// backfill with a target emits nothing past it (the page that crosses the target is cut
	// there; what lies beyond is the live lane's), does not emit twice the items a page
	// re-lists where the last one ended (an inclusive "since" query), and reports how far it
	// is when it runs from the very beginning; optional, used with CursorPosition.
	ItemPosition func(item json.RawMessage) (float64, bool)
	// CursorFormats, for a cursor that is a time (the timestamp strategy), are the formats the
	// API writes it in (ParseTime's: "rfc3339", "epoch_ms", a Go layout, …). The registry
	// records them, so operator tools (watukuy backfill) read and check a time an operator
	// types without the poller's definition. Empty: the cursor is opaque to them.
	CursorFormats []string
	// SharedRequest says that the poller's requests are the same for every partition (a config
	// request whose URL, query and headers have no ${partition}): a partition added to it
	// would poll the same API again and emit the same events, so partitions add refuses it.
	// The registry records it, so the refusal needs no definition.
	SharedRequest bool
	// Revision names this definition of the poller's requests (the config sets a digest of
	// its request, items, cursor and reconcile settings). A complete listing under way over
	// several cycles that began under another revision starts over: its pages would not line
	// up (another page size, another URL). Empty: every definition is taken as the same.
	Revision string
	// Changes makes updated events say what changed (off by default).
	Changes Changes
	// Budget names a budget of the engine's Options.Budgets, shared by every worker, that each
	// request of this poller takes a token from; it may hold ${partition}. Empty: the poller
	// is paced only by its own keys' throttle windows and the API's rate-limit headers.
	Budget string
}

// Changes configures the change sets of a poller's events.
type Changes struct {
	// Patch keeps each item's payload as last emitted, written in the same fenced commit as
	// its row, and gives every updated event the RFC 6902 JSON Patch that turns that payload
	// into the new item (Event.Changes), and every deleted event the payload
	// (Event.Previous). Created events carry no patch: the item is the whole change.
	Patch bool
	// Ignore lists fields whose changes alone make no updated event, as JSON Pointers
	// ("/updated_at", "/meta/etag") or gjson-style dotted paths ("meta.etag"): the content
	// hash leaves them out. They still change with the next event, whose patch includes
	// them. A poller with a Version emits a new version whatever changed.
	Ignore []string
	// MaxBytes bounds a kept payload; default 64 KiB. An item larger than it is not kept: its
	// updated event carries changes: null and ChangesOmitted says why, never a failure.
	MaxBytes int
}

// DefaultChangesMaxBytes is Changes.MaxBytes when left at zero.
const DefaultChangesMaxBytes = 64 << 10

// Reconcile is a periodic full listing.
type Reconcile struct {
	// Every is the time between listings (the first comes Every after the first cycle).
	Every time.Duration
	// Fetch pages through the full listing; the cursor starts at "" each time.
	Fetch FetchFunc
	// MaxPages bounds the pages of the listing one cycle reads; default 10,000. A longer
	// listing goes on from where it stopped in the key's next cycle (due at once), and its
	// deletes wait until the whole listing completed.
	MaxPages int
}

// Delivery configures the dispatcher.
type Delivery struct {
	// Concurrency is the number of ordering keys delivered at once; default 4.
	Concurrency int
	// Batch is how many outbox events one read takes, delivered and acked together; default
	// 512. A larger batch costs fewer round trips per event; a smaller one acks sooner, so a
	// worker that dies mid-batch delivers fewer events a second time.
	Batch int
	// OrderingKey maps an event to its ordering key; default the identity.
	OrderingKey func(ev Event) string
	// Attempts is how often an event is tried in one try, within a cycle; default 5.
	Attempts int
	// Backoff spaces the attempts of one try; default 100ms doubling up to 5s, full jitter.
	Backoff Backoff
	// Retry spaces the tries of a failed event across cycles: the event stays in the outbox,
	// its ordering key waits behind it (G4), and the key's cycle comes back for it; default
	// 10s doubling up to 1h, full jitter. A failure of the sink itself blocks the key's
	// delivery instead (KeyInfo.Blocked), tried again on the same schedule, capped at
	// Schedule.Max.
	Retry Backoff
	// RetryHorizon is how long an event may keep failing while its sink works before it is
	// poison (parked, or the key halted); default 24h. Negative: poison after one try.
	RetryHorizon time.Duration
	// Poison is PoisonPark (default) or PoisonHalt.
	Poison PoisonMode
}

// Field returns an Identity or Version function that reads a gjson path of the item.
// Numbers and strings are taken as their text; a missing or null field is an error.
func Field(path string) func(item json.RawMessage) (string, error) {
	return func(item json.RawMessage) (string, error) {
		r := gjson.GetBytes(item, path)
		switch r.Type {
		case gjson.String, gjson.Number:
			return r.String(), nil
		case gjson.Null:
			if r.Exists() {
				return "", fmt.Errorf("field %q is null", path)
			}
			return "", fmt.Errorf("field %q is missing", path)
		default:
			return "", fmt.Errorf("field %q is %s, want a string or number", path, r.Type)
		}
	}
}

// Flag returns a Tombstone function that is true when the gjson path of the item is true.
func Flag(path string) func(item json.RawMessage) bool {
	return func(item json.RawMessage) bool { return gjson.GetBytes(item, path).Bool() }
}

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
