// Package statehash names the fields of a key's state hash ({prefix}:{poller|partition}:state),
// the one list the engine (internal/core), the store (internal/redisstore) and the Lua scripts
// share. The scripts spell the names as Lua strings: redisstore's TestStateFieldsAreOneList
// fails when a script names a field missing here, or a field here is named nowhere.
package statehash

// State hash fields.
const (
	CursorLive = "cursor.live" // the live lane's cursor
	NextDue    = "nextDue"     // ms of the next due time; "0" after a trigger (due now)
	Interval   = "interval"    // ms of the adaptive interval
	Failures   = "failures"    // consecutive failed cycles
	Circuit    = "circuit"     // the circuit breaker's state (watukuytype.CircuitState)
	LastPoll   = "lastPoll"    // watukuytype.PollSummary.Compact (JSON before layout 4)
	LastError  = "lastError"   // JSON of watukuytype.LastError, until a cycle succeeds
	Paused     = "paused"      // "1" while paused
	Schema     = "schemaVersion"
	Throttled  = "throttledUntil" // ms until which the API asked to wait (Retry-After)
	// Trigger counts triggers (trigger, resume, partitions add): a cycle that ends after one
	// landed stays due now.
	Trigger   = "trig"
	RateLimit = "rateLimit" // JSON of the last rate-limit window the API reported
	// FreshAt is when (ms, server clock) a cycle last found the key current with its API or
	// moved it forward with data; KeyInfo.FreshAt. From layout 5 it is absent while the last
	// poll was that cycle (lastPoll's flag f: its time is freshAt).
	FreshAt          = "freshAt"
	ReconcileDue     = "reconcileDue"     // ms of the next reconcile listing
	DeleteCandidates = "deleteCandidates" // identities a complete listing missed, not yet deleted
	LiveTag          = "etag.live"        // the live lane's committed entity tag
	Backfill         = "backfill"         // JSON of watukuytype.BackfillProgress
	ShadowPrefix     = "shadow."          // shadow.<type>: events a shadow poller would have delivered
	Removed          = "removed"          // "1": the poller left the config (resume clears it)
	Deleted          = "deleted"          // "1": the partition was deleted
	// Incarnation is where a partition deleted and added again (or begun after a partition of
	// its poller was deleted) starts its identities' lives and its outbox ids.
	Incarnation = "incarnation"
	// Floor is what a deletion mark keeps: above every life and outbox id the deleted key gave
	// (delete_key.lua); partitions add starts the incarnation there. No Go code reads it.
	Floor = "floor"
	// OutboxLast is the last id the key's outbox stream gave, kept when a drained outbox is
	// deleted (and through partitions delete), so that the stream made again for the next
	// event starts above it even if the server clock moved back; no Go code reads it.
	OutboxLast = "outboxLast"
	// ListingPrefix starts listing.<lane>: the position of a complete listing (a snapshotDiff
	// live lane, a reconcile) that goes on in the next cycle, JSON of core's listingPos; the
	// identities it listed so far are in the key's listed:<lane> hash.
	ListingPrefix = "listing."
	// Blocked is set while the key's delivery is blocked because its sink fails (JSON of
	// core's blockage: since, the error, tries, the next try's time, the trigger generation
	// it saw); while it is set, outbox entries alone do not make the key due (begin.lua).
	Blocked = "blocked"
	// LastLife is the highest identity generation ever given (commit_poll.lua writes it,
	// delete_key.lua starts the next incarnation above it); no Go code reads it.
	LastLife = "lastLife"
	// Payloads is "1" once the key kept an item's payload (Changes.Patch): while the poller
	// has patch turned off, each change drops its identity's payload, so that turning it on
	// again never patches against an item older than the last one emitted.
	Payloads = "payloads"
)

// The lease's fields, in the state hash from layout 5 (a hash of their own, prefix:{key}:lease,
// before it): only the scripts write them, and Begin and Inspect leave them out of the state
// they report.
const (
	LeaseEpoch   = "epoch"     // the grant counter: it only ever grows
	LeaseToken   = "token"     // the random value of the current (or last) grant
	LeaseOwner   = "owner"     // the instance holding the lease, while it is held
	LeaseExpires = "expiresAt" // ms the lease lapses at, while it is held
	LeaseWrite   = "write"     // the last write id of the grant (a re-sent write is recognised)
	LeaseReply   = "reply"     // the reply of that write, for a re-sent one
)

// IsLeaseField reports whether name is one of the lease's fields (prelude.lua's
// LEASE_FIELDS).
func IsLeaseField(name string) bool {
	switch name {
	case LeaseEpoch, LeaseToken, LeaseOwner, LeaseExpires, LeaseWrite, LeaseReply:
		return true
	}
	return false
}
