package core

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// pollerInfo is a poller's description in the store: what an operator's tool needs about a
// poller when it has only the Redis URL and not the poller's definition. It lists no keys
// (the registry does, a key at a time), so reading it costs the same at any size.
type pollerInfo struct {
	Name     string `json:"poller"`
	Strategy string `json:"strategy,omitempty"`
	Min      string `json:"min,omitempty"`
	Max      string `json:"max,omitempty"`
	LeaseTTL string `json:"leaseTTL,omitempty"`
	// LeaseTTLMs is LeaseTTL for the claim script, which holds a claimed key for it (plus
	// ClaimGrace) until the cycle's lease keeper holds it on.
	LeaseTTLMs    int64  `json:"leaseTTLMs,omitempty"`
	SchemaVersion int    `json:"schemaVersion"`
	LogRetention  string `json:"logRetention,omitempty"`
	Shadow        bool   `json:"shadow,omitempty"`
	// CursorFormats are Poller.CursorFormats: the cursor is a time written in them.
	CursorFormats []string `json:"cursorFormats,omitempty"`
	// Budget is the shared budget the poller's requests draw from.
	Budget *budgetInfo `json:"budget,omitempty"`
	// SharedRequest is Poller.SharedRequest: partitions add refuses the poller.
	SharedRequest bool `json:"sharedRequest,omitempty"`
}

// info is p's description; the caller holds e.mu.
func (e *Engine) info(p *watukuytype.Poller) pollerInfo {
	strategy := "custom"
	if p.Strategy == watukuytype.SnapshotDiff {
		strategy = "snapshotDiff"
	}
	pi := pollerInfo{Name: p.Name, Strategy: strategy, Min: p.Schedule.Min.String(),
		Max: p.Schedule.Max.String(), LeaseTTL: p.LeaseTTL.String(), LeaseTTLMs: p.LeaseTTL.Milliseconds(), SchemaVersion: p.SchemaVersion, Shadow: p.Shadow, CursorFormats: p.CursorFormats, Budget: e.budgetOf(p), SharedRequest: p.SharedRequest}
	if p.LogRetention > 0 {
		pi.LogRetention = p.LogRetention.String()
	}
	return pi
}

func (pi pollerInfo) leaseTTL() time.Duration {
	if d, err := time.ParseDuration(pi.LeaseTTL); err == nil && d > 0 {
		return d
	}
	return DefaultLeaseTTL
}

func (pi pollerInfo) logRetention() time.Duration {
	d, _ := time.ParseDuration(pi.LogRetention)
	return d
}

// target is a key resolved for an operation: the poller's definition when this engine has it
// registered (p), its description either way, and its registry entry.
type target struct {
	key  watukuytype.Key
	p    *watukuytype.Poller
	info pollerInfo
	// source is where the key comes from: "config" or "cli".
	source string
	// deleted: partitions delete deleted it (a config key stays registered, deleted).
	deleted bool
}

// local is this engine's definition and description of poller (nil, false when it has none).
func (e *Engine) local(poller string) (*watukuytype.Poller, pollerInfo, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.pollers[poller]; p != nil {
		return p, e.info(p), true
	}
	return nil, pollerInfo{}, false
}

// resolve finds key in the registry (its poller's description and its own entry), so that
// operations work with the Redis URL alone. An unknown poller or partition is a
// *NotFoundError. It reads the same bytes whatever the size of the poller.
func (e *Engine) resolve(ctx context.Context, key watukuytype.Key) (target, error) {
	t := target{key: key}
	if err := e.ensureRegistered(ctx); err != nil {
		return t, err
	}
	p, info, ok := e.local(key.Poller)
	praw, entry, found, err := e.store.Lookup(ctx, key)
	if err != nil {
		return t, keyErr("watukuy: look up", key, err)
	}
	t.p, t.info = p, info
	if !ok {
		if praw == nil {
			return t, e.notFound(ctx, key, "")
		}
		if err := json.Unmarshal(praw, &t.info); err != nil {
			return t, fmt.Errorf("watukuy: the description of poller %q is corrupt: %w", key.Poller, err)
		}
	}
	if !found {
		return t, e.notFound(ctx, key, key.Poller)
	}
	t.source, t.deleted = entry.Source, entry.Deleted
	return t, nil
}

