// Package brokertest gives tests the message brokers of the machine they run on: NATS with
// JetStream, RabbitMQ and PostgreSQL, each a real server (never a mock), and a name of their
// own for what they create there (a stream, an exchange and queue, a schema), so tests never
// see each other's data.
//
// The servers' addresses default to the loopback ports the development and CI machines start
// them on; WATUKUY_NATS_URL, WATUKUY_AMQP_URL and WATUKUY_POSTGRES_URL override them. A server
// that does not answer skips the test, or fails it with WATUKUY_REQUIRE_BROKERS=1 (CI sets
// it, so a green run always includes the brokers).
package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns an unreachable broker into a failure.
const RequireEnv = "WATUKUY_REQUIRE_BROKERS"

// The brokers' default URLs and the variables that override them.
const (
	DefaultNATS     = "nats://127.0.0.1:4222"
	DefaultAMQP     = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultPostgres = "postgres://127.0.0.1:5432/test?sslmode=disable"

	NATSEnv     = "WATUKUY_NATS_URL"
	AMQPEnv     = "WATUKUY_AMQP_URL"
	PostgresEnv = "WATUKUY_POSTGRES_URL"
)

// NATS is the URL of a NATS server with JetStream.
func NATS(tb testing.TB) string { return reach(tb, "NATS", NATSEnv, DefaultNATS, "4222") }

// AMQP is the URL of a RabbitMQ server.
func AMQP(tb testing.TB) string { return reach(tb, "RabbitMQ", AMQPEnv, DefaultAMQP, "5672") }

// Postgres is the URL of a PostgreSQL database.
func Postgres(tb testing.TB) string {
	return reach(tb, "PostgreSQL", PostgresEnv, DefaultPostgres, "5432")
}

func reach(tb testing.TB, what, env, def, port string) string {
	tb.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("brokertest: %s=%q: %v", env, raw, err)
	}
	host := u.Host
	if i := strings.IndexByte(host, ','); i >= 0 { // NATS takes a list of servers
		host = host[:i]
	}
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), port)
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		msg := what + " is not reachable at " + host + " (" + err.Error() + "); set " + env + " to reach it"
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("brokertest: %s (%s is set: a missing broker fails)", msg, RequireEnv)
		}
		tb.Skipf("brokertest: %s", msg)
	}
	_ = c.Close()
	return raw
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// Name is a name for the test's own stream, exchange, queue or schema: lower-case letters,
// digits and underscores, starting with "wt_", from the test's name and 6 random bytes, at
// most 48 bytes (valid as a JetStream stream, an AMQP name and a PostgreSQL identifier).
func Name(tb testing.TB) string {
	tb.Helper()
	base := unsafe.ReplaceAllString(strings.ToLower(tb.Name()), "_")
	base = strings.Trim(base, "_")
	if len(base) > 32 {
		base = base[len(base)-32:]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "wt_" + base + "_" + hex.EncodeToString(b[:])
}
