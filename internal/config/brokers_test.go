package config

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/sink"
)

const brokerHead = "pollers:\n  - name: orders\n    request: {url: https://api.example.com/orders}\n    cursor: {strategy: page}\n"

// Each broker sink's block decodes into its settings; a subject or routing key keeps
// ${poller}, ${partition} and ${type} for each event while other ${VAR}s come from the
// environment, as a URL's credentials do.
func TestBrokerSinksDecode(t *testing.T) {
	env := envOf(map[string]string{"NATS_PASSWORD": "n4ts-pw", "PREFIX": "acme"})
	src := brokerHead + `    partitions: [eu, us]
    delivery:
      nats:
        url: "nats://watukuy:${NATS_PASSWORD}@127.0.0.1:4222"
        subject: "${PREFIX}.${poller}.${partition}.${type}"
        stream: EVENTS
        create: true
        duplicateWindow: 10m
  - name: users
    request: {url: https://api.example.com/users}
    cursor: {strategy: page}
    delivery:
      amqp: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: events, routingKey: "${poller}.${type}"}
  - name: invoices
    request: {url: https://api.example.com/invoices}
    cursor: {strategy: page}
    delivery:
      postgres: {url: "postgres://127.0.0.1:5432/test", table: app.events, create: true, maxConns: 2}
`
	cfg, err := Parse("w.yaml", []byte(src), env)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Pollers[0].Delivery.NATS
	if n == nil || n.URL != "nats://watukuy:n4ts-pw@127.0.0.1:4222" || n.Subject != "acme.${poller}.${partition}.${type}" ||
		n.Stream != "EVENTS" || !n.Create || n.DuplicateWindow.Minutes() != 10 {
		t.Errorf("nats = %+v", n)
	}
	if a := cfg.Pollers[1].Delivery.AMQP; a == nil || a.Exchange != "events" || a.RoutingKey != "${poller}.${type}" {
		t.Errorf("amqp = %+v", a)
	}
	if p := cfg.Pollers[2].Delivery.Postgres; p == nil || p.Table != "app.events" || !p.Create || p.MaxConns != 2 {
		t.Errorf("postgres = %+v", p)
	}
	kinds := cfg.SinkKinds()
	if kinds["orders"] != "nats" || kinds["users"] != "amqp" || kinds["invoices"] != "postgres" {
		t.Errorf("SinkKinds = %v", kinds)
	}
	if d := cfg.Pollers[0].Delivery.Describe(); strings.Contains(d, "n4ts-pw") || !strings.Contains(d, "subject acme.${poller}") {
		t.Errorf("Describe = %q: want the subject and no password", d)
	}
}

// Wrong broker settings are errors at file:line with the field; none quotes a credential.
func TestBrokerSinkErrors(t *testing.T) {
	env := envOf(map[string]string{"PW": "Sup3rS3cret"})
	for _, tc := range []struct{ name, delivery, want string }{
		{"scheme", `nats: {url: "http://u:${PW}@h:4222", subject: s}`, "pollers[0].delivery.nats.url: want a nats or tls:// URL, got http://"},
		{"not a URL", `amqp: {url: "rabbit", routingKey: k}`, "pollers[0].delivery.amqp.url: want a amqp or amqps:// URL"},
		{"no subject", `nats: {url: "nats://h:4222"}`, "pollers[0].delivery.nats.subject: required"},
		{"unknown variable", `nats: {url: "nats://h:4222", subject: "x.${tenant}"}`, `pollers[0].delivery.nats.subject: environment variable "tenant" is not set`},
		{"partition without partitions", `amqp: {url: "amqp://h", routingKey: "${partition}"}`, "pollers[0].delivery.amqp.routingKey: uses ${partition} but the poller lists no partitions"},
		{"create without stream", `nats: {url: "nats://h:4222", subject: s, create: true}`, "pollers[0].delivery.nats.create: needs stream"},
		{"table", `postgres: {url: "postgres://h/db", table: "a.b.c"}`, `pollers[0].delivery.postgres.table: want table or schema.table, got "a.b.c"`},
		{"two sinks", `{stdout: {}, postgres: {url: "postgres://h/db", table: t}}`, "want exactly one of webhook, stream, stdout, nats, amqp or postgres, got stdout and postgres"},
		{"maxConns", `postgres: {url: "postgres://h/db", table: t, maxConns: 0}`, "pollers[0].delivery.postgres.maxConns: must be at least 1"},
		{"tls file", `nats: {url: "tls://h:4222", subject: s, tls: {caFile: missing-ca.pem}}`, "pollers[0].delivery.nats.tls.caFile: cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := brokerHead + "    delivery:\n      " + tc.delivery + "\n"
			if strings.HasPrefix(tc.delivery, "{") {
				src = brokerHead + "    delivery: " + tc.delivery + "\n"
			}
			_, err := parse(filepath.Join(t.TempDir(), "w.yaml"), []byte(src), env, true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Sup3rS3cret") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// Pollers that name the same broker setting share one sink (one connection per process);
// another setting gets its own.
func TestPollersShareABrokerSetting(t *testing.T) {
	entry := func(name, subject string) string {
		return "  - name: " + name + "\n    request: {url: https://api.example.com/" + name + "}\n    cursor: {strategy: page}\n" +
			"    delivery:\n      nats: {url: \"nats://127.0.0.1:4222\", subject: \"" + subject + "\"}\n"
	}
	cfg, err := Parse("w.yaml", []byte("pollers:\n"+entry("a", "x.${poller}")+entry("b", "x.${poller}")+entry("c", "y")), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	var brokers sink.Brokers
	defer brokers.Close()
	if _, err := Build(cfg, nil, io.Discard, &brokers, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	all := brokers.All()
	if len(all) != 2 {
		t.Fatalf("%d brokers, want 2 (a and b share one)", len(all))
	}
	for _, b := range all {
		if b.Kind() != "nats" {
			t.Errorf("kind %q", b.Kind())
		}
	}
}
