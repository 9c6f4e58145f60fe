package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/watukuy/watukuy/internal/changeset"
	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// observation is one valid item of a page.
type observation struct {
	raw       json.RawMessage
	identity  string
	version   string
	vf        diff.VF
	tombstone bool
	issue     string // why the item is invalid ("" when it is not)
}

// step is one change to one identity, in page order: the identity's row as it stands after
// it, and the event it emits. A large page is committed in chunks of steps, each with the rows
// as they stand after its own steps, so a death between chunks leaves every committed event
// with its row written and the re-fetch finds those items unchanged (G3, G7).
type step struct {
	identity string
	row      []byte // nil: the identity is deleted
	tomb     int64  // with row == nil: the generation its tombstone remembers
	revived  bool   // a tombstone is lifted (the identity is created again)
	event    int    // index of the step's event in pageWrites.events, -1 for none
	// payload is what Changes.Patch keeps of the identity after the step (attachChanges):
	// keepItem, keepTooLarge (an empty payload) or dropPayload; keepNothing leaves it.
	payload payloadWrite
	// repeat: the step's event repeats an earlier emission's id (a forgotten row seen again
	// as it was), which a consumer that dedupes by id drops: the payload stays that emission's.
	repeat bool
}

// payloadWrite is what a step does to its identity's kept payload.
type payloadWrite uint8

const (
	keepNothing payloadWrite = iota
	keepItem
	keepTooLarge
	dropPayload
)

// pageWrites is what one page (or one operation) writes. The embedded Commit's state patch and
// counters go with the last chunk; the steps, their events and the invalid rows are spread
// over the chunks.
type pageWrites struct {
	Commit
	steps  []step
	events []watukuytype.Event
	// history marks a page of the backfill lane: it re-reads the past, so it leaves alone
	// what the live side wrote since the backfill began and its parked observations.
	history bool
	// progress marks a live or reconcile page with a valid item: once committed, the key has
	// moved forward with data (cycle.progressed).
	progress bool
}

// setState sets one state field of the page's commit.
func (w *pageWrites) setState(field, value string) {
	if w.State == nil {
		w.State = map[string]string{}
	}
	w.State[field] = value
}

// event appends ev as the event of a step on identity.
func (w *pageWrites) event(identity string, row []byte, ev watukuytype.Event) {
	w.steps = append(w.steps, step{identity: identity, row: row, event: len(w.events)})
	w.events = append(w.events, ev)
}

// stored is what the diff knows of an identity while a page is processed.
type stored struct {
	row      *diff.Row
	tomb     int64     // without a row: the generation of its last deletion, if remembered
	wasThere bool      // it had a row when the page started
	parked   ParkedRow // its latest invalid observation, if parked (ID, Version)
	touched  bool      // the live side wrote it since the running backfill began
}

