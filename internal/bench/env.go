package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisproc"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/watukuytype"
)

// pollerName is the benchmarks' poller; its partitions are "p0000000", "p0000001", ...
const pollerName = "bench"

// env is the Redis one measurement runs on: a redis-server (or cluster) of its own, or the
// server of Options.RedisURL under a prefix and asynq queue of its own.
type env struct {
	rdb    redis.UniversalClient
	url    string
	prefix string
	queue  string
	pids   []int // the redis-server processes (none for --redis)
	stop   func()
	// slow gets the longest script of the env's own servers (Options.slow); logMu is held
	// while their slowlogs are read, and while a measurement needs the server to itself;
	// stopLog ends the reads (nil on a shared server, whose slowlog is not watched).
	slow    *slowest
	logMu   sync.Mutex
	stopLog func()
}

// newEnv starts a redis-server (or a three-master cluster) for one measurement, or connects
// to o.RedisURL.
func newEnv(ctx context.Context, o Options, name string, cluster bool) (*env, error) {
	// On a server of its own a measurement uses the deployed default prefix, so the memory
	// figures count the key names an installation has; on a shared one (--redis) a prefix of
	// its own keeps it apart from anything else there.
	e := &env{prefix: "wk", queue: "wkb-" + name, slow: o.slow}
	if e.slow == nil {
		e.slow = &slowest{}
	}
	if o.RedisURL != "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		e.prefix = "wkb" + hex.EncodeToString(b[:])
	}
	dir, err := os.MkdirTemp(o.Dir, name+"-")
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", name, err)
	}
	switch {
	case cluster:
		n := 0
		cl, err := redisproc.StartCluster(ctx, func() string {
			n++
			d := filepath.Join(dir, fmt.Sprint(n))
			_ = os.MkdirAll(d, 0o700)
			return d
		}, slowlogArgs()...)
		if err != nil {
			return nil, fmt.Errorf("bench %s: %w", name, err)
		}
		_ = cl.Client.Close()
		for _, s := range cl.Servers {
			e.pids = append(e.pids, s.Pid())
		}
		cl.Client = nil
		e.url = cl.URL()
		e.stop = cl.Stop
	case o.RedisURL != "":
		e.url = o.RedisURL
		e.stop = func() {}
	default:
		s, c, err := redisproc.Unix(dir, slowlogArgs()...)
		if err != nil {
			return nil, fmt.Errorf("bench %s: %w", name, err)
		}
		_ = c.Close()
		e.pids = []int{s.Pid()}
		e.url = redisproc.SocketURL(s)
		e.stop = s.Kill
	}
	if e.rdb, err = connect(ctx, e.url); err != nil {
		e.stop()
		return nil, fmt.Errorf("bench %s: %w", name, err)
	}
	if err := e.loadScripts(ctx); err != nil {
		_ = e.rdb.Close()
		e.stop()
		return nil, fmt.Errorf("bench %s: %w", name, err)
	}
	if len(e.pids) > 0 {
		e.watchSlowlog()
	}
	return e, nil
}

// close removes what the measurement wrote on a shared server and stops its own servers.
func (e *env) close() {
	if e.stopLog != nil {
		e.stopLog()
	}
	if len(e.pids) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, pat := range []string{e.prefix + ":*", "asynq:{" + e.queue + "*"} {
			it := e.rdb.Scan(ctx, 0, pat, 1000).Iterator()
			for it.Next(ctx) {
				e.rdb.Unlink(ctx, it.Val())
			}
		}
		e.rdb.SRem(ctx, "asynq:queues", e.queue, e.queue+"-raw") // asynq's list of queues
	}
	_ = e.rdb.Close()
	e.stop()
}

// store is the watukuy store under the measurement's prefix.
func (e *env) store() (*redisstore.Store, error) { return e.storeOn(e.rdb) }

// storeOn is the watukuy store under the measurement's prefix on rdb.
func (e *env) storeOn(rdb redis.UniversalClient) (*redisstore.Store, error) {
	st, err := redisstore.New(rdb, redisstore.Options{Prefix: e.prefix})
	if err != nil {
		return nil, fmt.Errorf("bench: store: %w", err)
	}
	return st, nil
}

// openStore is newEnv (a single server) and the store on it; the caller closes the env.
func openStore(ctx context.Context, o Options, name string) (*env, *redisstore.Store, error) {
	e, err := newEnv(ctx, o, name, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := e.store()
	if err != nil {
		e.close()
		return nil, nil, err
	}
	return e, st, nil
}

// partitions names n partitions.
func partitions(n int) []string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("p%07d", i)
	}
	return parts
}

