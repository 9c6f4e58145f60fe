package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/redisproc"
)

// Replicated is a private primary and replica pair whose replication link runs through a
// proxy, for failover tests: cut the link, write on the primary, kill it and promote the
// replica, as Sentinel would, to see which acknowledged writes survive.
type Replicated struct {
	// Primary is the master and Replica its replica; each is a redis-server on its own
	// loopback port with its own *redis.Client, and URL a redis:// URL of that server.
	Primary, Replica Backend
	// Link is the proxy the replica reaches the primary through (its replicaof address).
	Link *netproxy.Proxy

	primary, replica *redisproc.Server
}

// replSettleTimeout bounds the waits for the replica's state (synced, promoted).
const replSettleTimeout = 10 * time.Second

// Replicas starts a private primary and a replica of it, both with no persistence and
// noeviction on free loopback ports, the replica linked through a proxy; it returns once
// the first sync is done. Everything is stopped when the test ends. It skips or fails like
// Real when redis-server is missing.
func Replicas(tb testing.TB) *Replicated {
	tb.Helper()
	pPort := freePort(tb)
	ps := startServer(tb, tb.TempDir(), append([]string{"--port", strconv.Itoa(pPort)}, replArgs...))
	primary := tcpBackend(tb, "redis-primary", pPort, ps)
	r := &Replicated{Primary: primary, primary: ps}
	r.attachReplica(tb, pPort)
	return r
}

// replArgs start the sync as soon as a replica connects (diskless, no delay) and, pinging the
// replica every second with a short repl-timeout, let it notice a stalled (not only a closed)
// link within seconds instead of a minute.
var replArgs = []string{"--bind", "127.0.0.1", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
	"--repl-ping-replica-period", "1", "--repl-timeout", "5"}

// attachReplica starts a fresh replica of the server on primaryPort, linked through a new
// proxy, and waits until it is synced.
func (r *Replicated) attachReplica(tb testing.TB, primaryPort int) {
	tb.Helper()
	link, err := netproxy.New("127.0.0.1:" + strconv.Itoa(primaryPort))
	if err != nil {
		tb.Fatalf("replication link proxy: %v", err)
	}
	tb.Cleanup(func() { _ = link.Close() })
	rPort := freePort(tb)
	rs := startServer(tb, tb.TempDir(), append([]string{"--port", strconv.Itoa(rPort),
		"--replicaof", "127.0.0.1", strconv.Itoa(portOf(link.Addr()))}, replArgs...))
	r.Replica, r.Link, r.replica = tcpBackend(tb, "redis-replica", rPort, rs), link, rs
	r.WaitSynced(tb)
}

// Reattach, after Promote, makes the promoted replica the primary and gives it a fresh replica
// of its own (through a new Link), as an operator restores redundancy after a failover.
func (r *Replicated) Reattach(tb testing.TB) {
	tb.Helper()
	r.Primary, r.primary = r.Replica, r.replica
	r.Primary.Name = "redis-primary"
	r.attachReplica(tb, portOf(r.Primary.Client.(*redis.Client).Options().Addr))
}

// tcpBackend connects to the redis-server s on 127.0.0.1:port once it answers.
func tcpBackend(tb testing.TB, name string, port int, s *redisproc.Server) Backend {
	tb.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	waitReady(tb, s, func() error { return c.Ping(context.Background()).Err() })
	return Backend{Name: name, Client: c, URL: "redis://" + addr}
}

// WaitSynced waits until the replica has applied everything the primary had when called:
// its link is up and its replication offset reached the primary's master_repl_offset. It
// fails the test after 10 s.
func (r *Replicated) WaitSynced(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	p, err := replicationInfo(ctx, r.Primary.Client)
	if err != nil {
		tb.Fatalf("primary: %v", err)
	}
	want, err := strconv.ParseInt(p["master_repl_offset"], 10, 64)
	if err != nil {
		tb.Fatalf("primary master_repl_offset %q: %v", p["master_repl_offset"], err)
	}
	var last map[string]string
	r.await(tb, func() bool {
		last, err = replicationInfo(ctx, r.Replica.Client)
		if err != nil || last["master_link_status"] != "up" {
			return false
		}
		got, perr := strconv.ParseInt(last["slave_repl_offset"], 10, 64)
		return perr == nil && got >= want
	}, func() string {
		return fmt.Sprintf("the replica to reach offset %d (link %s, offset %s, err %v)",
			want, last["master_link_status"], last["slave_repl_offset"], err)
	})
}

// CutLink cuts the replication link (Link.Cut): the replica stops receiving writes, and
// its reconnections are refused until Link.Restore. The primary keeps accepting writes.
func (r *Replicated) CutLink() { r.Link.Cut() }

// KillPrimary SIGKILLs the primary and waits until it has exited.
func (r *Replicated) KillPrimary() { r.primary.Kill() }

// Promote turns the replica into a master with REPLICAOF NO ONE, as Sentinel would on a
// failover, and waits until it reports role:master. It fails the test on error or after
// 10 s.
func (r *Replicated) Promote(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	if err := r.Replica.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		tb.Fatalf("REPLICAOF NO ONE on the replica: %v", err)
	}
	var role string
	r.await(tb, func() bool {
		info, err := replicationInfo(ctx, r.Replica.Client)
		role = info["role"]
		return err == nil && role == "master"
	}, func() string { return "the replica to report role:master, role " + role })
}

// await polls cond until it holds (there is no event for a server's replication state),
// failing the test with what() after replSettleTimeout.
func (r *Replicated) await(tb testing.TB, cond func() bool, what func() string) {
	tb.Helper()
	deadline := time.Now().Add(replSettleTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", replSettleTimeout, what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replicationInfo is INFO replication as a map of its fields.
func replicationInfo(ctx context.Context, c redis.UniversalClient) (map[string]string, error) {
	s, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("info replication: %w", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}
