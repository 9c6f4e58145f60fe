package admin_test

// Redis stopped, unreachable or hung under a running API: every endpoint answers 503
// redis_unavailable within a bound a client can wait for.

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
)

// readRoutes are the routes that read.
var readRoutes = []string{
	"/api/whoami", "/api/pollers", "/api/keys", "/api/keys?poller=shops", "/api/keys/orders/-",
	"/api/keys/shops/eu/backfill", "/api/parked", "/api/parked?poller=orders", "/api/keys/orders/-/parked",
	"/api/pollers/shops/partitions",
}

// downCheck sends every route with the ops token and wants 503 redis_unavailable (whoami:
// 200, it reads nothing) from each within bound.
func downCheck(t *testing.T, s *site, bound time.Duration) {
	t.Helper()
	type route struct{ method, path, body string }
	var all []route
	for _, p := range readRoutes {
		all = append(all, route{"GET", p, ""})
	}
	for _, r := range actRoutes {
		all = append(all, route(r))
	}
	for _, r := range all {
		start := time.Now()
		code, _, b := s.raw(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		took := time.Since(start)
		want := 503
		switch {
		case r.path == "/api/whoami":
			want = 200
		case strings.HasPrefix(r.path, "/api/keys/orders/-/replay") && codeOf(b) == "replay_unavailable":
			want = 409 // orders keeps no log: the engine knows without Redis
		}
		if code != want || (want == 503 && codeOf(b) != "redis_unavailable") || took > bound {
			t.Errorf("%s %s with Redis down: %d after %v: %.300s", r.method, r.path, code, took.Round(time.Millisecond), b)
		}
	}
}

// Redis stopped under a running API (SHUTDOWN of the test's redis-server, its socket gone):
// every endpoint answers 503 redis_unavailable promptly.
func TestRedisStopped(t *testing.T) {
	s := newSite(t)
	quietRedis()
	_ = s.b.Client.ShutdownNoSave(context.Background()).Err()
	downCheck(t, s, 10*time.Second)
}

// The engine pointed at a closed TCP port from the start: 503 redis_unavailable everywhere.
func TestRedisClosedPort(t *testing.T) {
	quietRedis()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	eng, err := watukuy.New(watukuy.Options{Redis: c, InstanceID: "adv"})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := admintoken.NewSet([]admintoken.Token{{ID: "ops", Secret: opsSecret}}...)
	log := &syncBuffer{}
	srv := httptest.NewServer(admin.NewAPI(admin.Options{Engine: eng, Tokens: set, Logger: zerolog.New(log)}))
	defer srv.Close()
	downCheck(t, &site{t: t, srv: srv, log: log}, 10*time.Second)
}

// quietRedis drops go-redis' own log lines (one per failed dial) from the test output.
func quietRedis() { redis.SetLogger(nopRedisLogger{}) }

type nopRedisLogger struct{}

func (nopRedisLogger) Printf(context.Context, string, ...any) {}

// A hung Redis (every client paused, as a SIGSTOPped server or a cut link that drops
// packets): each request is answered 503 within a bound a client can wait for, and the work
// it started does not go on long after the client has left.
func TestRedisHung(t *testing.T) {
	s := newSite(t)
	quietRedis()
	ctx := context.Background()
	// The pause outlasts the test; the server is killed at its end.
	if err := s.b.Client.Do(ctx, "CLIENT", "PAUSE", "30000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/keys/orders/-", ""},
		{"POST", "/api/keys/orders/-/pause", ""},
		{"GET", "/api/keys", ""},
	} {
		start := time.Now()
		code, _, b := s.raw(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		took := time.Since(start)
		t.Logf("%s %s: %d after %v: %.200s", r.method, r.path, code, took.Round(time.Millisecond), b)
		if code != 503 || took > 15*time.Second {
			t.Errorf("%s %s with Redis hung: %d after %v, want 503 within 15s", r.method, r.path, code, took.Round(time.Millisecond))
		}
	}
}