// process diffs a page's items against the stored rows, in page order, and adds the steps to
// w. Tombstones (Poller.Tombstone) delete known identities. seen, when not nil, records every
// listed identity and whether it was valid.
func (c *cycle) process(ctx context.Context, lane watukuytype.Lane, items []json.RawMessage, seen map[string]bool, w *pageWrites) error {
	c.rep.Items += len(items)
	counted := lane != watukuytype.LaneBackfill
	if counted {
		c.read += len(items)
	}
	obs := make([]observation, 0, len(items))
	for _, raw := range items {
		o, issue := c.observe(raw)
		switch {
		case !counted:
		case issue == "":
			c.valid++
		case c.issue == "":
			c.issue = issue
		}
		if seen != nil && o.identity != "" && !o.tombstone {
			// An item listed but invalid is still present: never a delete (G6).
			seen[o.identity] = seen[o.identity] || issue == ""
		}
		if o.issue = issue; issue != "" && o.identity == "" {
			c.parkInvalid(&w.Commit, raw, "", o.version, lane, issue)
			continue
		}
		obs = append(obs, o)
	}
	if len(obs) == 0 {
		return nil
	}
	ids := make([]string, 0, len(obs))
	index := make(map[string]int, len(obs))
	lastSeen := make(map[string]int, len(obs))
	for i, o := range obs {
		if _, dup := index[o.identity]; !dup {
			index[o.identity] = len(ids)
			ids = append(ids, o.identity)
		}
		lastSeen[o.identity] = i
	}
	known, err := c.load(ctx, ids, w.history)
	if err != nil {
		return err
	}
	schema := c.p.SchemaVersion
	for i, o := range obs {
		k := &known[index[o.identity]]
		if w.history && (k.touched || c.p.History && k.row != nil && behind(o, k.row)) {
			// A backfill never undoes what the live side wrote since it began (G3), and over
			// history (Poller.History) never what the rows hold: a row the entry is not known
			// to be newer than.
			continue
		}
		// An identity's latest observation supersedes a parked invalid one, which retried
		// would take the identity back (G3); an invalid one is parked in its place. A
		// backfill over history does neither: it parks only where nothing is parked.
		present := !w.history || !c.p.History
		switch last := i == lastSeen[o.identity]; {
		case !last:
		case o.issue != "" && (present || k.parked.ID == ""):
			c.parkInvalid(&w.Commit, o.raw, o.identity, o.version, lane, o.issue)
		case o.issue != "" && invalidID(o.raw) != k.parked.ID:
			c.logger().Info().Str("identity", o.identity).Str("parkedId", k.parked.ID).Str("issue", o.issue).
				Msg("backfill: invalid history entry not parked, its identity has a later one parked")
		case o.issue == "" && present:
			c.supersede(&w.Commit, o.identity, k)
		}
		if o.issue != "" {
			continue
		}
		if o.tombstone {
			switch {
			case k.row != nil:
				c.delete(w, lane, o.identity, k)
			case !w.history && k.tomb == 0:
				// Remembered even without a row (its items were invalid): a retry of an
				// older parked item then knows it was deleted since (placeRetry).
				k.tomb = c.now().UnixMilli()
				w.steps = append(w.steps, step{identity: o.identity, tomb: k.tomb, event: -1})
			}
			continue
		}
		kind := diff.Classify(k.row, o.vf, o.version, schema, c.p.EmitOnSchemaChange)
		switch kind {
		case diff.Unchanged:
			r := *k.row
			if c.force > 0 && lane == watukuytype.LaneBackfill && r.VF == o.vf {
				// A forced backfill re-emits what is known; its ids are new for each backfill
				// generation (so consumers that dedupe by id receive them) and stable within it.
				ev := c.newEvent(watukuytype.Updated, lane, o.identity, o.version, o.vf, o.raw, r)
				ev.ID = diff.EventID(c.key.Poller, c.key.Partition, o.identity, "updated/backfill-"+strconv.FormatInt(c.force, 10), o.vf, schema, r.Life, r.Changes)
				w.event(o.identity, diff.AppendRow(nil, r), ev)
				continue
			}
			if r.Missing > 0 {
				// Listed again: no longer a delete candidate.
				r.Missing = 0
				k.row = &r
				w.steps = append(w.steps, step{identity: o.identity, row: diff.AppendRow(nil, r), event: -1})
			}
		case diff.Rebaseline:
			r := *k.row
			r.VF, r.Schema, r.Version, r.Missing = o.vf, schema, o.version, 0
			k.row = &r
			w.steps = append(w.steps, step{identity: o.identity, row: diff.AppendRow(nil, r), event: -1})
		case diff.Created, diff.Updated:
			r := diff.Row{VF: o.vf, Schema: schema, Version: o.version, Changes: c.changeCount(o, k.row), Life: max(k.tomb, int64(c.state.int(statehash.Incarnation)))}
			typ := watukuytype.Created
			if prev := k.row; prev != nil {
				// A forgotten row is created again; its life goes on.
				if !prev.Forgotten {
					typ = watukuytype.Updated
				}
				r.Life = prev.Life
			}
			revived := k.row == nil && k.tomb != 0
			repeat := k.row != nil && r.Changes == k.row.Changes
			ev := c.newEvent(typ, lane, o.identity, o.version, o.vf, o.raw, r)
			k.row, k.tomb = &r, 0
			w.event(o.identity, diff.AppendRow(nil, r), ev)
			w.steps[len(w.steps)-1].revived = revived
			w.steps[len(w.steps)-1].repeat = repeat
		}
	}
	for _, k := range known {
		switch {
		case k.row != nil && !k.wasThere:
			c.items++
		case k.row == nil && k.wasThere:
			c.items--
		}
	}
	return nil
}

