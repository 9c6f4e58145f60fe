package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/watukuytype"
)

// BaselineIdleKeyBytes is the idle-key figure the layout was designed against: Redis memory
// per idle key with 10,000 idle keys; the baseline of IdleKeyBytes.
const BaselineIdleKeyBytes = 1590

// IdleKeyGoal is the goal for the bytes per idle key.
const IdleKeyGoal = 400

// IdleKeyBytes measures Redis memory per idle key: one poller of n partitions on a fresh
// server, each key's first cycle run (an empty page: one tick each, 64 at a time). The keys
// come in two halves: the poller registered with the first half and their cycles run, then
// with all n and the second half's cycles run. Value is what the second half added to
// used_memory per key: the cost of one more idle key, its share of the poller's entry, the due
// set and Redis' key table included. A database also holds about half a megabyte that does
// not grow with its keys (not client buffers, scripts, the slowlog nor the key table; it stays
// when every key is deleted): at 10,000 keys it adds tens of bytes to the average, at a million
// nothing. Details give the average over all n against the empty database and that fixed
// part. They also break the keys down by kind of Redis key (MEMORY
// USAGE, all samples, per watukuy key).
func IdleKeyBytes(ctx context.Context, o Options, n int) (Result, error) {
	r, t0 := start(fmt.Sprintf("idle-bytes-%d", n))
	r.Unit, r.Baseline, r.BaselineOf = "B/key", BaselineIdleKeyBytes, "design baseline"
	r.Goal = fmt.Sprintf("<= %d", IdleKeyGoal)
	e, err := newEnv(ctx, o, "idle", false)
	if err != nil {
		return r, err
	}
	defer e.close()
	base, err := e.usedMemory(ctx)
	if err != nil {
		return r, err
	}
	half := n / 2
	var register, seed time.Duration
	var mid int64
	for i, size := range []int{half, n} {
		p := noopPoller(size, 0)
		eng, closeConns, err := e.engineOnItsOwn(ctx, fmt.Sprintf("bench%d", i), p)
		if err != nil {
			return r, err
		}
		defer closeConns()
		t := time.Now()
		if err := eng.Setup(ctx); err != nil {
			return r, fmt.Errorf("register %d keys: %w", size, err)
		}
		register += time.Since(t)
		keys := keysOf(p)
		if i == 1 {
			keys = keys[half:]
		}
		d, err := runFirstCycles(ctx, eng, keys, 64)
		if err != nil {
			return r, err
		}
		seed += d
		closeConns() // before the reading
		if i == 0 {
			if mid, err = e.usedMemory(ctx); err != nil {
				return r, err
			}
		}
	}
	used, err := e.usedMemory(ctx)
	if err != nil {
		return r, err
	}
	r.Value = float64(used-mid) / float64(n-half)
	r.meet(r.Value <= IdleKeyGoal)
	kinds, sampled, err := breakdown(ctx, e.rdb, e.prefix, n)
	if err != nil {
		return r, err
	}
	average := float64(used-base) / float64(n)
	r.Details = map[string]float64{"keys": float64(n), "registerSeconds": register.Seconds(), "firstCyclesSeconds": seed.Seconds(),
		"cyclesPerSecond": float64(n) / seed.Seconds(), "averageB/key": average, "fixedBytes": float64(used-base) - r.Value*float64(n)}
	for k, v := range kinds {
		r.Details["B/key:"+k] = v / float64(n)
	}
	r.Notes = fmt.Sprintf("INFO used_memory (less mem_clients_normal and used_memory_scripts) that the second %d of %d keys added, per key; "+
		"the average over all keys against the empty database is %.0f B/key (averageB/key: it holds the database's fixed part, fixedBytes); registered in %.1fs, first cycles (64 at a time, the engine's own scripts) in %.1fs; "+
		"breakdown per watukuy key by Redis key kind from MEMORY USAGE SAMPLES 0%s", n-half, n, average, register.Seconds(), seed.Seconds(), sampled)
	r.Duration = time.Since(t0)
	return r, nil
}

// usedMemory is usedMemory of the env's server, read with its slowlog emptied and no read
// of it running.
func (e *env) usedMemory(ctx context.Context) (int64, error) {
	var used int64
	err := e.quiet(ctx, func() (err error) {
		used, err = usedMemory(ctx, e.rdb)
		return err
	})
	return used, err
}

// usedMemory is INFO memory's used_memory less the clients' buffers and the Lua script
// cache: the bench's own 64 connections and the scripts it loaded are no cost of a key. The
// three come from one INFO reply, so they agree: a client's buffers can change between reads.
func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	var m [3]int64
	for i, f := range []string{"used_memory", "mem_clients_normal", "used_memory_scripts"} {
		v := fieldOf(info, f)
		if m[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return 0, fmt.Errorf("INFO memory %s %q: %w", f, v, err)
		}
	}
	return m[0] - m[1] - m[2], nil
}

