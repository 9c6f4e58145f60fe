package core

import (
	"context"
	"errors"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// BeginMode says what a Begin starts, and so what it checks before the lease.
type BeginMode int

const (
	// BeginForCycle starts a cycle: deleted, paused, due, then the lease.
	BeginForCycle BeginMode = iota
	// BeginForOp starts an operator's action: deleted (a deleted key takes none, and nothing
	// is written), then the lease.
	BeginForOp
	// BeginForDelete starts partitions delete: the lease only, so that a delete again
	// finishes one cut short; the key is marked deleted as the lease is granted.
	BeginForDelete
	// BeginForAdd starts partitions add: the lease only (a deleted key comes back).
	BeginForAdd
)

// ErrKeyDeleted is what Store.Pause, Resume and Trigger return for a key partitions delete
// has deleted.
var ErrKeyDeleted = errors.New("the key is deleted")

// Store is the narrow interface between the engine and its database. Every method that takes
// a Lease is fenced: it fails with *LeaseLostError, having written nothing, when the lease's
// epoch is stale or the lease expired. Methods without a Lease are unfenced and safe to call
// from any process.
type Store interface {
	// ClaimDue atomically takes up to limit keys of the named pollers (all registered pollers
	// when none) whose due time has passed, earliest due first, and pushes them forward by
	// claimTimeout, or when it is 0 by their poller's lease TTL plus ClaimGrace (as
	// registered; DefaultLeaseTTL for a poller registered without one). Its cost does not
	// depend on the keys of other pollers.
	ClaimDue(ctx context.Context, limit int, claimTimeout time.Duration, pollers []string) ([]watukuytype.Key, error)
	// HoldClaim raises a claimed key's due time to until (server time), only while the key
	// is claimed (due later than now) and never lowering it: the lease keeper holds a running
	// cycle's claim up to its renewed lease's end plus ClaimGrace, so a claim lapses when a
	// dead cycle's lease does.
	HoldClaim(ctx context.Context, key watukuytype.Key, until time.Time) error
	// Begin starts a cycle or an operation (mode), taking the lease when allowed.
	Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, mode BeginMode) (BeginResult, error)
	// Renew extends the lease and returns its new expiry (server clock) and whether the key
	// was paused meanwhile.
	Renew(ctx context.Context, l Lease) (Confirm, error)
	// LoadRows returns what is stored of identities, index by index: rows and tombstones, and
	// what want asks for besides.
	LoadRows(ctx context.Context, key watukuytype.Key, identities []string, want LoadWant) (StoredRows, error)
	// LoadPayloads returns the payloads kept of identities (Commit.Payloads), index by index:
	// nil where none is kept, empty where the item was too large to keep.
	LoadPayloads(ctx context.Context, key watukuytype.Key, identities []string) ([][]byte, error)
	// Identities lists every tracked identity of key.
	Identities(ctx context.Context, key watukuytype.Key) ([]string, error)
	// Listed reads the identities a listing of lane that spans cycles has shown so far, each
	// with whether it was valid (Commit.Listed).
	Listed(ctx context.Context, key watukuytype.Key, lane watukuytype.Lane) (map[string]bool, error)
	// CommitPoll writes one page atomically and returns the outbox sequence of each event. A
	// commit the store finds already applied (the client re-sent it) writes nothing again
	// and reports Duplicate.
	CommitPoll(ctx context.Context, l Lease, c Commit) (CommitResult, error)
	// ReadOutbox takes up to n entries: pending ones of earlier owners first. Entries of held
	// ordering keys move aside; the batch counts them in Read.
	ReadOutbox(ctx context.Context, l Lease, n int) (Batch, error)
	// Ack acknowledges and deletes delivered entries, given in sequence order, and reports
	// whether the key was paused meanwhile.
	Ack(ctx context.Context, l Lease, acked []Entry) (paused bool, err error)
	// Park moves failed entries aside: poison entries are parked (holding their ordering
	// keys), entries to try again later wait first among their ordering key's held events
	// (released at their time), and the outbox entries of those ordering keys join their held
	// events.
	Park(ctx context.Context, l Lease, p Parking) error
	// End saves the schedule, releases the lease and writes the key's next due time (as
	// SetDue does). A trigger that landed since Begin (the generation moved) keeps the key
	// due now. With e.Next set it may send that key's Begin in the same round trip and
	// answer it there (Next.Sent), whatever End's own outcome.
	End(ctx context.Context, l Lease, e EndRequest) error
	// ReleaseParked retries or discards parked rows under the lease.
	ReleaseParked(ctx context.Context, l Lease, retry bool, ids []string) (released, returned int, err error)
	// SetDue writes the key's due time without touching its state (skipped cycles), unless
	// the key is due now: a claim pushes a claimed key past now before its Begin, so a due
	// time <= now was written since by a trigger, resume or partitions add, and is kept.
	SetDue(ctx context.Context, key watukuytype.Key, at time.Time) error
	// Register writes the pollers' descriptions and registers config keys: a new key gets a
	// registry entry (config) and a due entry, due now; a key added with partitions add
	// becomes a config key; a deleted key stays deleted. Keys are never dropped: a key its
	// config no longer lists stays registered.
	Register(ctx context.Context, pollers map[string][]byte, keys []watukuytype.Key) error
	// Pollers reads every registered poller's description, by name.
	Pollers(ctx context.Context) (map[string][]byte, error)
	// Lookup reads the description of key's poller (nil when absent) and key's registry
	// entry (found false when it has none), reading the same bytes however many keys the
	// poller has.
	Lookup(ctx context.Context, key watukuytype.Key) (poller []byte, entry RegEntry, found bool, err error)
	// ListKeys reads up to limit keys of poller's registry in partition order, after the
	// partition *after (from the first key when after is nil); fewer than limit means the
	// registry ends there.
	ListKeys(ctx context.Context, poller string, after *string, limit int) ([]RegKey, error)
	// AddKey registers the key under its lease (Begin with BeginForAdd) as added with
	// partitions add (a deleted config key becomes a config key again) and makes it due now;
	// revive drops what a deleted key left (it comes back empty, its lives and outbox ids
	// above the deleted ones'). A key registered and not deleted is left as it is: existed.
	AddKey(ctx context.Context, l Lease, revive bool) (existed bool, err error)
	// DeleteKey removes key's state, snapshot, outbox, parked rows and log under the lease
	// (Begin with BeginForDelete), raises its poller's high-water marks to the key's epoch
	// and lives, forgets the key (a config key stays registered, deleted, since its config
	// may list it) and drops its due entry; a deletion mark refuses stale tasks for a while.
	DeleteKey(ctx context.Context, l Lease) error
	// Unschedule drops key from the due set (a deleted key found by a stale task), unless it
	// is due now (a partitions add since the claim brought it back), as SetDue.
	Unschedule(ctx context.Context, key watukuytype.Key) error
	// RepairDue gives every registered key that is not deleted and has no due entry one (at
	// its state's next due time, or now), and returns those keys. It reads the registry in
	// pages.
	RepairDue(ctx context.Context) ([]watukuytype.Key, error)
	// ReadLog returns at most n of the key's logged events committed in [from, to], oldest
	// first, starting after the entry whose StreamID is after (when not "").
	ReadLog(ctx context.Context, key watukuytype.Key, from, to time.Time, after string, n int) ([]Entry, error)
	// Layout reads the recorded data layout and the one this build writes.
	Layout(ctx context.Context) (watukuytype.Layout, error)
	// Migrate upgrades the data layout in place to the current one and records it; it is
	// idempotent. An empty database is simply marked current.
	Migrate(ctx context.Context) (watukuytype.Migration, error)
	// Pause stops cycles of key until Resume; a deleted key (partitions delete) is
	// ErrKeyDeleted, and nothing is written.
	Pause(ctx context.Context, key watukuytype.Key) error
	// Resume lifts a pause and makes the key due now; a deleted key is ErrKeyDeleted, and
	// nothing is written into its deletion mark or due set.
	Resume(ctx context.Context, key watukuytype.Key) error
	// Trigger makes the key due now (a circuit-open key gets its probe); a deleted key is
	// ErrKeyDeleted, as for Resume.
	Trigger(ctx context.Context, key watukuytype.Key) error
	// ClearThrottle removes the key's Retry-After window (state field statehash.Throttled) and
	// returns the end it had, zero when there was none.
	ClearThrottle(ctx context.Context, key watukuytype.Key) (time.Time, error)
	// Inspect reads a key's state, lease and counters.
	Inspect(ctx context.Context, key watukuytype.Key) (Snapshot, error)
	// InspectMany reads the state, lease and counters of each key, in one round trip.
	InspectMany(ctx context.Context, keys []watukuytype.Key) ([]Snapshot, error)
	// ListParked returns up to limit of the key's parked rows (JSON) whose ids start with
	// prefix ("" for all), in id order, after the id after ("" from the first).
	ListParked(ctx context.Context, key watukuytype.Key, prefix, after string, limit int) ([]ParkedJSON, error)
	// ParkedRows reads the named parked rows (nil where there is none).
	ParkedRows(ctx context.Context, key watukuytype.Key, ids []string) ([][]byte, error)
	// CountParked counts the parked rows of each key, in one round trip.
	CountParked(ctx context.Context, keys []watukuytype.Key) ([]int64, error)
	// CountScheduled counts each poller's keys in its due set (the keys that are registered
	// and not deleted), in one round trip.
	CountScheduled(ctx context.Context, pollers []string) ([]int64, error)
	// TakeToken asks a shared budget's bucket for one request's token (unfenced: a bucket is
	// no key's).
	TakeToken(ctx context.Context, t BudgetTake) (BudgetGrant, error)
	// PauseBudget keeps every request of the bucket back for d from now (the server's now),
	// unless a pause that ends later is in force; it returns the end of the pause in force.
	PauseBudget(ctx context.Context, bucket string, d time.Duration) (time.Time, error)
	// Buckets reads the named buckets (a missing one is full and not paused) and the server's
	// now, in one round trip.
	Buckets(ctx context.Context, names []string) (map[string]Bucket, time.Time, error)
}

