// Package redistest gives tests a Redis of their own: an embedded miniredis, or a real
// redis-server started on a unix socket in the test's temporary directory. Nothing ever
// connects to a shared instance. Replicas starts a primary and replica pair (on loopback
// ports, the replication link through a netproxy.Proxy) for failover tests.
//
// Set WATUKUY_REQUIRE_REAL_REDIS=1 (CI does) to turn "redis-server not installed" from a
// skip into a failure, so a green run always includes the real-Redis proof.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redisproc"
)

// RequireEnv is the environment variable that makes a missing redis-server a failure.
const RequireEnv = "WATUKUY_REQUIRE_REAL_REDIS"

// Backend is one Redis a test runs against.
type Backend struct {
	// Name is "miniredis" or "redis-server"; used as the subtest name.
	Name string
	// Client talks to this backend only (a *redis.ClusterClient for the cluster).
	Client redis.UniversalClient
	// Mini is the embedded server, nil for a real redis-server.
	Mini *miniredis.Miniredis
	// URL reaches the backend from another process (redis://, unix://, redis+cluster://).
	URL string
}

// Miniredis starts an embedded miniredis that lives until the test ends.
func Miniredis(tb testing.TB) Backend {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return Backend{Name: "miniredis", Client: c, Mini: m, URL: "redis://" + m.Addr()}
}

// Real starts a private redis-server on a unix socket under tb.TempDir() with no
// persistence and noeviction, and stops it when the test ends. It skips (or fails, with
// WATUKUY_REQUIRE_REAL_REDIS=1) when redis-server is not installed.
func Real(tb testing.TB, extraArgs ...string) Backend {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), "redis.sock")
	s := startServer(tb, filepath.Dir(sock), append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700"}, extraArgs...))
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	tb.Cleanup(func() { _ = c.Close() })
	waitReady(tb, s, func() error { return c.Ping(context.Background()).Err() })
	return Backend{Name: "redis-server", Client: c, URL: "unix://" + sock}
}

// RealTCP is Real on a free loopback TCP port instead of a unix socket, for tests that put
// a proxy between the client and the server.
func RealTCP(tb testing.TB, extraArgs ...string) Backend {
	tb.Helper()
	port := freePort(tb)
	s := startServer(tb, tb.TempDir(), append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1"}, extraArgs...))
	return tcpBackend(tb, "redis-server", port, s)
}

// Cluster starts a private three-master Redis Cluster on loopback ports (the cluster bus
// needs TCP), assigns the slots itself and returns a cluster client. It skips or fails like
// Real when redis-server is missing.
func Cluster(tb testing.TB) Backend {
	tb.Helper()
	skipWithoutServer(tb)
	cl, err := redisproc.StartCluster(context.Background(), tb.TempDir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Stop)
	return Backend{Name: "redis-cluster", Client: cl.Client, URL: cl.URL()}
}

func portOf(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// freePort finds a loopback port whose cluster bus port (+10000) is free too.
func freePort(tb testing.TB) int {
	tb.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// skipWithoutServer skips the test when redis-server is not installed, or fails it when
// WATUKUY_REQUIRE_REAL_REDIS is set.
func skipWithoutServer(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("redis-server not found and %s is set: %v", RequireEnv, err)
		}
		tb.Skipf("redis-server not installed: %v", err)
	}
}

// startServer runs redis-server with its data in dir, no persistence and noeviction; it is
// killed when the test ends.
func startServer(tb testing.TB, dir string, args []string) *redisproc.Server {
	tb.Helper()
	skipWithoutServer(tb)
	s, err := redisproc.Start(dir, args)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// waitReady polls ping until the server answers (bounded), failing early if it exits.
func waitReady(tb testing.TB, s *redisproc.Server, ping func() error) {
	tb.Helper()
	if err := s.WaitReady(10*time.Second, ping); err != nil {
		tb.Fatal(err)
	}
}

// Each runs fn as subtests on miniredis, on a private redis-server and on a private
// three-node Redis Cluster.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { fn(t, Miniredis(t)) })
	t.Run("redis-server", func(t *testing.T) { fn(t, Real(t)) })
	t.Run("redis-cluster", func(t *testing.T) { fn(t, Cluster(t)) })
}

// Counter is a go-redis hook that counts round trips: one per command sent alone and one
// per pipeline, whatever its length.
type Counter struct{ n atomic.Int64 }

// Attach installs the counter on c.
func (k *Counter) Attach(c redis.UniversalClient) { c.AddHook(k) }

// Count returns the round trips seen so far.
func (k *Counter) Count() int64 { return k.n.Load() }

// Reset sets the count back to zero.
func (k *Counter) Reset() { k.n.Store(0) }

// DialHook implements redis.Hook.
func (k *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (k *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (k *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		k.n.Add(1)
		return next(ctx, cmds)
	}
}

// Dump is Dump on this backend; it fails the test on error.
func (b Backend) Dump(tb testing.TB) map[string]string {
	tb.Helper()
	d, err := Dump(context.Background(), b.Client)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// Dump renders every key and its whole value (hashes, streams with their consumer groups and
// pending entries, sorted sets, strings), for "no trace" assertions.
func Dump(ctx context.Context, c redis.UniversalClient) (map[string]string, error) {
	var keys []string
	var mu sync.Mutex
	collect := func(ctx context.Context, n *redis.Client) error {
		ks, err := n.Keys(ctx, "*").Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, collect)
	} else {
		err = collect(ctx, c.(*redis.Client))
	}
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		var v any
		switch typ {
		case "hash":
			v = c.HGetAll(ctx, k).Val()
		case "stream":
			groups := c.XInfoGroups(ctx, k).Val()
			pending := map[string]any{}
			for _, g := range groups {
				if p := c.XPending(ctx, k, g.Name).Val(); p != nil {
					pending[g.Name] = *p
				}
			}
			v = fmt.Sprint(c.XRange(ctx, k, "-", "+").Val(), groups, pending)
		case "zset":
			v = c.ZRangeWithScores(ctx, k, 0, -1).Val()
		default:
			v = c.Get(ctx, k).Val()
		}
		out[k] = fmt.Sprintf("%s %v", typ, v)
	}
	return out, nil
}

// CPU is the CPU time a real redis-server has used so far (used_cpu_user + used_cpu_sys of
// INFO cpu), in microseconds: the cost of what a benchmark sent it, by the server's count.
func (b Backend) CPU(tb testing.TB) float64 {
	tb.Helper()
	info, err := b.Client.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	var sum float64
	for _, l := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(l, ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s: %v", l, err)
			}
			sum += f
		}
	}
	return sum * 1e6
}