// knownShown is how many names a not-found error lists.
const knownShown = 20

// notFound builds the error for an unknown poller (poller == "") or partition, listing what
// exists (the first knownShown partitions of a poller).
func (e *Engine) notFound(ctx context.Context, key watukuytype.Key, poller string) error {
	nf := &watukuytype.NotFoundError{Poller: key.Poller, Partition: key.Partition, PartitionMissing: poller != ""}
	if poller == "" {
		names, err := e.knownPollers(ctx)
		if err != nil {
			return nf
		}
		nf.Known = names
		if len(names) == 0 {
			if l, err := e.store.Layout(ctx); err == nil && l.Err() != nil {
				nf.Hint = l.Err().Error()
			}
		}
		return nf
	}
	rks, err := e.store.ListKeys(ctx, poller, nil, knownShown+1)
	if err != nil {
		return nf
	}
	for i, rk := range rks {
		if i == knownShown {
			nf.Hint = "and more: `watukuy inspect --poller " + poller + "` lists them"
			break
		}
		nf.Known = append(nf.Known, rk.Partition)
	}
	return nf
}

// knownPollers lists the registered pollers (in the store, or this engine's), sorted.
func (e *Engine) knownPollers(ctx context.Context) ([]string, error) {
	stored, err := e.store.Pollers(ctx)
	if err != nil {
		return nil, fmt.Errorf("watukuy: read the pollers: %w", err)
	}
	names := map[string]bool{}
	for n := range stored {
		names[n] = true
	}
	e.mu.Lock()
	for n := range e.pollers {
		names[n] = true
	}
	e.mu.Unlock()
	return slices.Sorted(maps.Keys(names)), nil
}

// describe is what this engine knows of poller: its definition and description, else the
// store's description (pollers, from Pollers).
func (e *Engine) describe(poller string, pollers map[string][]byte) (*watukuytype.Poller, pollerInfo) {
	if p, info, ok := e.local(poller); ok {
		return p, info
	}
	var info pollerInfo
	_ = json.Unmarshal(pollers[poller], &info)
	return nil, info
}

// listPage is the largest page of keys one call lists.
const listPage = 1000

// page lists up to limit known keys after the cursor after (a Key.String(); "" from the
// first), of poller (every poller when ""), in poller then partition order, with what resolve
// would find for each, and the cursor of the next page ("" when this one ends the listing).
// An unknown poller is a *NotFoundError. Each page reads the registry for its own keys only.
func (e *Engine) page(ctx context.Context, poller, after string, limit int) ([]target, string, error) {
	if err := e.ensureRegistered(ctx); err != nil {
		return nil, "", err
	}
	limit = min(max(limit, 1), listPage)
	stored, err := e.store.Pollers(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("watukuy: read the pollers: %w", err)
	}
	names, err := e.knownPollers(ctx)
	if err != nil {
		return nil, "", err
	}
	if poller != "" {
		if !slices.Contains(names, poller) {
			return nil, "", e.notFound(ctx, watukuytype.Key{Poller: poller}, "")
		}
		names = []string{poller}
	}
	var from *watukuytype.Key
	if after != "" {
		k, err := watukuytype.ParseKey(after)
		if err != nil || poller != "" && k.Poller != poller {
			return nil, "", &watukuytype.ConfigError{Poller: poller, Field: "after", Msg: fmt.Sprintf("%q is not a cursor of this listing (the next cursor of a page of it)", after)}
		}
		from = &k
	}
	var out []target
	for _, name := range names {
		var partAfter *string
		if from != nil {
			switch c := strings.Compare(name, from.Poller); {
			case c < 0:
				continue
			case c == 0:
				partAfter = &from.Partition
			}
		}
		p, info := e.describe(name, stored)
		rks, err := e.store.ListKeys(ctx, name, partAfter, limit-len(out)+1)
		if err != nil {
			return nil, "", fmt.Errorf("watukuy: list the keys of poller %q: %w", name, err)
		}
		for _, rk := range rks {
			if len(out) == limit {
				return out, out[len(out)-1].key.String(), nil
			}
			out = append(out, target{key: watukuytype.Key{Poller: name, Partition: rk.Partition}, p: p, info: info,
				source: rk.Entry.Source, deleted: rk.Entry.Deleted})
		}
	}
	return out, "", nil
}

