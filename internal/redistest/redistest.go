// Package redistest gives tests a Redis of their own: an embedded miniredis, or a real
// redis-server started on a unix socket in the test's temporary directory. Nothing ever
// connects to a shared instance.
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
	"strings"
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
	// Client talks to this backend only.
	Client *redis.Client
	// Mini is the embedded server, nil for a real redis-server.
	Mini *miniredis.Miniredis
}

// Miniredis starts an embedded miniredis that lives until the test ends.
func Miniredis(tb testing.TB) Backend {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return Backend{Name: "miniredis", Client: c, Mini: m}
}

// Real starts a private redis-server on a unix socket under tb.TempDir() with no
// persistence and noeviction, and stops it when the test ends. It skips (or fails, with
// WATUKUY_REQUIRE_REAL_REDIS=1) when redis-server is not installed.
func Real(tb testing.TB, extraArgs ...string) Backend {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("redis-server not found and %s is set: %v", RequireEnv, err)
		}
		tb.Skipf("redis-server not installed: %v", err)
	}
	dir := tb.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	args := append([]string{
		"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "noeviction", "--loglevel", "warning",
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	tb.Cleanup(func() { _ = c.Close() })
	// Wait for the socket to answer: poll, bounded, no fixed sleep.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(context.Background()).Err(); err == nil {
			break
		} else if time.Now().After(deadline) {
			tb.Fatalf("redis-server did not answer on %s: %v\n%s", sock, err, out.String())
		}
		select {
		case <-exited:
			tb.Fatalf("redis-server exited early:\n%s", out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return Backend{Name: "redis-server", Client: c}
}

// Each runs fn as two subtests, one on miniredis and one on a private redis-server.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { fn(t, Miniredis(t)) })
	t.Run("redis-server", func(t *testing.T) { fn(t, Real(t)) })
}

// Counter is a go-redis hook that counts round trips: one per command sent alone and one
// per pipeline, whatever its length.
type Counter struct{ n atomic.Int64 }

// Attach installs the counter on c.
func (k *Counter) Attach(c *redis.Client) { c.AddHook(k) }

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
func Dump(ctx context.Context, c *redis.Client) (map[string]string, error) {
	keys, err := c.Keys(ctx, "*").Result()
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