// breakdown sums MEMORY USAGE of the prefix's keys by kind. Past 50,000 keys it measures
// every k-th key of each kind found and scales up (said in the returned note).
func breakdown(ctx context.Context, rdb redis.UniversalClient, prefix string, n int) (map[string]float64, string, error) {
	every := max(1, n/50_000)
	count := map[string]int{}
	var names []string
	it := rdb.Scan(ctx, 0, prefix+":*", 5000).Iterator()
	for it.Next(ctx) {
		k := it.Val()
		kind := kindOf(prefix, k)
		count[kind]++
		if count[kind]%every == 0 || every == 1 || kind == "registry" || kind == "registry-index" || kind == "pollers" || len(kind) > 3 && kind[:3] == "due" {
			names = append(names, k)
		}
	}
	if err := it.Err(); err != nil {
		return nil, "", fmt.Errorf("scan %s:*: %w", prefix, err)
	}
	sum := map[string]float64{}
	measured := map[string]int{}
	for i := 0; i < len(names); i += 1000 {
		batch := names[i:min(i+1000, len(names))]
		cmds := make([]*redis.IntCmd, len(batch))
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, k := range batch {
				cmds[j] = p.MemoryUsage(ctx, k, 0)
			}
			return nil
		}); err != nil {
			return nil, "", fmt.Errorf("memory usage: %w", err)
		}
		for j, c := range cmds {
			kind := kindOf(prefix, batch[j])
			sum[kind] += float64(c.Val())
			measured[kind]++
		}
	}
	for kind, s := range sum {
		sum[kind] = s * float64(count[kind]) / float64(measured[kind])
	}
	note := ""
	if every > 1 {
		note = fmt.Sprintf(" (every %dth key of each per-key kind measured, scaled up)", every)
	}
	return sum, note, nil
}

// ItemBytes measures Redis memory per tracked item: one key whose snapshot listing of n
// items (about 320-byte orders with 10-character identities, a one-character version) was
// committed by one cycle; used_memory against the idle key, divided by n, next to the
// items hash's own MEMORY USAGE per item.
func ItemBytes(ctx context.Context, o Options) (Result, error) {
	n := o.Items
	r, t0 := start("item-bytes")
	r.Unit, r.BaselineOf = "B/item", "MEMORY USAGE of the items hash / items, same run"
	items := make([]json.RawMessage, n)
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprintf(`{"status":"paid","id":"ord-%06d","currency":"EUR","total":%d.95,"customer":{"name":"Zoë Müller","email":"zoe%d@example.com"},"updated_at":"2026-11-29T10:%02d:00Z","version":1}`, i, i, i, i%60))
	}
	m, err := trackItems(ctx, o, "items", items, false)
	if err != nil {
		return r, err
	}
	r.Value = m.used
	r.Baseline = m.itemsHash
	r.Details = map[string]float64{"items": float64(n), "cycleSeconds": m.took.Seconds()}
	r.Notes = fmt.Sprintf("%d items committed by one cycle in %.1fs; value: used_memory delta (items hash, outbox events and their stream) / items; "+
		"baseline: the items hash alone (what BenchmarkBytesPerItem measures, goal <= 100 B there)", n, m.took.Seconds())
	r.Duration = time.Since(t0)
	return r, nil
}

// ItemBytesPayloads measures what Changes.Patch adds to Redis memory per tracked item: the
// same n orders of about 1 KB (nested objects, arrays) committed by one cycle of a key without
// it (the baseline) and of a key with it, each on a server of its own; used_memory against the
// idle key, divided by n. Details give each hash's MEMORY USAGE per item and the items' own
// JSON length: the payloads hash holds each item as last emitted.
func ItemBytesPayloads(ctx context.Context, o Options) (Result, error) {
	n := o.Items
	r, t0 := start("item-bytes-payloads")
	r.Unit, r.BaselineOf = "B/item", "the same items without Changes.Patch, same run"
	items := make([]json.RawMessage, n)
	jsonLen := 0
	for i := range items {
		items[i] = orderKB(i, 1)
		jsonLen += len(items[i])
	}
	plain, err := trackItems(ctx, o, "items-plain", items, false)
	if err != nil {
		return r, err
	}
	patch, err := trackItems(ctx, o, "items-patch", items, true)
	if err != nil {
		return r, err
	}
	r.Value, r.Baseline = patch.used, plain.used
	r.Details = map[string]float64{"items": float64(n), "itemJSONBytes": float64(jsonLen) / float64(n),
		"itemsHashB/item": patch.itemsHash, "payloadsHashB/item": patch.payloadsHash,
		"cycleSeconds": patch.took.Seconds(), "cycleSecondsPlain": plain.took.Seconds()}
	r.Notes = fmt.Sprintf("%d items of %.0f B JSON committed by one cycle, %.1fs with Changes.Patch, %.1fs without; value and baseline: used_memory delta / items; "+
		"the payloads hash %.0f B/item, the items hash %.0f B/item", n, float64(jsonLen)/float64(n), patch.took.Seconds(), plain.took.Seconds(), patch.payloadsHash, patch.itemsHash)
	r.Duration = time.Since(t0)
	return r, nil
}