// loadBatch bounds the identities one read of rows asks for: a read of a 100,000-item page's
// rows in one command would hold Redis for tens of milliseconds.
const loadBatch = 5000

// load reads what is stored of identities: rows, tombstones, parked invalid observations
// (where the key has any) and, for a backfill's page (history), the touched set.
func (c *cycle) load(ctx context.Context, ids []string, history bool) ([]stored, error) {
	known := make([]stored, len(ids))
	for from := 0; from < len(ids); from += loadBatch {
		to := min(from+loadBatch, len(ids))
		sr, err := c.e.store.LoadRows(ctx, c.key, ids[from:to], LoadWant{Parked: c.invalidIndexed, Touched: history})
		if err != nil {
			return nil, err
		}
		for j, row := range sr.Rows {
			i := from + j
			known[i].tomb, known[i].parked = sr.Tombstones[j], sr.Parked[j]
			known[i].touched = j < len(sr.Touched) && sr.Touched[j]
			if row == nil {
				continue
			}
			r, ok := diff.ParseRow(row)
			if !ok {
				// A corrupt row counts as absent: the identity is created again (at worst a
				// duplicate), never skipped.
				c.logger().Warn().Str("identity", ids[i]).Msg("corrupt item row: treated as absent")
				continue
			}
			known[i].row, known[i].wasThere = &r, true
		}
	}
	return known, nil
}

// delete emits deleted for a known identity and remembers it in a tombstone, so that if it is
// created again its new life's ids differ from this one's (G2).
func (c *cycle) delete(w *pageWrites, lane watukuytype.Lane, identity string, k *stored) {
	r := *k.row
	r.Changes++
	gen := max(c.now().UnixMilli(), r.Life+1)
	w.steps = append(w.steps, step{identity: identity, tomb: gen, event: len(w.events)})
	w.events = append(w.events, c.newEvent(watukuytype.Deleted, lane, identity, r.Version, r.VF, nil, r))
	k.row, k.tomb = nil, gen
}

// changeCount is which change of its identity an observation is, for its id (G2): every
// change counts, with or without a version, since content and versions can come back (closed
// → open → closed; a checksum; a revision that starts over). It comes from committed state,
// so a change re-emitted has its first id. A forgotten row seen again with its content is the
// same change: its count, and so its id, stay.
func (c *cycle) changeCount(o observation, prev *diff.Row) uint64 {
	switch {
	case prev == nil:
		return 0
	case prev.Forgotten && prev.VF == o.vf && prev.Schema == c.p.SchemaVersion:
		return prev.Changes
	}
	return prev.Changes + 1
}

