// Package redisproc starts private redis-server processes (a single server on a unix socket
// or a loopback port, or a three-master Redis Cluster) with no persistence and noeviction. It
// is shared by the tests' internal/redistest and by the benchmarks of internal/bench, which
// both need a Redis of their own and never a shared instance.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotInstalled is returned (wrapped) by Start when redis-server is not on the PATH.
var ErrNotInstalled = errors.New("redis-server not installed")

// Server is a redis-server process started by Start.
type Server struct {
	// Dir is the server's working directory (--dir).
	Dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	mu     sync.Mutex
	out    strings.Builder
}

// Write collects the server's output (stdout and stderr) for error messages.
func (s *Server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

// Output is what the server printed so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Exited is closed once the process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Pid is the server's process ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill SIGKILLs the process and waits until it has exited.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Start runs redis-server with its data in dir, no persistence, noeviction and the extra
// args; the caller stops it with Kill.
func Start(dir string, args []string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotInstalled, err)
	}
	args = append([]string{"--dir", dir, "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "noeviction", "--loglevel", "warning"}, args...)
	s := &Server{Dir: dir, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = s, s
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server in %s: %w", dir, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	return s, nil
}

// WaitReady polls ping until the server answers (at most timeout), failing early if it
// exits.
func (s *Server) WaitReady(timeout time.Duration, ping func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ping()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server in %s did not answer: %w\n%s", s.Dir, err, s.Output())
		}
		select {
		case <-s.exited:
			return fmt.Errorf("redis-server in %s exited early:\n%s", s.Dir, s.Output())
		case <-time.After(5 * time.Millisecond): // a starting server has nothing to wait on
		}
	}
}

// Unix starts a redis-server on the unix socket dir/redis.sock (no TCP port) and returns it
// with a client once it answers.
func Unix(dir string, extraArgs ...string) (*Server, *redis.Client, error) {
	sock := filepath.Join(dir, "redis.sock")
	s, err := Start(dir, append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700"}, extraArgs...))
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	if err := s.WaitReady(10*time.Second, func() error { return c.Ping(context.Background()).Err() }); err != nil {
		_ = c.Close()
		s.Kill()
		return nil, nil, err
	}
	return s, c, nil
}

// SocketURL is the unix:// URL of a server started by Unix.
func SocketURL(s *Server) string { return "unix://" + filepath.Join(s.Dir, "redis.sock") }

// FreePort finds a loopback port whose cluster bus port (+10000) is free too.
func FreePort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
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
		return port, nil
	}
	return 0, errors.New("no free port pair for a redis-server")
}

// Cluster is a private three-master Redis Cluster on loopback ports.
type Cluster struct {
	Servers []*Server
	Addrs   []string
	Client  *redis.ClusterClient
}

// URL is the cluster's redis+cluster:// URL (every node named).
func (c *Cluster) URL() string {
	return "redis+cluster://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
}

// Stop closes the client and kills every node.
func (c *Cluster) Stop() {
	if c.Client != nil {
		_ = c.Client.Close()
	}
	for _, s := range c.Servers {
		s.Kill()
	}
}

// StartCluster starts three cluster-enabled redis-servers on loopback ports (the cluster bus
// needs TCP), each in its own directory from dir(), assigns the slots evenly and waits until
// every node sees the cluster ok. On error every node started is killed.
func StartCluster(ctx context.Context, dir func() string, extraArgs ...string) (_ *Cluster, err error) {
	const nodes = 3
	cl := &Cluster{}
	defer func() {
		if err != nil {
			cl.Stop()
		}
	}()
	for i := 0; i < nodes; i++ {
		d := dir()
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s, err := Start(d, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(d, "nodes.conf"), "--cluster-node-timeout", "5000"}, extraArgs...))
		if err != nil {
			return nil, err
		}
		cl.Servers = append(cl.Servers, s)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr})
		err = s.WaitReady(10*time.Second, func() error { return c.Ping(ctx).Err() })
		if err == nil {
			lo, hi := i*16384/nodes, (i+1)*16384/nodes-1
			if e := c.ClusterAddSlotsRange(ctx, lo, hi).Err(); e != nil {
				err = fmt.Errorf("cluster addslots on %s: %w", addr, e)
			}
		}
		if err == nil && i > 0 {
			if e := c.ClusterMeet(ctx, "127.0.0.1", strings.TrimPrefix(cl.Addrs[0], "127.0.0.1:")).Err(); e != nil {
				err = fmt.Errorf("cluster meet from %s: %w", addr, e)
			}
		}
		_ = c.Close()
		if err != nil {
			return nil, err
		}
		cl.Addrs = append(cl.Addrs, addr)
	}
	cl.Client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, a := range cl.Addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			cl.Client.ReloadState(ctx)
			if err := cl.Client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err == nil {
				return cl, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redis cluster on %v did not come up", cl.Addrs)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond): // gossip has no event to wait on
		}
	}
}