// orderKB is an order of about 1 KB: a customer with an address, six order lines with their
// tax, shipping, tags. Each later gen (from 1) changes its status, one line's quantity, its
// version and a tag: what an update of an order changes.
func orderKB(i, gen int) json.RawMessage {
	var lines []byte
	for l := range 6 {
		if l > 0 {
			lines = append(lines, ',')
		}
		qty := 1 + l
		if l == gen%6 {
			qty += gen - 1
		}
		lines = fmt.Appendf(lines, `{"sku":"SKU-%04d","name":"Product %d, blue, size M","qty":%d,"price":%d.90,"tax":{"rate":19,"amount":%d.61}}`, l*97+i%50, l, qty, 10+l, 2+l)
	}
	status := [...]string{"paid", "packed", "shipped"}[(gen-1)%3]
	return json.RawMessage(fmt.Sprintf(`{"id":"ord-%06d","status":%q,"currency":"EUR","total":%d.95,`+
		`"customer":{"name":"Zoë Müller","email":"zoe%d@example.com","tier":"gold","address":{"street":"Hauptstraße 12","city":"Berlin","zip":"10115","country":"DE"}},`+
		`"lines":[%s],"shipping":{"method":"express","carrier":"DHL","tracking":"JD%012d","eta":"2026-12-01"},`+
		`"updated_at":"2026-11-29T10:%02d:00Z","version":%d,"tags":["b2c","eu","gen%d"]}`, i, status, 100+i%900, i, lines, i, i%60, gen, gen))
}

// itemMemory is what tracking items cost Redis: used_memory per item against the idle key,
// and MEMORY USAGE per item of the items and payloads hashes.
type itemMemory struct {
	used, itemsHash, payloadsHash float64
	took                          time.Duration
}

// trackItems runs one key whose snapshot listing is items on a server of its own (with
// Changes.Patch when patch): a first cycle over an empty listing, then one that commits
// every item.
func trackItems(ctx context.Context, o Options, name string, items []json.RawMessage, patch bool) (itemMemory, error) {
	var m itemMemory
	n := len(items)
	e, st, err := openStore(ctx, o, name)
	if err != nil {
		return m, err
	}
	defer e.close()
	empty := true
	p := watukuytype.Poller{Name: pollerName, Strategy: watukuytype.SnapshotDiff, Version: watukuytype.Field("version"), MaxPagesPerCycle: n/1000 + 2,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			if empty {
				return watukuytype.Page{}, nil
			}
			off, _ := strconv.Atoi(req.Cursor)
			end := min(off+1000, n)
			return watukuytype.Page{Items: items[off:end], Next: strconv.Itoa(end), HasMore: end < n}, nil
		},
		Handler: func(context.Context, watukuytype.Event) error { return nil },
		Changes: watukuytype.Changes{Patch: patch}}
	key := watukuytype.Key{Poller: pollerName}
	// Each cycle on connections of its own, closed before the reading after it.
	cycle := func(trigger bool) (time.Duration, error) {
		eng, closeConns, err := e.engineOnItsOwn(ctx, "bench", p)
		if err != nil {
			return 0, err
		}
		defer closeConns()
		if trigger {
			if err := eng.Trigger(ctx, key); err != nil {
				return 0, fmt.Errorf("trigger %s: %w", key.Describe(), err)
			}
		}
		return runFirstCycles(ctx, eng, []watukuytype.Key{key}, 1)
	}
	if _, err := cycle(false); err != nil {
		return m, err
	}
	base, err := e.usedMemory(ctx)
	if err != nil {
		return m, err
	}
	empty = false
	if m.took, err = cycle(true); err != nil {
		return m, err
	}
	used, err := e.usedMemory(ctx)
	if err != nil {
		return m, err
	}
	m.used = float64(used-base) / float64(n)
	payloads := 0 // without Changes.Patch nothing is kept
	if patch {
		payloads = n
	}
	for _, h := range []struct {
		kind string
		want int
		into *float64
	}{{"items", n, &m.itemsHash}, {"payloads", payloads, &m.payloadsHash}} {
		k := st.Key(key, h.kind)
		hl, err := e.rdb.HLen(ctx, k).Result()
		if err != nil || hl != int64(h.want) {
			return m, fmt.Errorf("%s holds %d of %d items: %v", k, hl, h.want, err)
		}
		if h.want == 0 {
			continue
		}
		mu, err := e.rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return m, fmt.Errorf("memory usage %s: %w", k, err)
		}
		*h.into = float64(mu) / float64(n)
	}
	return m, nil
}
