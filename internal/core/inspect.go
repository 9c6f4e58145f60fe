package core

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// Inspect reads one key's status.
func (e *Engine) Inspect(ctx context.Context, key watukuytype.Key) (watukuytype.KeyInfo, error) {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return watukuytype.KeyInfo{}, err
	}
	return e.inspect(ctx, t)
}

// inspect reads a resolved key's status.
func (e *Engine) inspect(ctx context.Context, t target) (watukuytype.KeyInfo, error) {
	s, err := e.store.Inspect(ctx, t.key)
	if err != nil {
		return watukuytype.KeyInfo{}, keyErr("watukuy: inspect", t.key, err)
	}
	return keyInfo(t, s), nil
}

// inspectMany reads the status of resolved keys in one round trip.
func (e *Engine) inspectMany(ctx context.Context, ts []target) ([]watukuytype.KeyInfo, error) {
	keys := make([]watukuytype.Key, len(ts))
	for i, t := range ts {
		keys[i] = t.key
	}
	snaps, err := e.store.InspectMany(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("watukuy: inspect %d keys: %w", len(keys), err)
	}
	out := make([]watukuytype.KeyInfo, len(ts))
	for i, t := range ts {
		out[i] = keyInfo(t, snaps[i])
	}
	return out, nil
}

// keyInfo is a key's status from its snapshot.
func keyInfo(t target, s Snapshot) watukuytype.KeyInfo {
	key := t.key
	st := newState(s.State)
	ki := watukuytype.KeyInfo{Poller: key.Poller, Partition: key.Partition, Paused: st.paused(), Source: t.source,
		Cursor: st.get(statehash.CursorLive), Cursors: map[string]string{string(watukuytype.LaneLive): st.get(statehash.CursorLive)},
		LeaseOwner: s.LeaseOwner, LeaseEpoch: s.LeaseEpoch,
		Interval: st.duration(statehash.Interval), Circuit: st.circuit(), Failures: st.int(statehash.Failures),
		OutboxPending: s.OutboxLen, Parked: s.Parked, ParkedInvalid: s.ParkedInvalid, ParkedPoison: s.Parked - s.ParkedInvalid,
		Held: s.Held, Items: s.Items, SchemaVersion: t.info.SchemaVersion, Shadow: t.info.Shadow, LogRetention: t.info.logRetention(), CursorFormats: t.info.CursorFormats}
	if v := st.get(statehash.LastPoll); v != "" {
		ki.LastPoll = lastPollJSON(v)
	}
	if v := st.get(statehash.LastError); v != "" {
		ki.LastError = json.RawMessage(v)
	}
	if v := st.get(statehash.RateLimit); v != "" {
		ki.RateLimit = json.RawMessage(v)
	}
	if bp := st.backfill(); bp != nil {
		ki.Backfill = bp
		ki.Cursors[string(watukuytype.LaneBackfill)] = bp.Cursor
	}
	for _, typ := range []watukuytype.EventType{watukuytype.Created, watukuytype.Updated, watukuytype.Deleted} {
		if n := st.int(statehash.ShadowPrefix + string(typ)); n > 0 {
			if ki.ShadowEvents == nil {
				ki.ShadowEvents = map[string]int{}
			}
			ki.ShadowEvents[string(typ)] = n
		}
	}
	if b := blockageOf(st); b != nil {
		ki.Blocked = &watukuytype.DeliveryBlocked{Since: time.UnixMilli(b.Since).UTC(), Error: b.Error, Tries: b.Tries, NextTry: time.UnixMilli(b.Until).UTC()}
	}
	if ki.Retrying = s.Waiting; !s.NextRetry.IsZero() {
		ki.NextRetryAt = &s.NextRetry
	}
	for _, lane := range []watukuytype.Lane{watukuytype.LaneLive, watukuytype.LaneReconcile} {
		if p := st.listing(lane); p != nil {
			ki.Listings = append(ki.Listings, watukuytype.ListingProgress{Lane: lane, Pages: p.Pages, Cycles: p.Cycles, Since: time.UnixMilli(p.Since).UTC()})
		}
	}
	if t := st.time(statehash.Throttled); t.After(s.Now) {
		ki.ThrottledUntil = &t
	}
	if t := st.time(statehash.ReconcileDue); !t.IsZero() {
		ki.ReconcileDue = &t
	}
	if !s.LeaseExpires.IsZero() {
		ki.LeaseExpires = &s.LeaseExpires
	}
	ki.FreshnessMs = -1
	if t := st.freshAt(); !t.IsZero() {
		ki.FreshAt = &t
		ki.FreshnessMs = max(s.Now.Sub(t), 0).Milliseconds()
	}
	if !s.OutboxOldest.IsZero() {
		ki.OutboxOldestAt = &s.OutboxOldest
		ki.OutboxOldestAgeMs = max(s.OutboxOldestAge, 0).Milliseconds()
	}
	if st.get(statehash.NextDue) == "0" {
		ki.NextDueAt = &s.Now // triggered: due now
	} else if due := st.time(statehash.NextDue); !due.IsZero() {
		ki.NextDueAt = &due
		if lag := s.Now.Sub(due); lag > 0 && !ki.Paused {
			ki.LagMs = lag.Milliseconds()
		}
	}
	switch {
	case t.deleted || st.get(statehash.Deleted) == "1":
		ki.Status = watukuytype.StatusDeleted
	case st.get(statehash.Removed) == "1":
		ki.Status = watukuytype.StatusRemoved
	case ki.Paused:
		ki.Status = watukuytype.StatusPaused
	case ki.LeaseExpires != nil && ki.LeaseExpires.After(s.Now):
		ki.Status = watukuytype.StatusRunning
	case ki.Circuit == watukuytype.CircuitOpen:
		ki.Status = watukuytype.StatusCircuitOpen
	case ki.ThrottledUntil != nil:
		ki.Status = watukuytype.StatusThrottled
	case ki.Blocked != nil:
		ki.Status = watukuytype.StatusBlocked
	case lastErrorCode(st.get(statehash.LastError)) == watukuytype.CodeInvalidItems:
		ki.Status = watukuytype.StatusDegraded
	case ki.LastError != nil:
		ki.Status = watukuytype.StatusFailing
	default:
		ki.Status = watukuytype.StatusIdle
	}
	return ki
}

// InspectPage reads up to limit known keys of poller (all pollers when "") after the cursor
// after ("" from the first), and returns the cursor of the next page ("" at the end).
func (e *Engine) InspectPage(ctx context.Context, poller, after string, limit int) ([]watukuytype.KeyInfo, string, error) {
	ts, next, err := e.page(ctx, poller, after, limit)
	if err != nil {
		return nil, "", err
	}
	kis, err := e.inspectMany(ctx, ts)
	return kis, next, err
}

// InspectAll reads every known key of poller (all pollers when ""), a page at a time.
func (e *Engine) InspectAll(ctx context.Context, poller string) ([]watukuytype.KeyInfo, error) {
	var out []watukuytype.KeyInfo
	for after := ""; ; {
		kis, next, err := e.InspectPage(ctx, poller, after, listPage)
		out = append(out, kis...)
		if err != nil || next == "" {
			return out, err
		}
		after = next
	}
}

// lastPollJSON is a state hash's lastPoll as the JSON KeyInfo.LastPoll carries; a value that
// does not read as one becomes a JSON string, shown as is.
func lastPollJSON(v string) json.RawMessage {
	p, err := parsePoll(v)
	if err == nil {
		if b, err := json.Marshal(p); err == nil {
			return b
		}
	}
	b, _ := json.Marshal(v)
	return b
}
