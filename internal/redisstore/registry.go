package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// The registry of keys. A poller's entry in the pollers hash lists its config keys (its
// partitions, or its one unpartitioned key); the registry hash holds an entry only for a key
// that no pollers entry lists: one added with partitions add ("cli"), or a config key that a
// later registration dropped from the config ("config": it stays registered). A listed key
// costs no registry entry (issue 14: ~90 B per key).

// listedSet is core.ListedPartitions as a set.
func listedSet(raw []byte) (map[string]bool, error) {
	parts, err := core.ListedPartitions(raw)
	if err != nil {
		return nil, err
	}
	return setOf(parts), nil
}

func setOf(parts []string) map[string]bool {
	set := make(map[string]bool, len(parts))
	for _, p := range parts {
		set[p] = true
	}
	return set
}

// registerPoller writes one poller's pollers entry and keeps the registry to the keys the
// entry does not list: when the entry changes, a key the old entry listed and the new one
// drops gets {"source":"config"} (it stays registered, as a config key dropped from the
// config always did) unless it has an entry, and an entry of a key the new one lists goes (a
// partitions add of it wrote one; the config lists it now). The difference is worked out
// here, inside WATCH on the pollers and registry hashes, and only the entry and the changed
// registry entries are written (MULTI/EXEC): a script that decoded both entries took seconds
// of Redis at a million partitions, and blocked every other client meanwhile. It reports
// whether the entry changed.
func (s *Store) registerPoller(ctx context.Context, name string, entry []byte, listed map[string]bool) (bool, error) {
	changed := false
	txf := func(tx *redis.Tx) error {
		old, err := tx.HGet(ctx, s.pollersKey(), name).Result()
		switch {
		case errors.Is(err, redis.Nil):
			old = ""
		case err != nil:
			return err
		}
		if changed = old != string(entry); !changed {
			return nil
		}
		var dropped []string
		if old != "" {
			// An old entry that is not JSON lists nothing that could be dropped.
			if parts, err := core.ListedPartitions([]byte(old)); err == nil {
				for _, p := range parts {
					if !listed[p] {
						dropped = append(dropped, watukuytype.Key{Poller: name, Partition: p}.String())
					}
				}
			}
		}
		// The registry holds only unlisted keys, so it is small: its entries of this poller
		// that the new entry lists go.
		var gone []string
		it := tx.HScan(ctx, s.registryKey(), 0, globEscape(name)+"|*", registryBatch).Iterator()
		for i := 0; it.Next(ctx); i++ {
			if i%2 == 1 {
				continue // a value
			}
			if k, err := watukuytype.ParseKey(it.Val()); err == nil && k.Poller == name && listed[k.Partition] {
				gone = append(gone, it.Val())
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, member := range dropped {
				p.HSetNX(ctx, s.registryKey(), member, `{"source":"config"}`)
			}
			for i := 0; i < len(gone); i += registryBatch {
				p.HDel(ctx, s.registryKey(), gone[i:min(i+registryBatch, len(gone))]...)
			}
			p.HSet(ctx, s.pollersKey(), name, entry)
			return nil
		})
		return err
	}
	// Another registration or a partitions add between the read and the write: again.
	err := s.watch(ctx, txf, s.pollersKey(), s.registryKey())
	return changed, err
}

// Register implements core.Store: per poller, registerPoller writes its entry and, when the
// entry changed, brings the registry in line with it; then one pipeline writes the
// registry entries of the keys no poller entry of this call lists and puts every key in the
// due set (ZADD NX: a key keeps its due time).
func (s *Store) Register(ctx context.Context, pollers map[string][]byte, keys map[watukuytype.Key][]byte) error {
	if len(pollers) == 0 && len(keys) == 0 {
		return nil
	}
	listed := make(map[string]map[string]bool, len(pollers))
	for name, info := range pollers {
		set, err := listedSet(info)
		if err != nil {
			return fmt.Errorf("redisstore: the pollers entry of poller %q is not JSON: %w", name, err)
		}
		listed[name] = set
	}
	for name, info := range pollers {
		if _, err := s.registerPoller(ctx, name, info, listed[name]); err != nil {
			return fmt.Errorf("redisstore: register poller %q: %w", name, err)
		}
	}
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, entry := range keys {
			if !listed[k.Poller][k.Partition] {
				p.HSet(ctx, s.registryKey(), k.String(), entry)
			}
			p.ZAddNX(ctx, s.dueKey(k.Poller), redis.Z{Score: float64(ms(now)), Member: k.String()})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: register %d keys: %w", len(keys), err)
	}
	return nil
}

