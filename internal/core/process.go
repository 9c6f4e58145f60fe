package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/watukuy/watukuy/internal/diff"
)

// observation is one valid item of a page.
type observation struct {
	raw       json.RawMessage
	identity  string
	version   string
	vf        diff.VF
	tombstone bool
}

// process diffs a page's items against the stored rows, in page order, and fills cm; it
// returns the events in the order they are committed. Tombstones (Poller.Tombstone) delete
// known identities. seen, when not nil, records every listed identity and whether it was valid.
func (c *cycle) process(ctx context.Context, lane string, items []json.RawMessage, seen map[string]bool, cm *Commit) ([]Event, error) {
	c.rep.Items += len(items)
	obs := make([]observation, 0, len(items))
	for _, raw := range items {
		o, issue := c.observe(raw)
		if seen != nil && o.identity != "" && !o.tombstone {
			// An item listed but invalid is still present: never a delete (G6).
			seen[o.identity] = seen[o.identity] || issue == ""
		}
		if issue != "" {
			c.parkInvalid(cm, raw, o.identity, lane, issue)
			continue
		}
		obs = append(obs, o)
	}
	if len(obs) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(obs))
	index := make(map[string]int, len(obs))
	for _, o := range obs {
		if _, dup := index[o.identity]; !dup {
			index[o.identity] = len(ids)
			ids = append(ids, o.identity)
		}
	}
	rows, err := c.e.store.LoadRows(ctx, c.key, ids)
	if err != nil {
		return nil, err
	}
	stored := make([]bool, len(rows))
	for i, r := range rows {
		stored[i] = r != nil
	}
	written := make([]bool, len(rows)) // rows[i] is the identity's state after this page
	var events []Event
	schema := c.p.SchemaVersion
	for _, o := range obs {
		i := index[o.identity]
		if o.tombstone {
			if rows[i] == nil {
				continue // never seen, or already deleted
			}
			r, _ := diff.ParseRow(rows[i])
			ev := c.newEvent(Deleted, lane, o.identity, r.Version, r.VF, nil)
			rows[i], written[i] = nil, true
			if err := c.addEvent(cm, ev); err != nil {
				return nil, err
			}
			events = append(events, ev)
			continue
		}
		kind := diff.Classify(rows[i], o.vf, schema, c.p.EmitOnSchemaChange)
		if kind == diff.Unchanged {
			if c.force == 0 || lane != "backfill" {
				continue
			}
			// A forced backfill re-emits what is known; its ids are new for each backfill
			// generation (so consumers that dedupe by id receive them) and stable within it.
			ev := c.newEvent(Updated, lane, o.identity, o.version, o.vf, o.raw)
			ev.ID = diff.EventID(c.key.Poller, c.key.Partition, o.identity, "updated/backfill-"+strconv.FormatInt(c.force, 10), o.vf, schema)
			if err := c.addEvent(cm, ev); err != nil {
				return nil, err
			}
			events = append(events, ev)
			continue
		}
		rows[i] = diff.AppendRow(make([]byte, 0, diff.VFSize+2+len(o.version)), diff.Row{VF: o.vf, Schema: schema, Version: o.version})
		written[i] = true // a later duplicate in the page compares with this row
		if kind == diff.Rebaseline {
			continue
		}
		typ := Updated
		if kind == diff.Created {
			typ = Created
		}
		ev := c.newEvent(typ, lane, o.identity, o.version, o.vf, o.raw)
		if err := c.addEvent(cm, ev); err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	// Rows are written as they stand after the whole page, so a delete followed by a
	// re-creation in one page keeps the row.
	for i, id := range ids {
		switch {
		case !written[i]:
		case rows[i] != nil:
			cm.Upserts = append(cm.Upserts, Upsert{Identity: id, Row: rows[i]})
			if !stored[i] {
				c.items++
			}
		case stored[i]:
			cm.Deletes = append(cm.Deletes, id)
			c.items--
		}
	}
	return events, nil
}

// newEvent builds an event with its deterministic id (G2).
func (c *cycle) newEvent(typ EventType, lane, identity, version string, vf diff.VF, item json.RawMessage) Event {
	return Event{ID: diff.EventID(c.key.Poller, c.key.Partition, identity, string(typ), vf, c.p.SchemaVersion),
		Poller: c.key.Poller, Partition: c.key.Partition, Type: typ, Lane: lane, Identity: identity,
		Version: version, ObservedAt: c.now(), SchemaVersion: c.p.SchemaVersion, Item: item}
}

