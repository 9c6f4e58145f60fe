package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// idleKeyBudget is the most Redis memory (used_memory delta less client buffers and scripts,
// bytes) one idle key may cost, averaged over 10,000 keys with the database's fixed part: what
// the layout achieves (about 407) with a margin, so that a change that makes idle keys heavier
// fails here. internal/bench's idle-bytes measures the cost of one more key, without the fixed
// part (goal 400).
const idleKeyBudget = 430

// idleFootprint is what idleKeys measured.
type idleFootprint struct {
	keys    int
	perKey  float64          // used_memory delta / keys, less the clients' buffers and the scripts
	clients float64          // of which: used_memory_clients delta / keys
	parts   map[string]int64 // MEMORY USAGE of one key's structures (0: absent)
	shared  map[string]int64 // MEMORY USAGE of the registry and due set, whole
	all     float64          // MEMORY USAGE summed over every key / keys
	dbKeys  int64            // keys in the database
	fields  map[string]string
}

func (f idleFootprint) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d idle keys: %.0f B/key used_memory delta without the client buffers (%.0f B/key) and scripts; MEMORY USAGE of all %d Redis keys %.0f B/key\n",
		f.keys, f.perKey, f.clients, f.dbKeys, f.all)
	for _, p := range []string{"state", "outbox"} {
		fmt.Fprintf(&b, "  %-8s %5d B per key (MEMORY USAGE)\n", p, f.parts[p])
	}
	for _, p := range []string{"registry", "due"} {
		fmt.Fprintf(&b, "  %-8s %5.0f B per key (MEMORY USAGE of the whole / keys)\n", p, float64(f.shared[p])/float64(f.keys))
	}
	n := 0
	for k, v := range f.fields {
		n += len(k) + len(v)
	}
	fmt.Fprintf(&b, "  state fields: %d, %d bytes of names and values", len(f.fields), n)
	return b.String()
}

// usedMemory reads used_memory from INFO memory, and of it the clients' buffers
// (mem_clients_normal) and the Lua scripts (used_memory_scripts), which are no key's.
func usedMemory(ctx context.Context, c redis.UniversalClient) (used, clients int64, err error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO memory: %w", err)
	}
	var scripts int64
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "mem_clients_normal:"); ok {
			clients, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "used_memory_scripts:"); ok {
			scripts, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 {
		return 0, 0, fmt.Errorf("INFO memory has no used_memory")
	}
	return used - scripts, clients, nil
}

// idleKeys registers one poller with n partitions on b, runs every key's first cycle (one
// empty page, no event) through the engine, and measures the memory they cost.
func idleKeys(tb testing.TB, b redistest.Backend, n int) idleFootprint {
	tb.Helper()
	ctx := context.Background()
	s, err := New(b.Client, Options{}) // the default prefix, as deployed
	if err != nil {
		tb.Fatal(err)
	}
	eng, err := core.NewEngine(core.Options{Store: s, InstanceID: "idle-worker", TickConcurrency: 8})
	if err != nil {
		tb.Fatal(err)
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("t%07d", i)
	}
	if err := eng.Register(watukuytype.Poller{Name: "idle", Partitions: parts,
		Fetch: func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Next: req.Cursor}, nil
		},
		Handler: func(context.Context, watukuytype.Event) error { return nil }}); err != nil {
		tb.Fatal(err)
	}
	// The base is taken with the pool's connections open, so that the delta is the keys'.
	if err := b.Client.Ping(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	base, baseClients, err := usedMemory(ctx, b.Client)
	if err != nil {
		tb.Fatal(err)
	}
	for ran := 0; ran < n; {
		rep, err := eng.Tick(ctx, time.Minute)
		if err != nil {
			tb.Fatal(err)
		}
		if len(rep.Errors) > 0 {
			tb.Fatalf("tick errors: %v", rep.Errors)
		}
		if rep.Ran == 0 {
			tb.Fatalf("a tick ran nothing after %d of %d keys", ran, n)
		}
		ran += rep.Ran
	}
	used, clients, err := usedMemory(ctx, b.Client)
	if err != nil {
		tb.Fatal(err)
	}
	f := idleFootprint{keys: n, perKey: float64((used-clients)-(base-baseClients)) / float64(n), clients: float64(clients-baseClients) / float64(n),
		parts: map[string]int64{}, shared: map[string]int64{}}
	key := watukuytype.Key{Poller: "idle", Partition: parts[n/2]}
	for _, p := range []string{"state", "outbox"} {
		m, err := b.Client.MemoryUsage(ctx, s.Key(key, p), 0).Result()
		if err != nil && err != redis.Nil {
			tb.Fatalf("MEMORY USAGE %s: %v", s.Key(key, p), err)
		}
		f.parts[p] = m
	}
	registry := []string{s.keysKey("idle")}
	for _, lb := range b.Client.ZRange(ctx, s.keysKey("idle"), 0, -1).Val() {
		registry = append(registry, s.keysKey("idle")+"|"+lb)
	}
	for p, ks := range map[string][]string{"registry": registry, "due": {s.dueKey("idle")}} {
		for _, k := range ks {
			m, err := b.Client.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				tb.Fatalf("MEMORY USAGE %s: %v", k, err)
			}
			f.shared[p] += m
		}
	}
	var total int64
	for it := b.Client.Scan(ctx, 0, "*", 1000).Iterator(); it.Next(ctx); {
		m, err := b.Client.MemoryUsage(ctx, it.Val(), 0).Result()
		if err != nil {
			tb.Fatalf("MEMORY USAGE %s: %v", it.Val(), err)
		}
		total += m
		f.dbKeys++
	}
	f.all = float64(total) / float64(n)
	if f.fields, err = b.Client.HGetAll(ctx, s.Key(key, "state")).Result(); err != nil {
		tb.Fatal(err)
	}
	return f
}

// idleKeyCount is 10,000 unless WATUKUY_IDLE_KEYS says otherwise.
func idleKeyCount() int {
	if v, err := strconv.Atoi(os.Getenv("WATUKUY_IDLE_KEYS")); err == nil && v > 0 {
		return v
	}
	return 10_000
}

// An idle key (one poller, one cycle, empty pages) costs at most idleKeyBudget bytes
// of Redis memory, measured on a real redis-server over 10,000 keys.
func TestIdleKeyMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 cycles on a real redis-server")
	}
	f := idleKeys(t, redistest.Real(t), idleKeyCount())
	t.Logf("%v\n  state: %q", f, f.fields)
	if f.perKey > idleKeyBudget {
		t.Errorf("an idle key costs %.0f B of Redis memory, over the budget of %d B:\n%v", f.perKey, idleKeyBudget, f)
	}
}

// BenchmarkIdleKeyMemory reports the Redis bytes per idle key (used_memory delta over
// WATUKUY_IDLE_KEYS keys, default 10,000, on a real redis-server) and the MEMORY USAGE of
// one key's structures.
func BenchmarkIdleKeyMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		f := idleKeys(b, redistest.Real(b), idleKeyCount())
		b.ReportMetric(f.perKey, "bytes/idle-key")
		b.ReportMetric(f.clients, "client-bytes/idle-key")
		for p, m := range f.parts {
			b.ReportMetric(float64(m), p+"-bytes")
		}
		for p, m := range f.shared {
			b.ReportMetric(float64(m)/float64(f.keys), p+"-bytes/key")
		}
	}
}