// Lookup implements core.Store.
func (s *Store) Lookup(ctx context.Context, key watukuytype.Key) ([]byte, []byte, error) {
	var pc, kc *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		pc = p.HGet(ctx, s.pollersKey(), key.Poller)
		kc = p.HGet(ctx, s.registryKey(), key.String())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	bytesOf := func(c *redis.StringCmd) []byte {
		if c.Err() != nil {
			return nil
		}
		return []byte(c.Val())
	}
	return bytesOf(pc), bytesOf(kc), nil
}

// Registry implements core.Store.
func (s *Store) Registry(ctx context.Context) (map[string][]byte, map[string][]byte, error) {
	var pc, kc *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		pc = p.HGetAll(ctx, s.pollersKey())
		kc = p.HGetAll(ctx, s.registryKey())
		return nil
	}); err != nil {
		return nil, nil, err
	}
	toBytes := func(m map[string]string) map[string][]byte {
		out := make(map[string][]byte, len(m))
		for k, v := range m {
			out[k] = []byte(v)
		}
		return out
	}
	return toBytes(pc.Val()), toBytes(kc.Val()), nil
}

// watchRetries bounds the attempts of a WATCH transaction that others keep invalidating.
const watchRetries = 20

// watch runs fn in a WATCH transaction on keys, again while another client changes them
// between its read and its write, watchRetries times at most.
func (s *Store) watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error {
	for range watchRetries {
		if err := s.rdb.Watch(ctx, fn, keys...); !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("%v kept changing under %d attempts", keys, watchRetries)
}

// AddPartition implements core.Store. A key its poller's entry lists gets no registry entry
// (and loses a stale one): it is a config key. The read of the entry and the registry write
// are one transaction (WATCH), so a registration that starts or stops listing the key in
// between cannot leave it with the wrong kind of entry.
func (s *Store) AddPartition(ctx context.Context, key watukuytype.Key, entry []byte) error {
	write := func(tx *redis.Tx) error {
		raw, err := tx.HGet(ctx, s.pollersKey(), key.Poller).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		listed := false
		if err == nil {
			set, err := listedSet(raw)
			if err != nil {
				return fmt.Errorf("the pollers entry of poller %q is not JSON: %w", key.Poller, err)
			}
			listed = set[key.Partition]
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if listed {
				p.HDel(ctx, s.registryKey(), key.String())
			} else {
				p.HSet(ctx, s.registryKey(), key.String(), entry)
			}
			return nil
		})
		return err
	}
	if err := s.watch(ctx, write, s.pollersKey()); err != nil {
		return fmt.Errorf("redisstore: register %s: %w", key.Describe(), err)
	}
	return s.reviveKey(ctx, key)
}

// reviveKey lifts key's deletion mark and makes it due now (partitions add).
func (s *Store) reviveKey(ctx context.Context, key watukuytype.Key) error {
	state := s.k(key, "state")
	marks, err := s.rdb.HMGet(ctx, state, statehash.Deleted, statehash.Incarnation).Result()
	if err != nil {
		return err
	}
	if marks[0] != nil && marks[1] == nil {
		// Deleted by a release before incarnations: the lives of its identities start
		// here, so the deleted partition's ids do not come back (G2).
		now, err := s.now(ctx)
		if err != nil {
			return err
		}
		if err := s.rdb.HSetNX(ctx, state, statehash.Incarnation, now.UnixMilli()).Err(); err != nil {
			return err
		}
	}
	if err := s.rdb.HDel(ctx, state, statehash.Deleted).Err(); err != nil {
		return err
	}
	return s.Trigger(ctx, key)
}