// observe extracts identity, version and fingerprint; a non-empty issue means invalid.
func (c *cycle) observe(raw json.RawMessage) (o observation, issue string) {
	o.raw = raw
	id, err := c.p.Identity(raw)
	if err != nil {
		return o, "no identity: " + err.Error()
	}
	if id == "" {
		return o, "no identity: empty"
	}
	o.identity = id
	if c.p.Tombstone != nil && c.p.Tombstone(raw) {
		o.tombstone = true
		return o, ""
	}
	if c.p.Validate != nil {
		if err := c.p.Validate(raw); err != nil {
			return o, "validate: " + err.Error()
		}
	}
	if c.p.Version != nil {
		if o.version, err = c.p.Version(raw); err != nil {
			return o, "version: " + err.Error()
		}
	}
	var fp []byte
	if c.p.Fingerprint != nil {
		fp, err = c.p.Fingerprint(raw)
	} else {
		var h [32]byte
		h, err = c.canon.Hash(raw)
		fp = h[:]
	}
	if err != nil {
		return o, "fingerprint: " + err.Error()
	}
	o.vf = diff.VersionFingerprint(o.version, fp)
	return o, ""
}

func (c *cycle) parkInvalid(cm *Commit, raw json.RawMessage, identity, lane, issue string) {
	sum := sha256.Sum256(raw)
	id := "inv_" + hex.EncodeToString(sum[:12])
	row, _ := json.Marshal(parkedRow{Kind: parkedInvalid, ID: id, Error: issue, Errors: []string{issue},
		Identity: identity, Lane: lane, Item: string(raw), ParkedAt: c.now().UnixMilli()})
	cm.Invalid = append(cm.Invalid, ParkedRow{ID: id, Row: row})
	c.rep.Invalid++
	c.log.Warn().Str("parkedId", id).Str("identity", identity).Str("issue", issue).Msg("item parked as invalid")
	if h := c.e.hooks.OnParked; h != nil {
		h(c.key, parkedInvalid, id, issue)
	}
}

func (c *cycle) addEvent(cm *Commit, ev Event) error {
	env, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	cm.Events = append(cm.Events, OutboxEvent{ID: ev.ID, OrderingKey: c.p.orderingKey(ev), Envelope: env})
	return nil
}

// commitAndDeliver commits a page (G3: cursor and events in one write) and delivers what it
// committed straight from memory.
func (c *cycle) commitAndDeliver(ctx context.Context, cm Commit, events []Event) *cycleError {
	if len(cm.State) == 0 && len(cm.Upserts) == 0 && len(cm.Deletes) == 0 && len(cm.Events) == 0 &&
		len(cm.Invalid) == 0 && len(cm.Unpark) == 0 {
		return nil
	}
	shadow := c.routeEvents(&cm, events)
	sent := time.Now()
	res, err := c.e.store.CommitPoll(ctx, c.lease, cm)
	if err != nil {
		return storeErr(err)
	}
	c.keeper.touched(sent)
	c.confirmed = true
	c.rep.Events += len(events)
	if len(events) == 0 || shadow {
		return nil
	}
	ds := make([]delivery, len(events))
	for i := range events {
		events[i].Seq = res.StreamIDs[i]
		ds[i] = delivery{entry: Entry{StreamID: res.StreamIDs[i], ID: events[i].ID, OrderingKey: cm.Events[i].OrderingKey,
			Envelope: cm.Events[i].Envelope, Seq: res.StreamIDs[i]}, ev: &events[i]}
	}
	return c.deliver(ctx, ds)
}

// routeEvents prepares a commit's events: in shadow mode they are only counted (and false is
// returned, nothing to deliver), otherwise they are logged when the poller keeps a log.
func (c *cycle) routeEvents(cm *Commit, events []Event) (shadow bool) {
	if len(cm.Events) == 0 {
		return false
	}
	if c.p.Shadow {
		cm.Count = map[string]int{}
		for _, ev := range events {
			cm.Count[fieldShadowPrefix+string(ev.Type)]++
		}
		cm.Events = nil
		return true
	}
	cm.LogRetention = c.p.LogRetention
	return false
}

// retryInvalid runs a parked invalid item through the diff again; if it now passes it is
// committed like an observation and its parked row removed.
func (c *cycle) retryInvalid(ctx context.Context, r parkedRow) error {
	raw := json.RawMessage(r.Item)
	if _, issue := c.observe(raw); issue != "" {
		return fmt.Errorf("parked row %s is still invalid: %s", r.ID, issue)
	}
	lane := r.Lane
	if lane == "" {
		lane = "live"
	}
	var cm Commit
	events, err := c.process(ctx, lane, []json.RawMessage{raw}, nil, &cm)
	if err != nil {
		return err
	}
	cm.Unpark = []string{r.ID}
	c.routeEvents(&cm, events)
	if _, err := c.e.store.CommitPoll(ctx, c.lease, cm); err != nil {
		return err
	}
	c.rep.Events += len(events)
	return nil
}
