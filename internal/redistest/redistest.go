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
	"net"
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
	dir := tb.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	s := startServer(tb, dir, append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700"}, extraArgs...))
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	tb.Cleanup(func() { _ = c.Close() })
	waitReady(tb, func() error { return c.Ping(context.Background()).Err() }, s.exited, s.out)
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
	ctx := context.Background()
	const nodes = 3
	var addrs []string
	for i := 0; i < nodes; i++ {
		dir := tb.TempDir()
		port := freePort(tb)
		s := startServer(tb, dir, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000"})
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr})
		waitReady(tb, func() error { return c.Ping(ctx).Err() }, s.exited, s.out)
		lo, hi := i*16384/nodes, (i+1)*16384/nodes-1
		if err := c.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			tb.Fatalf("cluster addslots on %s: %v", addr, err)
		}
		if i > 0 {
			if err := c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(portOf(addrs[0]))).Err(); err != nil {
				tb.Fatalf("cluster meet from %s: %v", addr, err)
			}
		}
		_ = c.Close()
		addrs = append(addrs, addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	tb.Cleanup(func() { _ = cc.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			cc.ReloadState(ctx)
			if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis cluster on %v did not come up", addrs)
		}
		time.Sleep(20 * time.Millisecond) // gossip has no event to wait on
	}
	return Backend{Name: "redis-cluster", Client: cc, URL: "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]}
}

func portOf(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// freePort finds a loopback port whose cluster bus port (+10000) is free too.
func freePort(tb testing.TB) int {
	tb.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port > 55000 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	tb.Fatal("no free port pair for a cluster node")
	return 0
}

// server is a redis-server process started by startServer.
type server struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	out    *strings.Builder
}

// kill SIGKILLs the process and waits until it has exited.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// startServer runs redis-server with its data in dir, no persistence and noeviction; it is
// killed when the test ends.
func startServer(tb testing.TB, dir string, args []string) *server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("redis-server not found and %s is set: %v", RequireEnv, err)
		}
		tb.Skipf("redis-server not installed: %v", err)
	}
	args = append([]string{"--dir", dir, "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "noeviction", "--loglevel", "warning"}, args...)
	s := &server{cmd: exec.Command(bin, args...), exited: make(chan struct{}), out: &strings.Builder{}}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	tb.Cleanup(s.kill)
	return s
}

// waitReady polls ping until the server answers (bounded), failing early if it exits.
func waitReady(tb testing.TB, ping func() error, exited chan struct{}, out *strings.Builder) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server did not answer: %v\n%s", err, out.String())
		}
		select {
		case <-exited:
			tb.Fatalf("redis-server exited early:\n%s", out.String())
		case <-time.After(5 * time.Millisecond):
		}
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