// DeleteKey implements core.Store. The data goes first, under the fence; a scheduler that
// claims the key before it leaves the registry and due set finds the deletion mark. The
// registry entry and the due score are read before, so that the global cleanup
// (forget_key.lua) leaves a key that a partitions add brought back in between: a cli key by
// its new entry, a config key (listed, no entry) by the due entry the add wrote. A deleted
// config key stays listed, as deleted, as long as its poller's entry lists it.
func (s *Store) DeleteKey(ctx context.Context, l core.Lease) error {
	k := l.Key
	var ec *redis.StringCmd
	var dc *redis.FloatCmd
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ec = p.HGet(ctx, s.registryKey(), k.String())
		dc = p.ZScore(ctx, s.dueKey(k.Poller), k.String())
		return nil
	})
	entry, err := ec.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redisstore: read the registry entry of %s: %w", k.Describe(), err)
	}
	due := ""
	switch score, err := dc.Result(); {
	case err == nil:
		due = strconv.FormatFloat(score, 'f', -1, 64)
	case !errors.Is(err, redis.Nil):
		return fmt.Errorf("redisstore: read the due entry of %s: %w", k.Describe(), err)
	}
	if _, err := run(ctx, s, &l, deleteKeyArgs{Key: k, writeFence: s.writeFenceOf(l)}); err != nil {
		return err
	}
	if _, err := run(ctx, s, nil, forgetKeyArgs{Key: k, Entry: entry, Due: due}); err != nil {
		return fmt.Errorf("redisstore: drop %s from the registry and due set: %w", k.Describe(), err)
	}
	return nil
}

// repairBatch is how many keys one step of the repair sweep reads (an HSCAN COUNT of the
// registry, or a slice of a pollers entry's partitions) and checks in one pipelined round
// trip.
const repairBatch = 500

