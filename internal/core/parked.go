package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// parkedRow is the stored JSON of a parked row.
type parkedRow struct {
	Kind     string           `json:"kind"`
	ID       string           `json:"id"`
	Error    string           `json:"error"`
	Errors   []string         `json:"errors,omitempty"`
	Stack    string           `json:"stack,omitempty"`
	Attempts int              `json:"attempts,omitempty"`
	Event    *heldEntry       `json:"event,omitempty"`
	Identity string           `json:"identity,omitempty"`
	Lane     watukuytype.Lane `json:"lane,omitempty"`
	Item     string           `json:"item,omitempty"`
	ParkedAt int64            `json:"parkedAt"`
}

// heldEntry is an outbox entry kept aside (poison or held); the fields mirror the stream's.
type heldEntry struct {
	ID  string `json:"id"`
	OK  string `json:"ok"`
	EV  string `json:"ev"`
	Seq string `json:"seq"`
	// R is the retry record of an event that waits for its next try.
	R *RetryRecord `json:"r,omitempty"`
}

// ListParkedPage returns up to limit of the key's parked rows of kind ("" for every kind) in
// id order (poison events, named by their event ids, before invalid items) after the id after
// ("" from the first), and the id the next page starts after ("" at the end).
func (e *Engine) ListParkedPage(ctx context.Context, key watukuytype.Key, kind, after string, limit int) ([]watukuytype.ParkedInfo, string, error) {
	if _, err := e.resolve(ctx, key); err != nil {
		return nil, "", err
	}
	prefix := ""
	switch kind {
	case parkedPoison:
		prefix = eventIDPrefix
	case parkedInvalid:
		prefix = invalidIDPrefix
	}
	limit = min(max(limit, 1), listPage)
	rows, err := e.store.ListParked(ctx, key, prefix, after, limit+1) // one more: is there a next page
	if err != nil {
		return nil, "", keyErr("watukuy: parked ls", key, err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].ID
	}
	out := make([]watukuytype.ParkedInfo, len(rows))
	for i, row := range rows {
		out[i] = parkedInfo(row)
	}
	return out, next, nil
}

// ParkedCounts counts the parked rows of each key, in one round trip.
func (e *Engine) ParkedCounts(ctx context.Context, keys []watukuytype.Key) ([]int64, error) {
	n, err := e.store.CountParked(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("watukuy: count parked rows: %w", err)
	}
	return n, nil
}

// ListParked returns every parked row of the key of kind ("" for every kind), in id order.
func (e *Engine) ListParked(ctx context.Context, key watukuytype.Key, kind string) ([]watukuytype.ParkedInfo, error) {
	var all []watukuytype.ParkedInfo
	for after := ""; ; {
		page, next, err := e.ListParkedPage(ctx, key, kind, after, listPage)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			if all == nil {
				all = []watukuytype.ParkedInfo{}
			}
			return all, nil
		}
		after = next
	}
}

// parkedInfo reads a parked row as stored.
func parkedInfo(row ParkedJSON) watukuytype.ParkedInfo {
	id := row.ID
	var r parkedRow
	if err := json.Unmarshal(row.Row, &r); err != nil {
		return watukuytype.ParkedInfo{ID: id, Kind: "corrupt", Error: err.Error()}
	}
	pi := watukuytype.ParkedInfo{ID: id, Kind: r.Kind, Error: r.Error, Errors: r.Errors, Stack: r.Stack, Attempts: r.Attempts,
		Identity: r.Identity, ParkedAt: time.UnixMilli(r.ParkedAt).UTC()}
	if r.Event != nil {
		pi.OrderingKey = r.Event.OK
		pi.Event = json.RawMessage(r.Event.EV)
		if pi.Identity == "" {
			var ev struct {
				Identity string `json:"identity"`
			}
			if json.Unmarshal(pi.Event, &ev) == nil {
				pi.Identity = ev.Identity
			}
		}
	}
	if r.Item != "" {
		if json.Valid([]byte(r.Item)) {
			pi.Item = json.RawMessage(r.Item)
		} else {
			pi.Item, _ = json.Marshal(r.Item)
		}
	}
	return pi
}

// RetryParked returns parked rows to work: a poison event goes back to delivery, the events
// its ordering key held follow in their original order; an invalid item is checked again and,
// when it now passes, committed as a normal observation.
func (e *Engine) RetryParked(ctx context.Context, key watukuytype.Key, ids []string) (int, error) {
	return e.releaseParked(ctx, key, ids, true)
}

// DiscardParked drops parked rows; the events a poison event held return to delivery.
func (e *Engine) DiscardParked(ctx context.Context, key watukuytype.Key, ids []string) (int, error) {
	return e.releaseParked(ctx, key, ids, false)
}