// eachTarget calls fn with every known key of poller (every poller when ""), a page at a time.
func (e *Engine) eachTarget(ctx context.Context, poller string, fn func(target) error) error {
	after := ""
	for {
		ts, next, err := e.page(ctx, poller, after, listPage)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if err := fn(t); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		after = next
	}
}

// PollerKeys counts the scheduled keys (registered and not deleted) of every known poller,
// by name, in one read.
func (e *Engine) PollerKeys(ctx context.Context) (map[string]int64, error) {
	names, err := e.knownPollers(ctx)
	if err != nil {
		return nil, err
	}
	n, err := e.store.CountScheduled(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("watukuy: count keys: %w", err)
	}
	out := make(map[string]int64, len(names))
	for i, name := range names {
		out[name] = n[i]
	}
	return out, nil
}

// KeysPage lists up to limit known keys of poller (every poller when "") after the cursor
// after ("" from the first), sorted, and the cursor of the next page ("" at the end). An
// unknown poller is a *NotFoundError.
func (e *Engine) KeysPage(ctx context.Context, poller, after string, limit int) ([]watukuytype.Key, string, error) {
	ts, next, err := e.page(ctx, poller, after, limit)
	keys := make([]watukuytype.Key, len(ts))
	for i, t := range ts {
		keys[i] = t.key
	}
	return keys, next, err
}

// Keys lists every known key of poller (every poller when ""), sorted, reading the registry
// a page at a time. An unknown poller is a *NotFoundError.
func (e *Engine) Keys(ctx context.Context, poller string) ([]watukuytype.Key, error) {
	var keys []watukuytype.Key
	err := e.eachTarget(ctx, poller, func(t target) error {
		keys = append(keys, t.key)
		return nil
	})
	return keys, err
}

// EachActiveKey calls fn with each key of poller (every poller when "") that takes
// operations (every known key but the deleted ones), a page of the registry at a time.
func (e *Engine) EachActiveKey(ctx context.Context, poller string, fn func(watukuytype.Key) error) error {
	return e.eachTarget(ctx, poller, func(t target) error {
		if t.deleted {
			return nil
		}
		return fn(t.key)
	})
}

// checkLayout refuses a database whose layout is not this build's; an empty database is
// marked current.
func (e *Engine) checkLayout(ctx context.Context) error {
	l, err := e.store.Layout(ctx)
	if err != nil {
		return fmt.Errorf("watukuy: read the data layout: %w", err)
	}
	if err := l.Err(); err != nil || !l.Empty {
		return err
	}
	e.mu.Lock()
	none := len(e.pollers) == 0
	e.mu.Unlock()
	if none {
		return nil // an operator's look at an empty (or the wrong) database writes nothing
	}
	_, err = e.store.Migrate(ctx)
	return err
}

// Layout reads the database's data layout.
func (e *Engine) Layout(ctx context.Context) (watukuytype.Layout, error) { return e.store.Layout(ctx) }

// Migrate upgrades the data layout in place; running it again changes nothing.
func (e *Engine) Migrate(ctx context.Context) (watukuytype.Migration, error) {
	m, err := e.store.Migrate(ctx)
	if err != nil {
		return m, fmt.Errorf("watukuy: migrate: %w", err)
	}
	e.mu.Lock()
	e.registered = false
	e.regGen++
	e.mu.Unlock()
	return m, nil
}