// RepairDue implements core.Store: the registry's entries (HSCAN), then every pollers
// entry's listed keys, in batches; per batch, one pipelined round trip reads each key's
// deletion mark, next due time and due entry, and, only when some lack an entry,
// repair_due.lua gives them one.
func (s *Store) RepairDue(ctx context.Context) ([]watukuytype.Key, error) {
	var repaired []watukuytype.Key
	var cursor uint64
	for {
		kvs, next, err := s.rdb.HScan(ctx, s.registryKey(), cursor, "", repairBatch).Result()
		if err != nil {
			return repaired, fmt.Errorf("redisstore: scan %s: %w", s.registryKey(), err)
		}
		var keys []watukuytype.Key
		for i := 0; i < len(kvs); i += 2 {
			if k, err := watukuytype.ParseKey(kvs[i]); err == nil {
				keys = append(keys, k)
			}
		}
		fixed, err := s.repairKeys(ctx, keys, false)
		repaired = append(repaired, fixed...)
		if err != nil {
			return repaired, err
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	err := s.eachListing(ctx, func(poller string, parts []string) error {
		for from := 0; from < len(parts); from += repairBatch {
			batch := parts[from:min(from+repairBatch, len(parts))]
			keys := make([]watukuytype.Key, len(batch))
			for i, p := range batch {
				keys[i] = watukuytype.Key{Poller: poller, Partition: p}
			}
			fixed, err := s.repairKeys(ctx, keys, true)
			repaired = append(repaired, fixed...)
			if err != nil {
				return err
			}
		}
		return nil
	})
	return repaired, err
}

// eachListing calls fn with every pollers entry's listed partitions, one entry read at a
// time (an entry lists every partition: megabytes at a million). An entry that is not JSON
// is an error naming its poller.
func (s *Store) eachListing(ctx context.Context, fn func(poller string, parts []string) error) error {
	names, err := s.pollerNames(ctx, nil)
	if err != nil {
		return err
	}
	for _, name := range names {
		raw, err := s.rdb.HGet(ctx, s.pollersKey(), name).Bytes()
		if errors.Is(err, redis.Nil) {
			continue // gone meanwhile
		}
		if err != nil {
			return fmt.Errorf("redisstore: read the pollers entry of poller %q: %w", name, err)
		}
		parts, err := core.ListedPartitions(raw)
		if err != nil {
			return fmt.Errorf("redisstore: the pollers entry of poller %q is not JSON: %w", name, err)
		}
		if err := fn(name, parts); err != nil {
			return err
		}
	}
	return nil
}

// repairKeys gives the keys among keys that are not deleted and lack a due entry one; listed
// says that their poller's entry lists them (found by their registry entries otherwise).
func (s *Store) repairKeys(ctx context.Context, keys []watukuytype.Key, listed bool) ([]watukuytype.Key, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	states := make([]*redis.SliceCmd, len(keys))
	scores := make([]*redis.FloatCmd, len(keys))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			states[i] = p.HMGet(ctx, s.k(k, "state"), statehash.Deleted, statehash.NextDue)
			scores[i] = p.ZScore(ctx, s.dueKey(k.Poller), k.String())
		}
		return nil
	})
	repair := repairDueArgs{Now: s.nowArg()}
	for i, k := range keys {
		if err := states[i].Err(); err != nil {
			return nil, fmt.Errorf("redisstore: read the state of %s: %w", k.Describe(), err)
		}
		switch err := scores[i].Err(); {
		case err == nil:
			continue // has a due entry
		case !errors.Is(err, redis.Nil):
			return nil, fmt.Errorf("redisstore: read the due entry of %s: %w", k.Describe(), err)
		}
		st := states[i].Val()
		if st[0] == "1" {
			continue // deleted: stays out of the due set
		}
		due := int64(0) // absent, or "0" (triggered): due now
		if v, ok := st[1].(string); ok {
			due, _ = strconv.ParseInt(v, 10, 64)
		}
		repair.Entries = append(repair.Entries, repairEntry{Key: k, Due: due, Listed: listed})
	}
	if len(repair.Entries) == 0 {
		return nil, nil
	}
	return run(ctx, s, nil, repair)
}

// registryBatch is how many registry entries one HSCAN step reads (COUNT) and one HDEL
// removes.
const registryBatch = 1000

// dropListedRegistryEntries removes the registry entries of keys their poller's entry lists
// (written by releases before listed keys went without one) and returns how many it removed;
// the migration to the layout without them runs it. It reads the pollers entries once, then
// scans the registry in batches, each removed by one HDEL (atomic). Running it again removes
// nothing. It runs while no process of this release registers (they refuse the older
// layout), so the listings cannot change under it.
func (s *Store) dropListedRegistryEntries(ctx context.Context) (int, error) {
	listed := map[string]map[string]bool{}
	if err := s.eachListing(ctx, func(poller string, parts []string) error {
		listed[poller] = setOf(parts)
		return nil
	}); err != nil {
		return 0, err
	}
	dropped := 0
	var cursor uint64
	for {
		kvs, next, err := s.rdb.HScan(ctx, s.registryKey(), cursor, "", registryBatch).Result()
		if err != nil {
			return dropped, fmt.Errorf("redisstore: scan %s: %w", s.registryKey(), err)
		}
		var drop []string
		for i := 0; i < len(kvs); i += 2 {
			if k, err := watukuytype.ParseKey(kvs[i]); err == nil && listed[k.Poller][k.Partition] {
				drop = append(drop, kvs[i])
			}
		}
		if len(drop) > 0 {
			n, err := s.rdb.HDel(ctx, s.registryKey(), drop...).Result()
			if err != nil {
				return dropped, fmt.Errorf("redisstore: remove %d listed keys' entries from %s: %w", len(drop), s.registryKey(), err)
			}
			dropped += int(n)
		}
		if cursor = next; cursor == 0 {
			return dropped, nil
		}
	}
}