// BudgetTake asks a bucket for one request's token.
type BudgetTake struct {
	Bucket   string
	Key      watukuytype.Key // the key asking (its held token, when Hold is set)
	Interval time.Duration   // the time one token takes to come back
	Burst    int
	Reserve  int           // tokens the request must leave for the lanes above its own
	SitOut   time.Duration // the longest wait the caller sits out now
	// Hold, when set, lets a token whose wait is longer than SitOut (up to Hold) be held for
	// the key in the bucket: the key yields and its next ask gets that token back.
	Hold time.Duration
}

// BudgetGrant is a bucket's answer: Taken, the request goes after Wait (a Wait beyond SitOut:
// the token is held for the key); not taken, the bucket could serve it after Wait
// (PausedUntil, when not zero, is the pause that refused it).
type BudgetGrant struct {
	Taken       bool
	Wait        time.Duration
	PausedUntil time.Time
	At          time.Time // the bucket's clock when it answered
	Held        bool      // the token is one the key held (given now, or kept on)
}

// Bucket is a bucket's stored state; the zero value is a full bucket with no pause.
type Bucket struct {
	TAT         time.Time // when the bucket is full again
	PausedUntil time.Time
}

// Lease is the right to mutate one key, valid while its epoch and token are current and it
// has not expired. The token is random per grant: a failover that loses the grant that raised
// the epoch can make an epoch repeat, never a token.
type Lease struct {
	Key   watukuytype.Key
	Owner string
	Epoch int64
	Token string
	TTL   time.Duration
}

