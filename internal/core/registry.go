package core

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// pollerInfo is a poller's registry entry: what an operator's tool needs about a poller when
// it has only the Redis URL and not the poller's definition.
type pollerInfo struct {
	Name       string   `json:"poller"`
	Partitions []string `json:"partitions,omitempty"`
	Strategy   string   `json:"strategy,omitempty"`
	Min        string   `json:"min,omitempty"`
	Max        string   `json:"max,omitempty"`
	LeaseTTL   string   `json:"leaseTTL,omitempty"`
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
}

// keyEntry is a key's registry entry.
type keyEntry struct {
	// Source is "config" (a partition of a registered definition) or "cli" (partitions add).
	Source  string `json:"source"`
	AddedAt int64  `json:"addedAt,omitempty"`
}

// info is p's registry entry; the caller holds e.mu.
func (e *Engine) info(p *watukuytype.Poller) pollerInfo {
	strategy := "custom"
	if p.Strategy == watukuytype.SnapshotDiff {
		strategy = "snapshotDiff"
	}
	pi := pollerInfo{Name: p.Name, Partitions: p.Partitions, Strategy: strategy, Min: p.Schedule.Min.String(),
		Max: p.Schedule.Max.String(), LeaseTTL: p.LeaseTTL.String(), LeaseTTLMs: p.LeaseTTL.Milliseconds(), SchemaVersion: p.SchemaVersion, Shadow: p.Shadow, CursorFormats: p.CursorFormats, Budget: e.budgetOf(p)}
	if p.LogRetention > 0 {
		pi.LogRetention = p.LogRetention.String()
	}
	return pi
}

// lists reports whether the entry lists partition: one of its partitions, or the
// unpartitioned key's "" when it has none (as pollerKeys). A listed key is a config key and
// has no entry of its own in the store's registry.
func (pi pollerInfo) lists(partition string) bool {
	return slices.Contains(listedOf(pi.Partitions), partition)
}

