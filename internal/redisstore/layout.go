package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/watukuytype"
)

// CurrentLayout is the data layout this build writes:
//
//	1  (unrecorded) every registry entry held its poller's whole definition summary
//	2  pollers are described once in prefix:{global}:pollers; registry entries name only
//	   where a key comes from (config or cli); the layout version is recorded
//	3  one due set per poller, prefix:{global}:due:<poller>, in place of the global
//	   prefix:{global}:due (a claim reads only the pollers it runs); the outbox groups keep
//	   their pending entries under one consumer, holder, instead of one per process lifetime
//	4  a key's outbox stream exists only while it holds entries (its last id kept in the
//	   state's outboxLast), and lastPoll is a compact string, not JSON: nothing is rewritten
//	   (this build reads layout-3 keys, and drops an empty outbox at the key's next cycle),
//	   but a layout-3 worker would make an outbox with ids below outboxLast, and its inspect
//	   cannot read lastPoll, so it refuses layout 4
//	5  a key's lease lives in its state hash (statehash.IsLeaseField), not in a hash of its own,
//	   prefix:{key}:lease: migrate folds every lease hash into its state (the higher epoch
//	   kept; a live layout-4 grant keeps the key leased until it lapses), and a Begin folds
//	   one the migration missed. The registry holds only keys no pollers entry lists (config
//	   keys are registered by their poller's entry): migrate drops the others. A layout-4
//	   process would fence on a lease hash no layout-5 process reads, so it refuses layout 5
const CurrentLayout = 5

// outboxHolder is the one consumer of every outbox group from layout 3 on.
const outboxHolder = "holder"

// legacyDueKey is the global due set of layouts 1 and 2.
func (s *Store) legacyDueKey() string { return s.prefix + ":{global}:due" }

// Layout implements core.Store. Data without a recorded version is layout 1.
func (s *Store) Layout(ctx context.Context) (watukuytype.Layout, error) {
	l := watukuytype.Layout{Current: CurrentLayout}
	// One transaction: read apart, another process recording the layout and registering its
	// pollers between the two reads would look like layout-1 data. The global keys share one
	// slot, so a cluster client sends it to one node. Data without a recorded layout is
	// layout 1, so only its keys count: the per-poller due sets of layout 3 are written after
	// the layout is recorded, and were one found alone, marking the database current would be
	// right for it (it is layout-3 data).
	var get *redis.StringCmd
	var exists *redis.IntCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.layoutKey())
		exists = p.Exists(ctx, s.registryKey(), s.legacyDueKey(), s.pollersKey())
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return l, err
	}
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return l, err
	default:
		if l.Version, err = strconv.Atoi(v); err != nil {
			return l, fmt.Errorf("redisstore: %s holds %q, not a layout version", s.layoutKey(), v)
		}
		return l, nil
	}
	n, err := exists.Result()
	if err != nil {
		return l, err
	}
	if n == 0 {
		l.Empty = true
	} else {
		l.Version = 1
	}
	return l, nil
}

// Migrate implements core.Store. Each step is idempotent on its own, so a migration that was
// interrupted simply runs again.
func (s *Store) Migrate(ctx context.Context) (watukuytype.Migration, error) {
	l, err := s.Layout(ctx)
	if err != nil {
		return watukuytype.Migration{}, err
	}
	m := watukuytype.Migration{From: l.Version, To: l.Version, Steps: []string{}}
	if l.Version > CurrentLayout {
		return m, &watukuytype.LayoutError{Found: l.Version, Known: CurrentLayout}
	}
	if l.Version == CurrentLayout {
		return m, nil
	}
	if !l.Empty && l.Version < 2 {
		n, err := s.splitRegistry(ctx)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate 1→2: %w", err)
		}
		m.Steps = append(m.Steps, fmt.Sprintf("1→2: described %d poller(s) once in %s; reduced the registry entries to their source", n, s.pollersKey()))
	}
	if !l.Empty && l.Version < 3 {
		moved, err := s.splitDueSet(ctx)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate 2→3: %w", err)
		}
		claimed, deleted, err := s.cleanOutboxes(ctx)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate 2→3: %w", err)
		}
		m.Steps = append(m.Steps, fmt.Sprintf("2→3: moved %d due entries from %s into one due set per poller; handed %d pending outbox entries to consumer %q and deleted %d other consumers",
			moved, s.legacyDueKey(), claimed, outboxHolder, deleted))
	}
	if !l.Empty && l.Version < 4 {
		m.Steps = append(m.Steps, "3→4: nothing rewritten: each key's empty outbox is dropped at its next cycle, lastPoll is written compact at it")
	}
	if !l.Empty && l.Version < 5 {
		folded, err := s.foldLeases(ctx)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate 4→5: %w", err)
		}
		dropped, err := s.dropListedRegistryEntries(ctx)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate 4→5: %w", err)
		}
		m.Steps = append(m.Steps, fmt.Sprintf("4→5: folded %d lease hash(es) into their keys' state hashes; dropped %d registry entries of keys their poller's entry lists",
			folded, dropped))
	}
	if err := s.rdb.Set(ctx, s.layoutKey(), CurrentLayout, 0).Err(); err != nil {
		return m, err
	}
	if l.Empty {
		m.Steps = append(m.Steps, fmt.Sprintf("empty database: recorded layout %d", CurrentLayout))
	}
	m.To = CurrentLayout
	return m, nil
}