// Confirm is what a renewal found.
type Confirm struct {
	// Expires is the lease's new expiry (server clock).
	Expires time.Time
	// Paused is true when an operator paused the key: the cycle stops at its next step.
	Paused bool
}

// Batch is what one ReadOutbox took.
type Batch struct {
	// Read counts every entry taken from the outbox, held ones (moved aside) included: a
	// batch with Read > 0 and no Entries does not mean the outbox is drained.
	Read int
	// Paused is true when an operator paused the key.
	Paused bool
	// Unreplicated is true when the store waits for replicas and they did not confirm the
	// outbox in time: the entries must not be delivered yet (a failover could lose them).
	Unreplicated bool
	// Entries are the deliverable entries, in sequence order.
	Entries []Entry
}

// BeginStatus is the outcome of Begin.
type BeginStatus int

// Begin outcomes.
const (
	BeginOK BeginStatus = iota
	BeginPaused
	BeginNotDue
	BeginLeased
	BeginDeleted
)

// BeginResult is what Begin returns.
type BeginResult struct {
	Status BeginStatus
	Lease  Lease
	// Now is the server clock at Begin.
	Now time.Time
	// NextDue is the stored due time (BeginNotDue).
	NextDue time.Time
	// LeaseExpires is when the other holder's lease ends (BeginLeased).
	LeaseExpires time.Time
	// OutboxLen counts undelivered outbox entries (BeginOK).
	OutboxLen int64
	// Released counts the ordering keys whose held events are deliverable now (a parked event
	// of theirs was retried or discarded, or a failed event's wait is over) (BeginOK).
	Released int64
	// State is the key's state hash (BeginOK).
	State map[string]string
	// Items counts the tracked identities (BeginOK).
	Items int64
	// InvalidIndexed counts the identities with a parked invalid observation (BeginOK).
	InvalidIndexed int64
}