// newEvent builds an event with its deterministic id (G2); r is the identity's row with this
// change counted. The id of a created or updated event leaves the type out: it only says
// what the rows knew (a forgotten row, a change log passed again), not what changed. An
// identity is deleted once per life.
func (c *cycle) newEvent(typ watukuytype.EventType, lane watukuytype.Lane, identity, version string, vf diff.VF, item json.RawMessage, r diff.Row) watukuytype.Event {
	kind, change := "observed", r.Changes
	if typ == watukuytype.Deleted {
		kind, change = string(watukuytype.Deleted), 0
	}
	return watukuytype.Event{ID: diff.EventID(c.key.Poller, c.key.Partition, identity, kind, vf, c.p.SchemaVersion, r.Life, change),
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
		if c.p.Version != nil {
			o.version, _ = c.p.Version(raw) // if it has one: a backfill places it by it
		}
		return o, ""
	}
	// The version first: an invalid item is parked with it (its entry in the index).
	if c.p.Version != nil {
		if o.version, err = c.p.Version(raw); err != nil {
			return o, "version: " + err.Error()
		}
	}
	if c.p.Validate != nil {
		if err := c.p.Validate(raw); err != nil {
			return o, "validate: " + err.Error()
		}
	}
	content := raw
	if !c.ignoreRead {
		c.ignore, _ = changeset.ParseIgnore(c.p.Changes.Ignore) // checked at Register
		c.ignoreRead = true
	}
	if !c.ignore.Empty() {
		if content, err = c.ignore.Strip(raw); err != nil {
			return o, "changes.ignore: " + err.Error()
		}
	}
	var fp []byte
	if c.p.Fingerprint != nil {
		// The canonical hash checks the item is JSON; a Fingerprint of its own may not, and an
		// item no encoder takes back (nested past its depth) would fail every commit.
		if !json.Valid(raw) {
			return o, "not valid JSON (or nested deeper than a JSON encoder takes)"
		}
		fp, err = c.p.Fingerprint(content)
	} else {
		var h [32]byte
		h, err = c.canon.Hash(content)
		fp = h[:]
	}
	if err != nil {
		return o, "fingerprint: " + err.Error()
	}
	o.vf = diff.VersionFingerprint(o.version, fp)
	return o, ""
}

// Parked rows are named by their event's id (a poison event) or by invalidID: the prefixes
// tell the kinds apart, and list them apart (ListParkedPage).
const (
	eventIDPrefix   = diff.IDPrefix
	invalidIDPrefix = "inv_"
)

// invalidID is the parked id of an invalid item: the same item is parked once.
func invalidID(raw json.RawMessage) string {
	sum := sha256.Sum256(raw)
	return invalidIDPrefix + hex.EncodeToString(sum[:12])
}

// behind reports whether a history entry is not known to be newer than the row, where
// versions order: an older version, the same version with other content (a timestamp to the
// second ties; across a schema bump too, so drift is the live lane's to emit), or a deletion
// entry whose version is not later (often it has none). Where they do not order, a backfill
// cannot tell (docs/design.md, Known limits).
func behind(o observation, r *diff.Row) bool {
	order, ok := diff.CompareVersions(o.version, r.Version)
	switch {
	case ok:
		return order < 0 || order == 0 && (o.tombstone || o.vf != r.VF)
	case o.tombstone:
		_, rowOrders := diff.CompareVersions(r.Version, r.Version)
		return rowOrders
	}
	return false
}

// versionBefore reports whether version a orders before b (both integers, or both RFC 3339
// times); false when they do not order.
func versionBefore(a, b string) bool {
	order, ok := diff.CompareVersions(a, b)
	return ok && order < 0
}

// supersede removes the parked invalid observation of an identity: a later observation or
// its deletion is committed with it.
func (c *cycle) supersede(cm *Commit, identity string, k *stored) {
	if k.parked.ID == "" {
		return
	}
	cm.Unpark = append(cm.Unpark, ParkedRow{ID: k.parked.ID, Identity: identity})
	c.logger().Info().Str("parkedId", k.parked.ID).Str("identity", identity).Msg("parked invalid item superseded by a later observation of its identity")
	k.parked = ParkedRow{}
}

// parkInvalid parks an invalid item; with an identity, it is that identity's latest invalid
// observation and replaces the one parked before (commit_poll.lua).
func (c *cycle) parkInvalid(cm *Commit, raw json.RawMessage, identity, version string, lane watukuytype.Lane, issue string) {
	id := invalidID(raw)
	row, _ := json.Marshal(parkedRow{Kind: parkedInvalid, ID: id, Error: issue, Errors: []string{issue},
		Identity: identity, Lane: lane, Item: string(raw), ParkedAt: c.now().UnixMilli()})
	cm.Invalid = append(cm.Invalid, ParkedRow{ID: id, Identity: identity, Version: version, Row: row})
	c.invalidIndexed = c.invalidIndexed || identity != ""
	c.rep.Invalid++
	c.logger().Warn().Str("parkedId", id).Str("identity", identity).Str("issue", issue).Msg("item parked as invalid")
	if h := c.e.hooks.OnParked; h != nil {
		h(c.key, parkedInvalid, id, issue)
	}
}
