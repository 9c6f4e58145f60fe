package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// The registry. The pollers hash describes each poller (its public settings, no keys). Each
// poller's keys are in its registry: an entry per key, kept in small hashes (leaves) found
// through a sorted set of their lower bounds (prelude.lua, reg_*), so that finding, writing or
// paging one key costs the same at ten partitions and at a million. A key's entry is 'c' (a
// config key), 'a<ms>' (added with partitions add) or '-c' (a config key deleted: it stays
// registered, deleted, since a config may list it; a deleted added key is forgotten).

// keysKey is the index of poller's registry; its leaves are keysKey(poller)+"|"+lower bound.
func (s *Store) keysKey(poller string) string { return s.prefix + ":{global}:keys:" + poller }

// retiredKey holds each poller's high-water marks: the highest epoch and floor (lives, outbox
// ids) its deleted keys reached, "epoch floor". A key begun after its deletion was forgotten
// starts above them (begin.lua's seed).
func (s *Store) retiredKey() string { return s.prefix + ":{global}:retired" }

// registerBatch is how many keys one register_keys.lua call registers.
const registerBatch = 250

// decodeEntry reads a registry entry.
func decodeEntry(v string) (core.RegEntry, error) {
	switch {
	case v == "c":
		return core.RegEntry{Source: "config"}, nil
	case v == "-c":
		return core.RegEntry{Source: "config", Deleted: true}, nil
	case strings.HasPrefix(v, "a"):
		ms, err := strconv.ParseInt(v[1:], 10, 64)
		if err == nil {
			return core.RegEntry{Source: "cli", AddedAt: time.UnixMilli(ms)}, nil
		}
	}
	return core.RegEntry{}, fmt.Errorf("registry entry %q is none of c, -c, a<ms>", v)
}

// Register implements core.Store: the descriptions in one HSET, then each poller's keys in
// batches (register_keys.lua), each a bounded script.
func (s *Store) Register(ctx context.Context, pollers map[string][]byte, keys []watukuytype.Key) error {
	if len(pollers) > 0 {
		kv := make([]any, 0, 2*len(pollers))
		for name, desc := range pollers {
			kv = append(kv, name, desc)
		}
		if err := s.rdb.HSet(ctx, s.pollersKey(), kv...).Err(); err != nil {
			return fmt.Errorf("redisstore: describe %d poller(s): %w", len(pollers), err)
		}
	}
	byPoller := map[string][]string{}
	for _, k := range keys {
		byPoller[k.Poller] = append(byPoller[k.Poller], k.Partition)
	}
	for poller, parts := range byPoller {
		for from := 0; from < len(parts); from += registerBatch {
			a := registerKeysArgs{Now: s.nowArg(), Poller: poller, Partitions: parts[from:min(from+registerBatch, len(parts))]}
			if _, err := run(ctx, s, nil, a); err != nil {
				return fmt.Errorf("redisstore: register the keys of poller %q: %w", poller, err)
			}
		}
	}
	return nil
}

