package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
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
}

// ListParked returns the key's parked rows, oldest first; kind "" lists all.
func (e *Engine) ListParked(ctx context.Context, key watukuytype.Key, kind string) ([]watukuytype.ParkedInfo, error) {
	if _, err := e.resolve(ctx, key); err != nil {
		return nil, err
	}
	rows, err := e.store.ListParked(ctx, key)
	if err != nil {
		return nil, keyErr("watukuy: parked ls", key, err)
	}
	out := []watukuytype.ParkedInfo{}
	for id, raw := range rows {
		var r parkedRow
		if err := json.Unmarshal(raw, &r); err != nil {
			out = append(out, watukuytype.ParkedInfo{ID: id, Kind: "corrupt", Error: err.Error()})
			continue
		}
		if kind != "" && r.Kind != kind {
			continue
		}
		pi := watukuytype.ParkedInfo{ID: id, Kind: r.Kind, Error: r.Error, Errors: r.Errors, Attempts: r.Attempts,
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
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].ParkedAt.Equal(out[j].ParkedAt) {
			return out[i].ParkedAt.Before(out[j].ParkedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
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
		rows, err := e.store.ListParked(ctx, key)
		if err != nil {
			return err
		}
		var plain []string
		for _, id := range ids {
			raw, ok := rows[id]
			if !ok {
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
		if lastErrorCode(c.state.get(statehash.LastError)) == watukuytype.CodeInvalidItems && !invalidLeft(rows, ids) {
			c.endDelete = append(c.endDelete, statehash.LastError)
		}
		return nil
	})
	if err != nil {
		return released, keyErr("watukuy: parked "+map[bool]string{true: "retry", false: "discard"}[retry], key, err)
	}
	return released, e.store.Trigger(ctx, key)
}

// invalidLeft reports whether rows (parked id → row) hold an invalid row that ids do not name.
func invalidLeft(rows map[string][]byte, ids []string) bool {
	named := make(map[string]bool, len(ids))
	for _, id := range ids {
		named[id] = true
	}
	for id, raw := range rows {
		var r parkedRow
		if !named[id] && json.Unmarshal(raw, &r) == nil && r.Kind == parkedInvalid {
			return true
		}
	}
	return false
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