// Commit is one page's atomic write.
type Commit struct {
	// State patches fields of the key's state (the cursor among them).
	State map[string]string
	// Upserts writes item rows.
	Upserts []Upsert
	// Deletes removes item rows.
	Deletes []string
	// Tombstones remember deleted identities (identity → generation of the deletion) for
	// TombstoneRetention, so a re-created identity starts a new life; Revived lifts them.
	Tombstones         []Tombstone
	Revived            []string
	TombstoneRetention time.Duration
	// Events go to the outbox in this order.
	Events []OutboxEvent
	// Invalid parks rows of items that failed validation (once per id); one with an identity
	// becomes that identity's latest invalid observation (StoredRows.Parked), and the row of
	// the one before it is removed in the same write.
	Invalid []ParkedRow
	// Unpark removes parked rows: an invalid item that now passes, or one a later
	// observation of its identity superseded.
	Unpark []ParkedRow
	// LogRetention, when set, also appends the events to the key's replay log and trims
	// entries older than this.
	LogRetention time.Duration
	// Count increments numeric state fields (shadow mode's would-be events).
	Count map[string]int
	// Touched are identities the live side wrote while a backfill runs: the backfill's
	// history must not undo them (StoredRows.Touched). ClearTouched empties that set first
	// (a backfill begins or ends).
	Touched      []string
	ClearTouched bool
	// Listed are identities a listing of ListedLane that goes on in a later cycle has shown
	// (each with whether it was valid); ClearListed empties the lane's listed identities
	// first (its listing completed, or starts over).
	Listed      []ListedID
	ListedLane  watukuytype.Lane
	ClearListed bool
	// Payloads keep each identity's item as last emitted (Changes.Patch), an empty one for an
	// item too large to keep; DropPayloads forgets them (a deletion). Written with the rows
	// they go with, so a patch is never computed against a payload that was not committed.
	Payloads     []Payload
	DropPayloads []string
}

// Payload is an identity's item as last emitted.
type Payload struct {
	Identity string
	Item     []byte
}

// ListedID is an identity a listing showed, and whether it passed the checks (an invalid one
// is stored as it was).
type ListedID struct {
	Identity string
	Valid    bool
}

// Tombstone is a deleted identity and the generation of its deletion.
type Tombstone struct {
	Identity string
	Gen      int64
}

// Upsert is one item row.
type Upsert struct {
	Identity string
	Row      []byte
}

// OutboxEvent is one event as committed.
type OutboxEvent struct {
	ID          string
	OrderingKey string
	Envelope    []byte
}

// ParkedRow is one parked row (JSON): to park (Commit.Invalid) or to remove (Commit.Unpark,
// without Row). Identity and Version are an invalid item's, if it has them.
type ParkedRow struct {
	ID       string
	Identity string
	Version  string
	Row      []byte
}

// LoadWant says what LoadRows reads besides rows and tombstones: each is a read of as many
// fields as identities, so a cycle asks only where there can be any.
type LoadWant struct {
	Parked  bool // StoredRows.Parked (the key has parked invalid observations)
	Touched bool // StoredRows.Touched (a backfill page)
}

// StoredRows is what the store keeps of a list of identities, index by index.
type StoredRows struct {
	// Rows are the item rows (nil where absent).
	Rows [][]byte
	// Tombstones are the generations of the identities' last deletions that a tombstone still
	// remembers (0 if none).
	Tombstones []int64
	// Parked are the identities' latest invalid observations, parked (ID and Version; a zero
	// value if none).
	Parked []ParkedRow
	// Touched tells which identities the live side wrote since the running backfill began
	// (Commit.Touched).
	Touched []bool
}

// CommitResult is what CommitPoll returns.
type CommitResult struct {
	// StreamIDs is the outbox sequence of each event, in order.
	StreamIDs []string
	// LeaseExpires is the renewed lease expiry.
	LeaseExpires time.Time
	// Paused is true when an operator paused the key.
	Paused bool
	// Unreplicated is true when the store waits for replicas and they did not confirm the
	// commit in time: its events must not be delivered yet (a failover could lose the commit
	// after they reached the handler).
	Unreplicated bool
	// Duplicate reports a commit that had been applied already (its first attempt's reply
	// was lost, the client re-sent it): nothing was written again, and the result is the
	// first attempt's.
	Duplicate bool
	// Diverted are the indexes of the events whose ordering key is held by a parked event (or
	// still has released held events to deliver): they joined its held events, and are not
	// delivered now (G4).
	Diverted []int
}

// Entry is one event read back for delivery: an outbox entry (StreamID), or a released held
// event (Member).
type Entry struct {
	StreamID    string
	ID          string
	OrderingKey string
	Envelope    []byte
	// Seq is the commit sequence: the outbox id the event was committed under.
	Seq string
	// Member names a released held event in the store (StreamID is then "").
	Member string
	// Retry is the record of the earlier tries of an event that waited for a later one (nil
	// for an event not tried before).
	Retry *RetryRecord
}