// Pollers implements core.Store.
func (s *Store) Pollers(ctx context.Context) (map[string][]byte, error) {
	m, err := s.rdb.HGetAll(ctx, s.pollersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: read %s: %w", s.pollersKey(), err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}

// Lookup implements core.Store: one script reads the poller's description, the key's entry
// (one leaf of the registry) and nothing else.
func (s *Store) Lookup(ctx context.Context, key watukuytype.Key) ([]byte, core.RegEntry, bool, error) {
	r, err := run(ctx, s, nil, readRegistryArgs{Key: key})
	if err != nil {
		return nil, core.RegEntry{}, false, err
	}
	if r.Entry == "" {
		return r.Poller, core.RegEntry{}, false, nil
	}
	e, err := decodeEntry(r.Entry)
	if err != nil {
		return r.Poller, e, false, fmt.Errorf("redisstore: %s: %w", key.Describe(), err)
	}
	return r.Poller, e, true, nil
}

// ListKeys implements core.Store: page_registry.lua returns whole leaves from the one after's
// partition falls in; they are sorted here and cut to the limit.
func (s *Store) ListKeys(ctx context.Context, poller string, after *string, limit int) ([]core.RegKey, error) {
	if limit <= 0 {
		return nil, nil
	}
	kvs, err := run(ctx, s, nil, pageRegistryArgs{Poller: poller, After: after, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("redisstore: list the keys of poller %q: %w", poller, err)
	}
	out := make([]core.RegKey, 0, len(kvs)/2)
	for i := 0; i+1 < len(kvs); i += 2 {
		e, err := decodeEntry(kvs[i+1])
		if err != nil {
			return nil, fmt.Errorf("redisstore: poller %q partition %q: %w", poller, kvs[i], err)
		}
		out = append(out, core.RegKey{Partition: kvs[i], Entry: e})
	}
	slices.SortFunc(out, func(a, b core.RegKey) int { return strings.Compare(a.Partition, b.Partition) })
	return out[:min(len(out), limit)], nil
}

// AddKey implements core.Store: the registry's entry and the due entry first (add_key.lua),
// then, for a key its state says deleted, its data (delete_key.lua in mode revive), whatever
// the registry said: a process that dies in between (or a delete cut short) leaves the key
// registered and deleted in its state, which a partitions add again finishes.
func (s *Store) AddKey(ctx context.Context, l core.Lease, revive bool) (bool, error) {
	prev, err := run(ctx, s, nil, addKeyArgs{Now: s.nowArg(), Key: l.Key, Entry: "a" + strconv.FormatInt(time.Now().UnixMilli(), 10)})
	if err != nil {
		return false, fmt.Errorf("redisstore: register %s: %w", l.Key.Describe(), err)
	}
	if prev != "" && prev != "-c" && !revive {
		return true, nil
	}
	if revive {
		if _, err := run(ctx, s, &l, deleteKeyArgs{Key: l.Key, writeFence: s.writeFenceOf(l), Revive: true}); err != nil {
			return false, err
		}
	}
	return false, s.rdb.Publish(ctx, s.WakeChannel(), l.Key.String()).Err()
}

// MarkTTL is how long the deletion mark of a deleted key lives: stale tasks and operations
// find it and write nothing; after it, the registry refuses them. It outlives a seed's age
// (begin.lua's SEED_MAX_AGE, 5 s), so that no first Begin whose registry read came before
// the delete lands after the mark.
const MarkTTL = 15 * time.Second

// DeleteKey implements core.Store, under the lease of a Begin in mode delete (which marked
// the key deleted): the data goes with the marks the key reached kept in its state
// (delete_key.lua), the poller's high-water marks are raised to them and the registry forgets
// the key (retire_key.lua), and last the lease is released and the mark left to expire
// (end_delete.lua). A process that dies on the way leaves the key marked deleted for good,
// which a delete again finishes.
func (s *Store) DeleteKey(ctx context.Context, l core.Lease) error {
	k := l.Key
	marks, err := run(ctx, s, &l, deleteKeyArgs{Key: k, writeFence: s.writeFenceOf(l)})
	if err != nil {
		return err
	}
	if _, err := run(ctx, s, nil, retireKeyArgs{Key: k, Epoch: marks.Epoch, Floor: marks.Floor}); err != nil {
		return fmt.Errorf("redisstore: drop %s from the registry and due set: %w", k.Describe(), err)
	}
	if _, err := run(ctx, s, &l, endDeleteArgs{Key: k, writeFence: s.writeFenceOf(l), TTL: s.markTTL}); err != nil {
		return err
	}
	return nil
}

// repairBatch is how many keys one step of the repair sweep reads from the registry and
// checks in one ZMSCORE.
const repairBatch = 500

// RepairDue implements core.Store: every poller's registry, a page at a time; per page one
// ZMSCORE finds the keys without a due entry, and only for those the state (deleted, next due
// time) is read and repair_due.lua gives them one.
func (s *Store) RepairDue(ctx context.Context) ([]watukuytype.Key, error) {
	names, err := s.pollerNames(ctx, nil)
	if err != nil {
		return nil, err
	}
	var repaired []watukuytype.Key
	for _, poller := range names {
		var after *string
		for {
			page, err := s.ListKeys(ctx, poller, after, repairBatch)
			if err != nil {
				return repaired, err
			}
			fixed, err := s.repairKeys(ctx, poller, page)
			repaired = append(repaired, fixed...)
			if err != nil {
				return repaired, err
			}
			if len(page) < repairBatch {
				break
			}
			after = &page[len(page)-1].Partition
		}
	}
	return repaired, nil
}

// repairKeys gives the live keys of page (one poller's) that lack a due entry one.
func (s *Store) repairKeys(ctx context.Context, poller string, page []core.RegKey) ([]watukuytype.Key, error) {
	var members []string
	var keys []watukuytype.Key
	for _, rk := range page {
		if !rk.Entry.Deleted {
			k := watukuytype.Key{Poller: poller, Partition: rk.Partition}
			keys, members = append(keys, k), append(members, k.String())
		}
	}
	if len(members) == 0 {
		return nil, nil
	}
	scores, err := s.rdb.ZMScore(ctx, s.dueKey(poller), members...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: read the due entries of poller %q: %w", poller, err)
	}
	var missing []watukuytype.Key
	for i, sc := range scores {
		if sc == 0 {
			// ZMSCORE reports a missing member as 0 (go-redis); no due time is 0.
			missing = append(missing, keys[i])
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	states := make([]*redis.SliceCmd, len(missing))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range missing {
			states[i] = p.HMGet(ctx, s.k(k, "state"), statehash.Deleted, statehash.NextDue)
		}
		return nil
	})
	repair := repairDueArgs{Now: s.nowArg(), Poller: poller}
	for i, k := range missing {
		st, err := states[i].Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: read the state of %s: %w", k.Describe(), err)
		}
		if st[0] == "1" {
			continue // deleted (its mark, or a delete cut short): stays out of the due set
		}
		due := int64(0) // absent, or "0" (triggered): due now
		if v, ok := st[1].(string); ok {
			due, _ = strconv.ParseInt(v, 10, 64)
		}
		repair.Entries = append(repair.Entries, repairEntry{Partition: k.Partition, Due: due})
	}
	if len(repair.Entries) == 0 {
		return nil, nil
	}
	return run(ctx, s, nil, repair)
}

// errFresh is begin's answer for a key without an epoch, which needs a seed.
var errFresh = errors.New("fresh")