// noopPoller is a poller of n partitions whose fetch returns an empty page, due every
// interval without jitter (0: the default schedule).
func noopPoller(n int, interval time.Duration) watukuytype.Poller {
	p := watukuytype.Poller{Name: pollerName, Partitions: partitions(n),
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Next: req.Cursor}, nil
		},
		Handler: func(context.Context, watukuytype.Event) error { return nil }}
	if interval > 0 {
		p.Schedule = watukuytype.Schedule{Min: interval, Max: interval, Fixed: true, NoJitter: true}
	}
	return p
}

// newEngine is an engine over st with poller p registered (not yet written to Redis).
func newEngine(st *redisstore.Store, id string, p watukuytype.Poller, hooks watukuytype.Hooks) (*core.Engine, error) {
	eng, err := core.NewEngine(core.Options{Store: st, InstanceID: id, Hooks: hooks, TickConcurrency: 64})
	if err != nil {
		return nil, fmt.Errorf("bench: engine: %w", err)
	}
	if err := eng.Register(p); err != nil {
		return nil, fmt.Errorf("bench: register %s: %w", p.Name, err)
	}
	return eng, nil
}

// engineOnItsOwn is newEngine over connections of the engine's own, and what closes them: a
// memory reading comes after that closing, since busy connections' buffers (a commit's query
// buffer, 64 connections' worth) are what INFO's mem_clients_normal reports late, so that a
// reading could subtract them or not.
func (e *env) engineOnItsOwn(ctx context.Context, id string, p watukuytype.Poller) (*core.Engine, func(), error) {
	rdb, err := connect(ctx, e.url)
	if err != nil {
		return nil, nil, err
	}
	closeConns := func() { _ = rdb.Close() }
	st, err := e.storeOn(rdb)
	if err != nil {
		closeConns()
		return nil, nil, err
	}
	eng, err := newEngine(st, id, p, watukuytype.Hooks{})
	if err != nil {
		closeConns()
		return nil, nil, err
	}
	return eng, closeConns, nil
}

// runFirstCycles runs every key's cycle once, conc at a time, and returns how long it took:
// the keys' state (the lease in it) and outbox are those of an idle key after one tick.
func runFirstCycles(ctx context.Context, eng *core.Engine, keys []watukuytype.Key, conc int) (time.Duration, error) {
	t0 := time.Now()
	err := eachConcurrently(ctx, keys, conc, func(k watukuytype.Key) error {
		if rep := eng.RunCycle(ctx, k); rep.Outcome != watukuytype.Ran || rep.Err != nil {
			return fmt.Errorf("first cycle of %s: outcome %v: %w", k.Describe(), rep.Outcome, rep.Err)
		}
		return nil
	})
	return time.Since(t0), err
}

// eachConcurrently calls fn with every item, conc at a time, and returns the first error.
func eachConcurrently[T any](ctx context.Context, items []T, conc int, fn func(T) error) error {
	next := make(chan T)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				if err := fn(it); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, it := range items {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		next <- it
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// keysOf are the keys of poller p.
func keysOf(p watukuytype.Poller) []watukuytype.Key {
	keys := make([]watukuytype.Key, len(p.Partitions))
	for i, part := range p.Partitions {
		keys[i] = watukuytype.Key{Poller: p.Name, Partition: part}
	}
	return keys
}

// kindOf is the kind of a watukuy key for the memory breakdown: the part after the key's
// hash tag ("state", "outbox", "due:bench", ...); a poller's registry is "registry" (its
// leaves, {global}:keys:<poller>|<lower bound>) and "registry-index" (the sorted set of
// their bounds, {global}:keys:<poller>).
func kindOf(prefix, key string) string {
	rest := strings.TrimPrefix(key, prefix+":")
	if i := strings.Index(rest, "}:"); i >= 0 {
		rest = rest[i+2:]
	}
	if poller, ok := strings.CutPrefix(rest, "keys:"); ok && strings.HasPrefix(key, prefix+":{global}:") {
		if strings.Contains(poller, "|") { // no poller name holds '|'
			return "registry"
		}
		return "registry-index"
	}
	if i := strings.Index(rest, ":"); i >= 0 && !strings.HasPrefix(rest, "due") {
		rest = rest[:i]
	}
	return rest
}