// RetryRecord is what an event that failed keeps of its tries while it waits for the next.
type RetryRecord struct {
	Tries    int      `json:"n"` // tries so far (each of Delivery.Attempts attempts)
	Attempts int      `json:"a"` // attempts so far
	First    int64    `json:"f"` // ms of its first failed try
	Errors   []string `json:"e"` // the last errors, oldest first; never empty
	// Stack is the last stack a failure carried (a handler's panic, an error with one).
	Stack string `json:"s,omitempty"`
}

// Parking is one Park call.
type Parking struct {
	Poison []Poison
	Wait   []Wait
	Held   []Held
}

// Wait is an entry to try again at Until: it joins its ordering key's held events (first:
// it is their oldest) and the ordering key is released at Until.
type Wait struct {
	Entry Entry
	JSON  []byte // the held entry (heldEntry), with its retry record
	Until time.Time
}

// Poison is an entry to park.
type Poison struct {
	Entry    Entry
	ParkedID string
	Row      []byte
}

// Held is an outbox entry that joins its held ordering key's events.
type Held struct {
	Entry Entry
	JSON  []byte
}

// RegEntry is a key's registry entry.
type RegEntry struct {
	// Source is "config" (a partition of a registered definition) or "cli" (partitions add).
	Source string
	// AddedAt is when partitions add added it (cli).
	AddedAt time.Time
	// Deleted: a config key that partitions delete deleted (it stays registered, deleted, as
	// long as partitions add does not bring it back).
	Deleted bool
}

// RegKey is one key of a poller's registry.
type RegKey struct {
	Partition string
	Entry     RegEntry
}

// ParkedJSON is one parked row as stored.
type ParkedJSON struct {
	ID  string
	Row []byte
}

// EndRequest is what End writes.
type EndRequest struct {
	State   map[string]string
	Delete  []string
	NextDue time.Time
	// Trigger is the trigger generation (state field statehash.Trigger) seen at Begin: when a
	// trigger moved it since, End keeps the key due now instead of NextDue.
	Trigger string
	// Next, when set, is the cycle the worker runs next (the following key of its task):
	// its Begin may go out with this End, saving a round trip per key.
	Next *NextBegin
}

// NextBegin is the Begin (BeginForCycle) of a key's cycle sent along with another key's End.
// The engine fills the request and At; the store that sends the Begin sets Sent, Result and
// Err. A store that leaves Sent false sent nothing: the cycle calls Begin itself.
type NextBegin struct {
	Key   watukuytype.Key
	Owner string
	TTL   time.Duration
	// At is the local time before End was sent: the lease's validity counts from it.
	At time.Time

	Sent   bool
	Result BeginResult
	Err    error
}

// Granted reports whether n's Begin was sent and took the lease.
func (n *NextBegin) Granted() bool {
	return n != nil && n.Sent && n.Err == nil && n.Result.Status == BeginOK
}

// Snapshot is a key's stored picture, as Inspect reads it.
type Snapshot struct {
	State        map[string]string
	LeaseOwner   string
	LeaseEpoch   int64
	LeaseExpires time.Time
	OutboxLen    int64
	// OutboxOldest is when the oldest entry of the outbox was added (the server's clock, from
	// its stream id; zero when the outbox is empty) and OutboxOldestAge its age by the same
	// clock.
	OutboxOldest    time.Time
	OutboxOldestAge time.Duration
	Parked          int64
	// ParkedInvalid counts the parked rows that are invalid items (the rest are poison).
	ParkedInvalid int64
	Held          int64
	// Waiting counts the ordering keys that wait for a failed event's next try, and NextRetry
	// is the first of those tries (zero: none).
	Waiting   int64
	NextRetry time.Time
	Items     int64
	NextDue   time.Time
	Now       time.Time
}

// Claim is one claim of due keys made to be confirmed (a scheduler's, by the store's ClaimForEnqueue):
// its keys are held for a short window, and ConfirmClaims holds on to those whose
// cycles are enqueued. A confirmation holds a key only while its due time is still the one
// this claim wrote.
type Claim struct {
	// Keys are the claimed keys, earliest due first.
	Keys []watukuytype.Key
	// At is the Redis server's time of the claim, in ms; Window is how long it holds its keys
	// unconfirmed; Mark (1..1023) is the claim's own fraction of a millisecond, Mark/1024,
	// added to the due times it wrote, which no other writer of a due time adds. Together they
	// name the due time the claim wrote.
	At     int64
	Window time.Duration
	Mark   int
}