func (e *Engine) releaseParked(ctx context.Context, key watukuytype.Key, ids []string, retry bool) (int, error) {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return 0, err
	}
	seen := make(map[string]bool, len(ids))
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { // an id named twice is one row, released once
		dup := seen[id]
		seen[id] = true
		return dup
	})
	released := 0
	err = e.withOpLease(ctx, t, func(c *cycle) error {
		rows, err := e.store.ParkedRows(ctx, key, ids)
		if err != nil {
			return err
		}
		var plain []string
		for i, id := range ids {
			raw := rows[i]
			if raw == nil {
				return fmt.Errorf("no parked row %q", id)
			}
			var r parkedRow
			if err := json.Unmarshal(raw, &r); err == nil && r.Kind == parkedInvalid && retry {
				if c.p == nil {
					return &watukuytype.ConflictError{Key: key, Msg: fmt.Sprintf("parked row %s is an invalid item: retrying it runs the poller's checks, so pass --config with poller %q", id, key.Poller)}
				}
				if err := c.retryInvalid(ctx, r); err != nil {
					return err
				}
				released++
				continue
			}
			plain = append(plain, id)
		}
		if len(plain) > 0 {
			n, _, err := e.store.ReleaseParked(ctx, c.lease, retry, plain)
			released += n
			if err != nil {
				return err
			}
		}
		// A degraded key (INVALID_ITEMS) whose parked invalid rows are all dealt with is no
		// longer degraded: its next cycle reads nothing new and would keep the code.
		if lastErrorCode(c.state.get(statehash.LastError)) == watukuytype.CodeInvalidItems {
			left, err := e.invalidLeft(ctx, key, ids)
			if err != nil {
				return err
			}
			if !left {
				c.endDelete = append(c.endDelete, statehash.LastError)
			}
		}
		return nil
	})
	if err != nil {
		return released, keyErr("watukuy: parked "+map[bool]string{true: "retry", false: "discard"}[retry], key, err)
	}
	return released, e.dueNow(ctx, key, "parked "+map[bool]string{true: "retry", false: "discard"}[retry])
}

// invalidLeft reports whether the key has a parked invalid row that ids do not name (it
// reads at most one row more than ids name).
func (e *Engine) invalidLeft(ctx context.Context, key watukuytype.Key, ids []string) (bool, error) {
	named := make(map[string]bool, len(ids))
	for _, id := range ids {
		named[id] = true
	}
	page, _, err := e.ListParkedPage(ctx, key, parkedInvalid, "", len(ids)+1)
	if err != nil {
		return false, err
	}
	for _, pi := range page {
		if !named[pi.ID] {
			return true, nil
		}
	}
	return false, nil
}

// placeRetry refuses the retry of a parked invalid item that may be older than what the rows
// hold of its identity: committed, it would take the identity back (G3). An item the index
// names is its identity's latest observation (later ones supersede it). Any other (parked
// without an identity, by a backfill's past, or before the index) is committed only where
// the rows cannot have moved on since it was parked: no row and no deletion since (within
// the tombstones' memory), or a row whose version orders before the item's.
func (c *cycle) placeRetry(ctx context.Context, r parkedRow, o observation) error {
	known, err := c.load(ctx, []string{o.identity}, false)
	if err != nil {
		return err
	}
	k := known[0]
	history := r.Lane == watukuytype.LaneBackfill && c.p.History // parked by a backfill over history
	if r.Identity != "" && !history && k.parked.ID == r.ID && (k.row == nil || !versionBefore(o.version, k.row.Version)) {
		return nil // its identity's latest observation, unless a backfill wrote a later one
	}
	// A history backfill's item is from the past whenever it was parked: a deletion at any
	// time counts against it.
	deletedSince := k.tomb >= r.ParkedAt || history && k.tomb != 0
	switch parkedAt := time.UnixMilli(r.ParkedAt); {
	case k.parked.ID != "" && k.parked.ID != r.ID:
		// Another observation is parked, and the index names only an identity's latest.
	case k.row == nil && !deletedSince && c.now().Sub(parkedAt) < c.tombstoneRetention():
		return nil
	case k.row != nil && versionBefore(k.row.Version, o.version):
		return nil
	}
	return &watukuytype.ConflictError{Key: c.lease.Key, Msg: fmt.Sprintf("parked row %s (%s) may be older than what the rows hold of it (it was parked without an identity, by a backfill or before this release): it is not committed; discard it, and backfill or reset-cursor to read %s again", r.ID, o.identity, o.identity)}
}

// retryInvalid runs a parked invalid item through the diff again; if it now passes it is
// committed like an observation and its parked row removed. It is its identity's latest
// observation: a later one would have removed it (supersede).
func (c *cycle) retryInvalid(ctx context.Context, r parkedRow) error {
	raw := json.RawMessage(r.Item)
	o, issue := c.observe(raw)
	if issue != "" {
		return &watukuytype.ConflictError{Key: c.lease.Key, Msg: fmt.Sprintf("parked row %s is still invalid: %s", r.ID, issue)}
	}
	if err := c.placeRetry(ctx, r, o); err != nil {
		return err
	}
	lane := r.Lane
	if lane == "" {
		lane = watukuytype.LaneLive
	}
	var w pageWrites
	if err := c.process(ctx, lane, []json.RawMessage{raw}, nil, &w); err != nil {
		return err
	}
	w.Unpark = append(w.Unpark, ParkedRow{ID: r.ID, Identity: r.Identity})
	if _, err := c.commit(ctx, &w); err != nil {
		return err
	}
	c.rep.Events += len(w.events)
	return nil
}