// splitRegistry moves the poller summaries of layout-1 registry entries into the pollers hash
// and leaves {"source":"config"} in their place. It returns the number of pollers described.
func (s *Store) splitRegistry(ctx context.Context) (int, error) {
	all, err := s.rdb.HGetAll(ctx, s.registryKey()).Result()
	if err != nil {
		return 0, err
	}
	pollers := map[string]string{}
	entries := map[string]any{}
	for member, raw := range all {
		var v1 struct {
			Poller string `json:"poller"`
		}
		if json.Unmarshal([]byte(raw), &v1) != nil || v1.Poller == "" {
			continue // already a layout-2 entry
		}
		if _, err := watukuytype.ParseKey(member); err != nil {
			return 0, err
		}
		pollers[v1.Poller] = raw
		entries[member] = `{"source":"config"}`
	}
	if len(entries) == 0 {
		return 0, nil
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for name, raw := range pollers {
			p.HSetNX(ctx, s.pollersKey(), name, raw)
		}
		p.HSet(ctx, s.registryKey(), entries)
		return nil
	})
	return len(pollers), err
}

// dueMoveBatch is how many members of the legacy due set one step of splitDueSet moves.
const dueMoveBatch = 1000

// splitDueSet moves every member of the legacy global due set into its poller's due set, with
// its score (a member already there keeps its own: ZADD NX), in batches that each move and
// remove their members atomically (every key is under {global}), then deletes the legacy
// key. It returns the number of members moved.
func (s *Store) splitDueSet(ctx context.Context) (int, error) {
	moved := 0
	for {
		zs, err := s.rdb.ZRangeWithScores(ctx, s.legacyDueKey(), 0, dueMoveBatch-1).Result()
		if err != nil {
			return moved, fmt.Errorf("read %s: %w", s.legacyDueKey(), err)
		}
		if len(zs) == 0 {
			return moved, s.rdb.Del(ctx, s.legacyDueKey()).Err()
		}
		_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, z := range zs {
				member, _ := z.Member.(string)
				k, err := watukuytype.ParseKey(member)
				if err != nil {
					// Not a key (nothing ever wrote one): it cannot be scheduled and would come
					// back in every batch, so it goes.
					p.ZRem(ctx, s.legacyDueKey(), z.Member)
					continue
				}
				p.ZAddNX(ctx, s.dueKey(k.Poller), z)
				p.ZRem(ctx, s.legacyDueKey(), z.Member)
			}
			return nil
		})
		if err != nil {
			return moved, fmt.Errorf("move due entries out of %s: %w", s.legacyDueKey(), err)
		}
		moved += len(zs)
	}
}

// cleanOutboxes runs clean_outbox.lua on the outbox of every registered key: pending entries
// go to the holder consumer, the other consumers are deleted. It returns the entries handed
// over and the consumers deleted.
func (s *Store) cleanOutboxes(ctx context.Context) (claimed, deleted int64, err error) {
	members, err := s.rdb.HKeys(ctx, s.registryKey()).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", s.registryKey(), err)
	}
	for _, member := range members {
		k, err := watukuytype.ParseKey(member)
		if err != nil {
			continue
		}
		r, err := run(ctx, s, nil, cleanOutboxArgs{Key: k, Holder: outboxHolder})
		if err != nil {
			return claimed, deleted, fmt.Errorf("clean the consumers of %s: %w", s.k(k, "outbox"), err)
		}
		claimed += r.Claimed
		deleted += r.Deleted
	}
	return claimed, deleted, nil
}

// foldLeases runs fold_lease.lua on every layout-4 lease hash (prefix:{poller|partition}:lease,
// found by SCAN on every master, so deleted partitions' hashes go too) and returns how many it
// folded.
func (s *Store) foldLeases(ctx context.Context) (int, error) {
	var folded atomic.Int64 // the masters of a cluster are scanned at once
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, globEscape(s.prefix)+":{*}:lease", 1000).Iterator()
		for it.Next(ctx) {
			name := it.Val()
			tag := strings.TrimSuffix(strings.TrimPrefix(name, s.prefix+":{"), "}:lease")
			k, err := watukuytype.ParseKey(tag)
			if err != nil || s.k(k, "lease") != name {
				continue // not a key's lease hash
			}
			done, err := run(ctx, s, nil, foldLeaseArgs{Key: k, Now: s.nowArg()})
			if err != nil {
				return fmt.Errorf("fold %s: %w", name, err)
			}
			if done {
				folded.Add(1)
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else if c, ok := s.rdb.(*redis.Client); ok {
		err = scan(ctx, c)
	} else {
		return 0, fmt.Errorf("scan for lease hashes: unsupported client %T", s.rdb)
	}
	return int(folded.Load()), err
}

// globEscape escapes the characters a SCAN MATCH pattern gives a meaning to, so that a prefix
// such as "wk[eu]" matches itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
