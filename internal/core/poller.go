package core

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/internal/schedule"
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
	Schedule schedule.Config
	// LeaseTTL is the lease length; default 30s.
	LeaseTTL time.Duration
	// MaxPagesPerCycle bounds one cycle's pages; default 100.
	MaxPagesPerCycle int
	// Failures is the consecutive failure count that opens the circuit; default 5.
	Failures int
	// ProbeEvery is how long an open circuit waits for its probe; default Schedule.Max.
	ProbeEvery time.Duration
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
}

// Reconcile is a periodic full listing.
type Reconcile struct {
	// Every is the time between listings (the first comes Every after the first cycle).
	Every time.Duration
	// Fetch pages through the full listing; the cursor starts at "" each time.
	Fetch FetchFunc
	// MaxPages bounds one listing; default 10,000. A longer listing is a CONFIG error and
	// deletes nothing.
	MaxPages int
}

// Delivery configures the dispatcher.
type Delivery struct {
	// Concurrency is the number of ordering keys delivered at once; default 4.
	Concurrency int
	// OrderingKey maps an event to its ordering key; default the identity.
	OrderingKey func(ev Event) string
	// Attempts is how often an event is tried within a cycle before poison; default 5.
	Attempts int
	// Backoff spaces the attempts; default 100ms doubling up to 5s, full jitter.
	Backoff schedule.Backoff
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

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
var partitionRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)

// withDefaults validates p and fills its defaults; errors are *ConfigError.
func (p Poller) withDefaults() (Poller, error) {
	bad := func(field, format string, a ...any) (Poller, error) {
		return p, &ConfigError{Poller: p.Name, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if !nameRE.MatchString(p.Name) {
		return bad("name", "must match %s", nameRE)
	}
	seen := map[string]bool{}
	for _, part := range p.Partitions {
		if !partitionRE.MatchString(part) {
			return bad("partitions", "%q must match %s", part, partitionRE)
		}
		if seen[part] {
			return bad("partitions", "%q is listed twice", part)
		}
		seen[part] = true
	}
	if p.Fetch == nil {
		return bad("fetch", "is required")
	}
	if p.Handler == nil {
		return bad("handler", "is required")
	}
	if p.Strategy != Custom && p.Strategy != SnapshotDiff {
		return bad("strategy", "unknown strategy %d", p.Strategy)
	}
	if p.Identity == nil {
		p.Identity = Field("id")
	}
	if p.SchemaVersion < 0 {
		return bad("schemaVersion", "must not be negative")
	}
	s := &p.Schedule
	if s.Min == 0 {
		s.Min = 5 * time.Second
	}
	if s.Max == 0 {
		s.Max = max(5*time.Minute, s.Min)
	}
	if s.Min < 0 || s.Max < 0 {
		return bad("schedule", "min and max must be positive")
	}
	if s.Min > s.Max {
		return bad("schedule", "min %v is greater than max %v", s.Min, s.Max)
	}
	if s.Jitter == 0 {
		s.Jitter = 0.1
	}
	if s.Jitter < 0 || s.Jitter >= 1 {
		return bad("schedule.jitter", "%v is outside [0, 1)", s.Jitter)
	}
	if p.LeaseTTL == 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	if p.LeaseTTL < 10*time.Millisecond {
		return bad("leaseTTL", "%v is too short", p.LeaseTTL)
	}
	if p.MaxPagesPerCycle == 0 {
		p.MaxPagesPerCycle = 100
	}
	if p.MaxPagesPerCycle < 0 {
		return bad("maxPagesPerCycle", "must be positive")
	}
	if p.CommitMaxItems == 0 {
		p.CommitMaxItems = defaultCommitMaxItems
	}
	if p.CommitMaxBytes == 0 {
		p.CommitMaxBytes = defaultCommitMaxBytes
	}
	if p.CommitMaxItems < 0 || p.CommitMaxBytes < 0 {
		return bad("commit", "maxItems and maxBytes must be positive")
	}
	if p.TombstoneRetention == 0 {
		p.TombstoneRetention = defaultTombstoneRetention
	}
	if p.TombstoneRetention < 0 {
		return bad("tombstoneRetention", "must not be negative")
	}
	if p.LogRetention < 0 {
		return bad("log.retention", "must not be negative")
	}
	if p.ConfirmDeletes == 0 {
		p.ConfirmDeletes = 2
	}
	if p.ConfirmDeletes < 0 {
		return bad("confirmDeletes", "must be positive")
	}
	if p.Failures == 0 {
		p.Failures = 5
	}
	if p.ProbeEvery == 0 {
		p.ProbeEvery = s.Max
	}
	if p.Reconcile != nil {
		rc := *p.Reconcile // the caller's value stays as given
		r := &rc
		p.Reconcile = r
		if r.Every <= 0 {
			return bad("reconcile.every", "must be positive")
		}
		if r.Fetch == nil {
			return bad("reconcile.fetch", "is required")
		}
		if r.MaxPages == 0 {
			r.MaxPages = 10_000
		}
	}
	d := &p.Delivery
	if d.Concurrency == 0 {
		d.Concurrency = 4
	}
	if d.Attempts == 0 {
		d.Attempts = 5
	}
	if d.Concurrency < 0 || d.Attempts < 0 {
		return bad("delivery", "concurrency and attempts must be positive")
	}
	if d.Backoff == (schedule.Backoff{}) {
		d.Backoff = schedule.Backoff{Base: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second}
	}
	if d.Poison != PoisonPark && d.Poison != PoisonHalt {
		return bad("delivery.poison", "unknown mode %d", d.Poison)
	}
	return p, nil
}

// policy is the schedule state machine's view of the poller.
func (p *Poller) policy() schedule.Policy {
	return schedule.Policy{Config: p.Schedule, Failures: p.Failures, ProbeEvery: p.ProbeEvery}
}

// keys lists the poller's keys.
func (p Poller) keys() []Key {
	if len(p.Partitions) == 0 {
		return []Key{{Poller: p.Name}}
	}
	ks := make([]Key, len(p.Partitions))
	for i, part := range p.Partitions {
		ks[i] = Key{Poller: p.Name, Partition: part}
	}
	return ks
}

// Defaults of the commit chunks and tombstones.
const (
	defaultCommitMaxItems     = 1000
	defaultCommitMaxBytes     = 1 << 20
	defaultTombstoneRetention = 30 * 24 * time.Hour
)

// orderingKey applies the poller's ordering key function.
func (p *Poller) orderingKey(ev Event) string {
	if p.Delivery.OrderingKey != nil {
		return p.Delivery.OrderingKey(ev)
	}
	return ev.Identity
}

// callHandler runs the handler, turning a panic into a *handlerPanic error so it never
// crashes a worker.
func (p *Poller) callHandler(ctx context.Context, ev Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &handlerPanic{value: r}
		}
	}()
	return p.Handler(ctx, ev)
}

// handlerPanic is a handler's panic, recovered.
type handlerPanic struct{ value any }

func (h *handlerPanic) Error() string { return fmt.Sprintf("handler panic: %v", h.value) }
