package core

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// state wraps a key's state hash with typed accessors.
type state map[string]string

func newState(m map[string]string) state {
	if m == nil {
		return state{}
	}
	return state(m)
}

func (s state) get(f string) string { return s[f] }
func (s state) int(f string) int    { n, _ := strconv.Atoi(s[f]); return n }
func (s state) paused() bool        { return s[FieldPaused] == "1" }
func (s state) duration(f string) time.Duration {
	return time.Duration(s.int(f)) * time.Millisecond
}
func (s state) time(f string) time.Time {
	n, err := strconv.ParseInt(s[f], 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}
func (s state) backfill() *watukuytype.BackfillProgress {
	v := s[fieldBackfill]
	if v == "" {
		return nil
	}
	var bp watukuytype.BackfillProgress
	if json.Unmarshal([]byte(v), &bp) != nil {
		return nil
	}
	return &bp
}
func (s state) circuit() watukuytype.CircuitState {
	if c := s[fieldCircuit]; c != "" {
		return watukuytype.CircuitState(c)
	}
	return watukuytype.CircuitClosed
}

// State hash fields.
const (
	fieldCursorLive = "cursor.live"
	FieldNextDue    = "nextDue"
	fieldInterval   = "interval"
	fieldFailures   = "failures"
	fieldCircuit    = "circuit"
	fieldLastPoll   = "lastPoll"
	fieldLastError  = "lastError"
	FieldPaused     = "paused"
	fieldSchema     = "schemaVersion"
	FieldThrottled  = "throttledUntil"
	// FieldTrigger counts triggers (trigger, resume, partitions add): a cycle that ends after
	// one landed stays due now.
	FieldTrigger   = "trig"
	fieldRateLimit = "rateLimit"
	// fieldFreshAt is when (ms, server clock) a cycle last found the key current with its API
	// or moved it forward with data (finish); KeyInfo.FreshAt.
	fieldFreshAt = "freshAt"

	fieldReconcileDue     = "reconcileDue"
	fieldDeleteCandidates = "deleteCandidates"
	fieldLiveTag          = "etag.live" // the live lane's committed entity tag (liveTag)
	fieldBackfill         = "backfill"
	fieldShadowPrefix     = "shadow."
	fieldRemoved          = "removed"
	fieldDeleted          = "deleted"
	fieldIncarnation      = "incarnation" // a partition deleted and added again: its lives start here

	parkedInvalid = "invalid"
	parkedPoison  = "poison"
)