// ListedPartitions is the partitions of the keys a poller's entry in the store's pollers hash
// lists (its config keys, which have no registry entry): its partitions, or the
// unpartitioned key's "" when it has none.
func ListedPartitions(entry []byte) ([]string, error) {
	var pi pollerInfo
	if err := json.Unmarshal(entry, &pi); err != nil {
		return nil, err
	}
	return listedOf(pi.Partitions), nil
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
// registered (p), and its registry entry either way.
type target struct {
	key  watukuytype.Key
	p    *watukuytype.Poller
	info pollerInfo
	// source is where the key comes from: "config" or "cli".
	source string
}

// resolve finds key among the registered pollers and the registry (its poller's entry lists
// it, or it has an entry of its own), so that operations work with the Redis URL alone. An unknown poller or partition is a *NotFoundError.
func (e *Engine) resolve(ctx context.Context, key watukuytype.Key) (target, error) {
	t := target{key: key}
	if err := e.ensureRegistered(ctx); err != nil {
		return t, err
	}
	e.mu.Lock()
	if t.p = e.pollers[key.Poller]; t.p != nil {
		t.info = e.info(t.p)
	}
	e.mu.Unlock()
	if t.p != nil {
		if slices.Contains(pollerKeys(t.p), key) {
			t.source = "config"
			return t, nil
		}
	}
	praw, kraw, err := e.store.Lookup(ctx, key)
	if err != nil {
		return t, keyErr("watukuy: look up", key, err)
	}
	var stored pollerInfo // the poller's entry in the store: it lists the config keys
	listed := false
	if praw != nil {
		err := json.Unmarshal(praw, &stored)
		if err != nil && t.p == nil {
			return t, fmt.Errorf("watukuy: registry entry of poller %q is corrupt: %w", key.Poller, err)
		}
		listed = err == nil && stored.lists(key.Partition)
	}
	if t.p == nil {
		if praw == nil {
			return t, e.notFound(ctx, key, "")
		}
		t.info = stored
	}
	switch {
	case listed:
		t.source = "config"
	case kraw != nil:
		var ke keyEntry
		_ = json.Unmarshal(kraw, &ke)
		t.source = ke.Source
	default:
		return t, e.notFound(ctx, key, key.Poller)
	}
	return t, nil
}

// notFound builds the error for an unknown poller (poller == "") or partition, listing what
// exists.
func (e *Engine) notFound(ctx context.Context, key watukuytype.Key, poller string) error {
	nf := &watukuytype.NotFoundError{Poller: key.Poller, Partition: key.Partition, PartitionMissing: poller != ""}
	pollers, keys, err := e.registry(ctx)
	if err != nil {
		return nf
	}
	if poller == "" {
		for name := range pollers {
			nf.Known = append(nf.Known, name)
		}
	} else {
		for _, t := range keys {
			if t.key.Poller == poller {
				nf.Known = append(nf.Known, t.key.Partition)
			}
		}
	}
	sort.Strings(nf.Known)
	if len(pollers) == 0 {
		if l, err := e.store.Layout(ctx); err == nil && !l.Empty && l.Version < l.Current {
			nf.Hint = "the data layout is older than this version: run `watukuy migrate`"
		}
	}
	return nf
}

// registry merges the registered pollers with the Redis registry: every known poller's
// info, and every known key as a target, sorted. A key is known by its registry entry, or
// because a poller's entry (in Redis, or this engine's) lists it: a config key.
func (e *Engine) registry(ctx context.Context) (map[string]pollerInfo, []target, error) {
	praw, kraw, err := e.store.Registry(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("watukuy: read the registry: %w", err)
	}
	pollers := map[string]pollerInfo{}
	stored := map[string]pollerInfo{} // as Redis has them: their listed keys are known
	for name, raw := range praw {
		var pi pollerInfo
		if json.Unmarshal(raw, &pi) == nil {
			pollers[name], stored[name] = pi, pi
		}
	}
	e.mu.Lock()
	local := maps.Clone(e.pollers)
	for _, p := range local {
		pollers[p.Name] = e.info(p)
	}
	e.mu.Unlock()
	byKey := map[watukuytype.Key]target{}
	for s, raw := range kraw {
		k, err := watukuytype.ParseKey(s)
		if err != nil {
			continue
		}
		var ke keyEntry
		_ = json.Unmarshal(raw, &ke)
		byKey[k] = target{key: k, p: local[k.Poller], info: pollers[k.Poller], source: ke.Source}
	}
	for name, pi := range stored {
		for _, k := range keysOf(name, pi.Partitions) {
			byKey[k] = target{key: k, p: local[name], info: pollers[name], source: "config"}
		}
	}
	for _, p := range local {
		for _, k := range pollerKeys(p) {
			byKey[k] = target{key: k, p: p, info: pollers[k.Poller], source: "config"}
		}
	}
	ts := slices.Collect(maps.Values(byKey))
	slices.SortFunc(ts, func(a, b target) int {
		return cmp.Or(cmp.Compare(a.key.Poller, b.key.Poller), cmp.Compare(a.key.Partition, b.key.Partition))
	})
	return pollers, ts, nil
}

// targets lists the known keys of poller (every poller when "") with what resolve would find
// for each, from one read of the registry. An unknown poller is a *NotFoundError.
func (e *Engine) targets(ctx context.Context, poller string) ([]target, error) {
	pollers, ts, err := e.registry(ctx)
	if err != nil {
		return nil, err
	}
	if poller == "" {
		return ts, nil
	}
	if _, ok := pollers[poller]; !ok {
		return nil, e.notFound(ctx, watukuytype.Key{Poller: poller}, "")
	}
	return slices.DeleteFunc(ts, func(t target) bool { return t.key.Poller != poller }), nil
}

// Keys lists the known keys of poller (every poller when ""), sorted. An unknown poller is a
// *NotFoundError.
func (e *Engine) Keys(ctx context.Context, poller string) ([]watukuytype.Key, error) {
	ts, err := e.targets(ctx, poller)
	keys := make([]watukuytype.Key, len(ts))
	for i, t := range ts {
		keys[i] = t.key
	}
	return keys, err
}

// ActiveKeys lists the keys of poller (every poller when "") that take operations: the known
// keys but the deleted partitions a config keeps listing. It inspects each key.
func (e *Engine) ActiveKeys(ctx context.Context, poller string) ([]watukuytype.Key, error) {
	kis, err := e.InspectAll(ctx, poller)
	if err != nil {
		return nil, err
	}
	var keys []watukuytype.Key
	for _, ki := range kis {
		if ki.Status != watukuytype.StatusDeleted {
			keys = append(keys, watukuytype.Key{Poller: ki.Poller, Partition: ki.Partition})
		}
	}
	return keys, nil
}

// checkLayout refuses a database whose layout is newer than this build knows, or older
// (until `watukuy migrate`); an empty database is marked current.
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
