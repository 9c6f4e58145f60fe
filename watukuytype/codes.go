package watukuytype

// Lane is a pass of a key's cycle, and the lane an event was committed or delivered in.
type Lane string

// Lanes.
const (
	// LaneLive follows the live cursor; its events are delivered first.
	LaneLive Lane = "live"
	// LaneReconcile is the periodic full listing that detects deletes (Poller.Reconcile).
	LaneReconcile Lane = "reconcile"
	// LaneBackfill reads again from an older cursor, below live in priority.
	LaneBackfill Lane = "backfill"
	// LaneReplay marks events copied back from the replay log (Engine.Replay).
	LaneReplay Lane = "replay"
)

// Status is a key's state as Inspect reports it (KeyInfo.Status).
type Status string

// Key statuses, in the order Inspect checks them: the first that applies is reported.
const (
	StatusDeleted     Status = "deleted"     // the partition was deleted
	StatusRemoved     Status = "removed"     // the partition was removed (paused, state kept)
	StatusPaused      Status = "paused"      // paused by an operator
	StatusRunning     Status = "running"     // a cycle holds its lease
	StatusCircuitOpen Status = "circuitOpen" // failing: waiting for the circuit's probe
	StatusThrottled   Status = "throttled"   // the API asked to wait (Retry-After)
	StatusBlocked     Status = "blocked"     // delivery is blocked: the sink fails (KeyInfo.Blocked)
	StatusDegraded    Status = "degraded"    // the last cycle that read items found none valid
	StatusFailing     Status = "failing"     // the last cycle failed
	StatusIdle        Status = "idle"        // none of the above
)

// ErrorCode classifies a key's last failure (LastError.Code).
type ErrorCode string

// Error codes.
const (
	CodeFetch        ErrorCode = "FETCH"         // a request failed or the API answered an error
	CodeThrottled    ErrorCode = "THROTTLED"     // a 429 or 503 with Retry-After
	CodeCursorStall  ErrorCode = "CURSOR_STALL"  // the cursor cannot advance (CursorStallError)
	CodePoisonHalt   ErrorCode = "POISON_HALT"   // an event's handler keeps failing, delivery halted
	CodeStore        ErrorCode = "STORE"         // Redis failed
	CodeReplication  ErrorCode = "REPLICATION"   // replicas did not confirm a commit in time
	CodeConfig       ErrorCode = "CONFIG"        // the poller's definition or the API's answers break a rule
	CodeInvalidItems ErrorCode = "INVALID_ITEMS" // every item the cycle read was invalid
)
