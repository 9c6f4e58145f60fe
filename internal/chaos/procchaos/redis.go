//go:build unix

package procchaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseToken reads the key's lease token on the primary direct dials ("" when it cannot).
func (r *processRun) leaseToken(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return r.db.direct.HGet(ctx, processPrefix+":{"+processKey.String()+"}:state", "token").Val()
}

// leaseEpoch reads the key's lease epoch on the primary direct dials (-1 when it cannot).
func (r *processRun) leaseEpoch(ctx context.Context) int64 {
	for range 2 { // the first try may take a pooled connection to a killed server
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		snap, err := r.db.store.Inspect(ictx, processKey)
		cancel()
		if err == nil {
			return snap.LeaseEpoch
		}
	}
	return -1
}

// waitSynced waits until the replica has applied everything the primary had when called (its
// link up, its offset at the primary's master_repl_offset) and has its AOF written (no
// rewrite in progress or scheduled: after a full sync a replica rewrites its AOF, and a kill
// before that would lose the synced data on restart). It returns the offset reached.
func (r *processRun) waitSynced(ctx context.Context) (int64, error) {
	p, err := infoFields(ctx, r.db.primary.c, "replication")
	if err != nil {
		return 0, fmt.Errorf("chaos: %s: %w", r.db.primary.name, err)
	}
	want := atoi64(p["master_repl_offset"])
	deadline := time.Now().Add(replSyncTimeout)
	var last string
	for {
		repl, err := infoFields(ctx, r.db.replica.c, "replication")
		var pers map[string]string
		if err == nil {
			pers, err = infoFields(ctx, r.db.replica.c, "persistence")
		}
		if err == nil {
			got := atoi64(repl["master_repl_offset"])
			if repl["master_link_status"] == "up" && got >= want && pers["loading"] == "0" &&
				pers["aof_enabled"] == "1" && pers["aof_rewrite_in_progress"] == "0" && pers["aof_rewrite_scheduled"] == "0" {
				return got, nil
			}
			last = fmt.Sprintf("link %s, offset %d of %d, loading %s, AOF rewrite in progress %s, scheduled %s",
				repl["master_link_status"], got, want, pers["loading"], pers["aof_rewrite_in_progress"], pers["aof_rewrite_scheduled"])
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("chaos: replica %s not synced with %s after %s: %s (see logs/%s.log)",
				r.db.replica.name, r.db.primary.name, replSyncTimeout, last, r.db.replica.name)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond): // a server's replication state has no signal to wait on
		}
	}
}

// dialPrimary is the harness client's dialer: it connects to the current primary.
func (r *processRun) dialPrimary(ctx context.Context, network, _ string) (net.Conn, error) {
	d := net.Dialer{Timeout: time.Second}
	return d.DialContext(ctx, network, r.db.primaryAddr.Load().(string))
}

// newServer makes (not starts) a redis-server with its own port, data dir and log, a replica
// of replicaOf ("host:port") unless that is "".
func (r *processRun) newServer(replicaOf string) (*redisServer, error) {
	s, err := newRedisServer(r.db.bin, r.files.dir, fmt.Sprintf("redis-%d", len(r.db.servers)+1), replicaOf)
	if err != nil {
		return nil, err
	}
	r.db.servers = append(r.db.servers, s)
	return s, nil
}

// newRedisServer makes (not starts) the redis-server bin named name, on a free loopback port,
// with its data in dir/redis/<name> and its log in dir/logs/<name>.log (dir/logs must exist),
// a replica of replicaOf unless that is "". Every start of it replays its AOF.
func newRedisServer(bin, dir, name, replicaOf string) (*redisServer, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "redis", name)
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	s := &redisServer{name: name, bin: bin, dir: data, port: port, replicaOf: replicaOf,
		log: filepath.Join(dir, "logs", name+".log")}
	s.c = redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 2})
	return s, nil
}

// clientReadTimeout is the read timeout of a go-redis client made from url with the defaults,
// as the processes make theirs.
func clientReadTimeout(url string) time.Duration {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return 5 * time.Second
	}
	c := redis.NewClient(opt)
	defer c.Close()
	return c.Options().ReadTimeout
}

// infoFields is one INFO section as a map of its fields.
func infoFields(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("info %s: %w", section, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// redisServer is a redis-server the run kills and restarts with the same arguments, so the
// AOF in dir replays.
type redisServer struct {
	name, bin, dir, log string
	port                int
	// replicaOf is the "host:port" it replicates from (the link proxy), "" once it is a
	// primary: a promoted replica restarts as a primary.
	replicaOf string
	proc      *osProc
	c         *redis.Client // the harness's direct connection: pings, INFO, REPLICAOF
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start(ctx context.Context) error {
	// Every server has the persistence the run uses (AOF, fsync on every write). The
	// replication settings (as in redistest.Replicas): a diskless full sync that starts as
	// soon as a replica connects, and a replica that notices a stalled link within seconds.
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
		"--repl-timeout", "5", "--loglevel", "notice"}
	if s.replicaOf != "" {
		host, port, err := net.SplitHostPort(s.replicaOf)
		if err != nil {
			return err
		}
		args = append(args, "--replicaof", host, port)
	}
	p, err := startProc(s.name, s.bin, args, s.log, nil)
	if err != nil {
		return err
	}
	s.proc = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: redis-server %s on %s did not answer within 10s: %v (see %s)", s.name, s.addr(), err, s.log)
		}
		select {
		case <-p.done:
			return fmt.Errorf("chaos: redis-server %s exited at start: %v (see %s)", s.name, p.err, s.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// promote turns a replica into a primary (REPLICAOF NO ONE, as Sentinel does) and waits
// until it reports role:master.
func (s *redisServer) promote(ctx context.Context) error {
	if err := s.c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("chaos: REPLICAOF NO ONE on %s: %w", s.name, err)
	}
	s.replicaOf = ""
	deadline := time.Now().Add(replSyncTimeout)
	for {
		info, err := infoFields(ctx, s.c, "replication")
		if err == nil && info["role"] == "master" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s not role:master %s after REPLICAOF NO ONE (role %q, %v)", s.name, replSyncTimeout, info["role"], err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond): // a server's role has no signal to wait on
		}
	}
}

func (s *redisServer) kill() {
	if s.proc != nil {
		s.proc.kill()
	}
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
