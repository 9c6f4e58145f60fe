package natssink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/brokertest"
	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/sinks/natssink"
	"github.com/watukuy/watukuy/watukuytest"
	"github.com/watukuy/watukuy/watukuytype"
)

var _ sink.Broker = (*natssink.Sink)(nil)

// broker is the test's view of the real NATS server: an admin connection and the test's
// own name, used for its stream and as the prefix of its subjects.
type broker struct {
	url  string
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
}

func newBroker(t testing.TB) *broker {
	t.Helper()
	u := brokertest.NATS(t)
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{url: u, name: brokertest.Name(t), nc: nc, js: js}
	// Whatever the test created under its name (the sink may create it) goes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, b.name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", b.name, err)
		}
	})
	return b
}

// stream creates the test's stream over its subjects prefix.>.
func (b *broker) stream(t testing.TB) jetstream.Stream {
	t.Helper()
	st, err := b.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: b.name, Subjects: []string{b.name + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("create stream %s: %v", b.name, err)
	}
	return st
}

// sink builds a sink on the test's server (closed when the test ends); change adjusts the
// config first.
func (b *broker) sink(t testing.TB, change func(*natssink.Config)) *natssink.Sink {
	t.Helper()
	cfg := natssink.Config{URL: b.url, Subject: b.name + ".${poller}.${type}", Stream: b.name, Timeout: 5 * time.Second}
	if change != nil {
		change(&cfg)
	}
	s, err := natssink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// messages reads the test's stream through an ordered consumer with filter ("" for all)
// until want messages came (at most 5 s), then checks that no more are there.
func (b *broker) messages(t *testing.T, filter string, want int) []jetstream.Msg {
	t.Helper()
	cfg := jetstream.OrderedConsumerConfig{}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	cons, err := b.js.OrderedConsumer(t.Context(), b.name, cfg)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var got []jetstream.Msg
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		batch, err := cons.Fetch(want-len(got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for m := range batch.Messages() {
			got = append(got, m)
		}
	}
	if len(got) != want {
		t.Fatalf("stream %s, filter %q: %d messages, want %d", b.name, filter, len(got), want)
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		t.Fatalf("stream %s, filter %q: an extra message on %s: %s", b.name, filter, m.Subject(), m.Data())
	}
	return got
}

// count is the number of messages the test's stream holds.
func (b *broker) count(t *testing.T) uint64 {
	t.Helper()
	st, err := b.js.Stream(t.Context(), b.name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func event(id, poller, identity string, typ watukuytype.EventType, version int) watukuytype.Event {
	return watukuytype.Event{ID: id, Poller: poller, Partition: "tenant-1", Type: typ, Lane: watukuytype.LaneLive,
		Identity: identity, Version: strconv.Itoa(version), ObservedAt: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
		SchemaVersion: 1, Item: json.RawMessage(fmt.Sprintf(`{"id":%q,"v":%d}`, identity, version))}
}

func wantUnavailable(t *testing.T, err error, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error, got nil")
	}
	if se := brokertest.SinkError(t, err); !se.Unreachable {
		t.Fatalf("want SinkUnavailable (Unreachable), got a SinkError without it: %v", err)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Fatalf("error %q does not say %q", err, c)
		}
	}
}

func TestHandleStoresTheEnvelopeWithTheEventIDAsMsgID(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	evs := []watukuytype.Event{
		event("ev_a1", "orders", "A-1", watukuytype.Created, 1),
		event("ev_a2", "orders", "A-1", watukuytype.Updated, 2),
		event("ev_b1", "invoices", "B-1", watukuytype.Deleted, 3),
	}
	for _, ev := range evs {
		if err := s.Handle(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	got := b.messages(t, "", len(evs))
	for i, m := range got {
		want, err := sink.Envelope(evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data()) != string(want) {
			t.Errorf("message %d: body\n%s\nwant the envelope\n%s", i, m.Data(), want)
		}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != evs[i].ID {
			t.Errorf("message %d: %s %q, want %q", i, jetstream.MsgIDHeader, id, evs[i].ID)
		}
		if subj := b.name + "." + evs[i].Poller + "." + string(evs[i].Type); m.Subject() != subj {
			t.Errorf("message %d: subject %s, want %s", i, m.Subject(), subj)
		}
	}
}

// Concurrent Handles (the engine's different ordering keys) share one connection and all
// arrive.
func TestConcurrentHandlesAllArrive(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	const keys, each = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, keys*each)
	for k := range keys {
		wg.Go(func() {
			for v := range each {
				errs <- s.Handle(t.Context(), event(fmt.Sprintf("ev_%d_%d", k, v), "orders", fmt.Sprintf("K-%d", k), watukuytype.Updated, v))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]bool{}
	for _, m := range b.messages(t, "", keys*each) {
		ids[m.Headers().Get(jetstream.MsgIDHeader)] = true
	}
	if len(ids) != keys*each {
		t.Fatalf("%d distinct event ids, want %d", len(ids), keys*each)
	}
}

// The "once" of JetStream: the same event handled twice (a re-send after a crash between the
// PubAck and the outbox ack) is stored once; the stream acks a further copy as Duplicate.
func TestSameEventTwiceIsStoredOnce(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	ev := event("ev_once", "orders", "A-1", watukuytype.Created, 1)
	for range 2 {
		if err := s.Handle(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("the stream holds %d messages after the same event was handled twice, want 1", n)
	}
	// The PubAck a re-send gets (Handle acks it without showing it).
	body, _ := sink.Envelope(ev)
	ack, err := b.js.PublishMsg(t.Context(), &nats.Msg{Subject: b.name + ".orders.created", Data: body}, jetstream.WithMsgID(ev.ID))
	if err != nil || !ack.Duplicate {
		t.Fatalf("a third publish of %s: ack %+v, %v; want Duplicate", ev.ID, ack, err)
	}
	b.messages(t, "", 1)
}

// create: true makes the stream at the first delivery, with the duplicate window; Probe
// before it says so and creates nothing.
func TestCreateMakesTheMissingStream(t *testing.T) {
	b := newBroker(t)
	s := b.sink(t, func(c *natssink.Config) { c.Create, c.DuplicateWindow = true, 5*time.Minute })
	if msg, err := s.Probe(t.Context()); err != nil || !strings.Contains(msg, "first delivery creates it") {
		t.Fatalf("probe before: %q, %v; want a sentence saying the first delivery creates it", msg, err)
	}
	if _, err := b.js.Stream(t.Context(), b.name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("probe created the stream (or failed to look): %v", err)
	}
	if err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1)); err != nil {
		t.Fatal(err)
	}
	st, err := b.js.Stream(t.Context(), b.name)
	if err != nil {
		t.Fatalf("the stream was not created: %v", err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Duplicates != 5*time.Minute || !slices.Equal(cfg.Subjects, []string{b.name + ".*.*"}) || cfg.Storage != jetstream.FileStorage {
		t.Fatalf("created stream: duplicates %s, subjects %v, storage %s; want 5m0s, [%s.*.*], file", cfg.Duplicates, cfg.Subjects, cfg.Storage, b.name)
	}
	b.messages(t, "", 1)
}

// Without create, a missing stream is the sink's failure, naming the stream.
func TestMissingStreamIsSinkUnavailableNamingIt(t *testing.T) {
	b := newBroker(t)
	s := b.sink(t, nil)
	err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1))
	wantUnavailable(t, err, "stream "+b.name, "no JetStream stream captures subject "+b.name+".orders.created", "set create: true")
	if _, err := b.js.Stream(t.Context(), b.name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the stream exists without create: %v", err)
	}
}

// Without a stream setting, a subject no stream captures is the sink's failure too.
func TestSubjectNoStreamCapturesIsSinkUnavailable(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, func(c *natssink.Config) { c.Stream, c.Subject = "", b.name+"x.${poller}" })
	err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1))
	wantUnavailable(t, err, "no JetStream stream captures subject "+b.name+"x.orders")
}

// With stream set, a subject that another stream captures fails rather than landing there.
func TestSubjectCapturedByAnotherStreamFails(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, func(c *natssink.Config) { c.Stream = b.name + "_other" })
	err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1))
	wantUnavailable(t, err, "captured by a stream other than "+b.name+"_other")
	if n := b.count(t); n != 0 {
		t.Fatalf("the other stream stored %d messages", n)
	}
}

// A templated subject routes each event by poller and type.
func TestTemplatedSubjectRoutesPerPollerAndType(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	evs := []watukuytype.Event{
		event("ev_1", "orders", "A-1", watukuytype.Created, 1),
		event("ev_2", "invoices", "B-1", watukuytype.Created, 1),
		event("ev_3", "orders", "A-1", watukuytype.Updated, 2),
		event("ev_4", "orders", "A-2", watukuytype.Created, 1),
		event("ev_5", "invoices", "B-1", watukuytype.Deleted, 2),
	}
	for _, ev := range evs {
		if err := s.Handle(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		filter string
		ids    []string
	}{
		{b.name + ".orders.*", []string{"ev_1", "ev_3", "ev_4"}},
		{b.name + ".orders.created", []string{"ev_1", "ev_4"}},
		{b.name + ".invoices.>", []string{"ev_2", "ev_5"}},
		{b.name + ".*.deleted", []string{"ev_5"}},
	} {
		t.Run(tc.filter[len(b.name):], func(t *testing.T) {
			var ids []string
			for _, m := range b.messages(t, tc.filter, len(tc.ids)) {
				ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
			}
			if !slices.Equal(ids, tc.ids) {
				t.Fatalf("filter %s: %v, want %v", tc.filter, ids, tc.ids)
			}
		})
	}
}

// An event whose expanded subject is not a publish subject is refused on its own (a plain
// error naming the subject); the next event goes out.
func TestInvalidExpandedSubjectIsThatEventsError(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, func(c *natssink.Config) { c.Subject = b.name + ".${partition}.${type}" })
	for _, part := range []string{"", "with space", "star*", "gt>"} {
		ev := event("ev_bad", "orders", "A-1", watukuytype.Created, 1)
		ev.Partition = part
		err := s.Handle(t.Context(), ev)
		var se *watukuytype.SinkError
		if err == nil || errors.As(err, &se) || !strings.Contains(err.Error(), strconv.Quote(b.name+"."+part+".created")) {
			t.Fatalf("partition %q: %v; want a plain error naming the subject", part, err)
		}
	}
	if err := s.Handle(t.Context(), event("ev_good", "orders", "A-1", watukuytype.Created, 1)); err != nil {
		t.Fatal(err)
	}
	b.messages(t, "", 1)
}

// A message larger than the server's max payload is refused on its own.
func TestMessageOverMaxPayloadIsThatEventsError(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	ev := event("ev_big", "orders", "A-1", watukuytype.Created, 1)
	ev.Item = json.RawMessage(`"` + strings.Repeat("x", int(b.nc.MaxPayload())) + `"`)
	err := s.Handle(t.Context(), ev)
	var se *watukuytype.SinkError
	if err == nil || errors.As(err, &se) || !strings.Contains(err.Error(), "max payload") {
		t.Fatalf("an event over the max payload: %v; want a plain error saying so", err)
	}
	if err := s.Handle(t.Context(), event("ev_small", "orders", "A-1", watukuytype.Created, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestProbe(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	for _, tc := range []struct {
		name    string
		cfg     func(*natssink.Config)
		want    string // in the sentence; "" when an error is wanted
		wantErr string
	}{
		{"stream exists", nil, "stream " + b.name + " exists (subjects " + b.name + ".>", ""},
		{"no stream set", func(c *natssink.Config) { c.Stream = "" }, "stream " + b.name + " captures " + b.name + ".*.*", ""},
		{"missing stream", func(c *natssink.Config) { c.Stream = b.name + "_missing" },
			"", "stream " + b.name + "_missing does not exist: create it with subjects " + b.name + ".*.*, or set create: true"},
		{"subjects not covered", func(c *natssink.Config) { c.Subject = b.name + "x.${poller}" },
			"", "do not capture " + b.name + "x.*"},
		{"no stream captures", func(c *natssink.Config) { c.Stream, c.Subject = "", b.name+"x.${poller}" },
			"", "no JetStream stream captures " + b.name + "x.*"},
		{"create over another stream's subjects", func(c *natssink.Config) { c.Stream, c.Create = b.name+"_new", true },
			"", "stream " + b.name + "_new does not exist, and creating it with subjects " + b.name + ".*.* would fail: stream " + b.name + " captures some of them"},
		{"create", func(c *natssink.Config) { c.Stream, c.Create, c.Subject = b.name+"_new", true, b.name+"x.${poller}" },
			"stream " + b.name + "_new does not exist: the first delivery creates it (subjects " + b.name + "x.*, file storage, duplicate window 2m0s)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := b.sink(t, tc.cfg)
			msg, err := s.Probe(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("probe: %q, %v; want an error saying %q", msg, err, tc.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(msg, tc.want) {
				t.Fatalf("probe: %q, %v; want %q", msg, err, tc.want)
			}
		})
	}
	if n := b.count(t); n != 0 {
		t.Fatalf("probing published %d messages", n)
	}
}

func TestProbeUnreachableServerIsSinkUnavailable(t *testing.T) {
	s, err := natssink.New(natssink.Config{URL: "nats://" + brokertest.ClosedAddr(t), Subject: "x.y", Stream: "X", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Probe(t.Context())
	wantUnavailable(t, err, "sink: nats", "probe: connect")
}

func TestNewRejectsABadConfig(t *testing.T) {
	ok := natssink.Config{URL: "nats://127.0.0.1:4222", Subject: "watukuy.${poller}"}
	for _, tc := range []struct {
		name   string
		change func(*natssink.Config)
		want   string
	}{
		{"no url", func(c *natssink.Config) { c.URL = " " }, "url is empty"},
		{"wrong scheme", func(c *natssink.Config) { c.URL = "http://127.0.0.1:4222" }, "scheme must be nats"},
		{"no host", func(c *natssink.Config) { c.URL = "nats://" }, "has no host"},
		{"second url bad", func(c *natssink.Config) { c.URL = "nats://a:4222,amqp://b:4222" }, "amqp://b:4222: scheme"},
		{"no subject", func(c *natssink.Config) { c.Subject = "" }, "subject is empty"},
		{"unknown variable", func(c *natssink.Config) { c.Subject = "w.${tenant}" }, "unknown variable ${tenant}"},
		{"wildcard subject", func(c *natssink.Config) { c.Subject = "w.${poller}.*" }, `subject "w.${poller}.*": it holds the wildcard '*'`},
		{"empty token", func(c *natssink.Config) { c.Subject = "w..${poller}" }, "empty token"},
		{"bad stream name", func(c *natssink.Config) { c.Stream = "a.b" }, `stream "a.b"`},
		{"create without stream", func(c *natssink.Config) { c.Create = true }, "create needs stream"},
		{"negative window", func(c *natssink.Config) { c.DuplicateWindow = -time.Second }, "negative duplicateWindow"},
		{"negative timeout", func(c *natssink.Config) { c.Timeout = -time.Second }, "negative timeout"},
		{"creds and nkey", func(c *natssink.Config) { c.CredsFile, c.NKeyFile = "a", "b" }, "credsFile and nkeyFile"},
		{"token twice", func(c *natssink.Config) { c.URL, c.Token = "nats://tok1234@127.0.0.1:4222", "tok5678" }, "token is set and the url"},
		{"cert without key", func(c *natssink.Config) { c.CertFile = "/etc/hostname" }, "certFile and keyFile go together"},
		{"missing creds file", func(c *natssink.Config) { c.CredsFile = "/nonexistent/user.creds" }, "credsFile: stat /nonexistent/user.creds: no such file"},
		{"missing nkey file", func(c *natssink.Config) { c.NKeyFile = "/nonexistent/user.nk" }, "nkeyFile: stat /nonexistent/user.nk"},
		{"missing ca file", func(c *natssink.Config) { c.CAFile = "/nonexistent/ca.pem" }, "caFile: stat /nonexistent/ca.pem"},
		{"missing cert file", func(c *natssink.Config) { c.CertFile, c.KeyFile = "/nonexistent/c.pem", "/nonexistent/k.pem" }, "certFile: stat /nonexistent/c.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.change(&cfg)
			_, err := natssink.New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestNewFillsInDefaultsAndConnectsNothing(t *testing.T) {
	s, err := natssink.New(natssink.Config{URL: "nats://wtuser:Sup3rS3cret-pw@" + brokertest.ClosedAddr(t) + ",nats://127.0.0.1:1", Subject: "w.${poller}", Stream: "W"})
	if err != nil {
		t.Fatalf("New must not connect: %v", err)
	}
	defer s.Close()
	if s.Kind() != "nats" {
		t.Fatalf("kind %q", s.Kind())
	}
	if tg := s.Target(); !strings.HasPrefix(tg, "nats://[redacted]@127.0.0.1:") || !strings.HasSuffix(tg, ",nats://127.0.0.1:1 stream W subject w.${poller}") {
		t.Fatalf("target %q", tg)
	}
	if natssink.DefaultTimeout != 10*time.Second || natssink.DefaultDuplicateWindow != 2*time.Minute {
		t.Fatalf("defaults %s, %s", natssink.DefaultTimeout, natssink.DefaultDuplicateWindow)
	}
}

// A credentials file that cannot be used is a clear error of the first connection.
func TestUnusableCredsFileIsAConnectError(t *testing.T) {
	b := newBroker(t)
	creds := t.TempDir() + "/user.creds"
	if err := os.WriteFile(creds, []byte("not a credentials file"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := b.sink(t, func(c *natssink.Config) { c.CredsFile = creds })
	err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1))
	wantUnavailable(t, err, "connect:")
}

func TestHandleAfterCloseSaysTheSinkIsClosed(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	if err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Handle(t.Context(), event("ev_2", "orders", "A-1", watukuytype.Created, 1))
	if !errors.Is(err, natssink.ErrClosed) || !strings.Contains(err.Error(), "the sink is closed") {
		t.Fatalf("Handle after Close: %v", err)
	}
	if _, err := s.Probe(t.Context()); !errors.Is(err, natssink.ErrClosed) {
		t.Fatalf("Probe after Close: %v", err)
	}
}

// The broker out of reach (a cut link, before or after the first connection) is the sink's
// failure, reported at once and naming sink and target; a dropped connection heals; once the
// link is back the next Handle delivers.
func TestUnreachableBrokerIsSinkUnavailableThenTheNextHandleDelivers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		connected bool                  // a delivery before the outage
		outage    func(*netproxy.Proxy) // what happens to the link
		fails     bool                  // the Handle during the outage fails
	}{
		{"cut before the first connection", false, (*netproxy.Proxy).Cut, true},
		{"cut after a delivery", true, (*netproxy.Proxy).Cut, true},
		{"connection dropped after a delivery", true, func(p *netproxy.Proxy) { p.DropAll() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			b.stream(t)
			_, p := brokertest.Proxied(t, b.url)
			s := b.sink(t, func(c *natssink.Config) { c.URL, c.Timeout = "nats://"+p.Addr(), 3*time.Second })
			var want []string
			if tc.connected {
				if err := s.Handle(t.Context(), event("ev_before", "orders", "A-1", watukuytype.Created, 1)); err != nil {
					t.Fatal(err)
				}
				want = append(want, "ev_before")
			}
			tc.outage(p)
			start := time.Now()
			err := s.Handle(t.Context(), event("ev_during", "orders", "A-1", watukuytype.Updated, 2))
			if tc.fails {
				wantUnavailable(t, err, "sink: nats nats://"+p.Addr()+" stream "+b.name+" subject "+b.name+".orders.updated: event ev_during")
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("the failure took %s: an unreachable broker is reported at once", took)
				}
				p.Restore()
			} else {
				if err != nil {
					t.Fatalf("after a dropped connection: %v", err)
				}
				want = append(want, "ev_during")
			}
			if err := s.Handle(t.Context(), event("ev_after", "orders", "A-1", watukuytype.Updated, 3)); err != nil {
				t.Fatalf("after the link came back: %v", err)
			}
			want = append(want, "ev_after")
			var got []string
			for _, m := range b.messages(t, "", len(want)) {
				got = append(got, m.Headers().Get(jetstream.MsgIDHeader))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("stored %v, want %v", got, want)
			}
		})
	}
}

// A connection that drops while a publish waits for its PubAck ends that wait at once (the
// PubAck went to the lost connection): the publish is tried on a new connection, which the
// cut link refuses, so the Handle fails as the sink's long before its timeout.
func TestConnectionLostDuringPublishIsSinkUnavailable(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	_, p := brokertest.Proxied(t, b.url)
	s := b.sink(t, func(c *natssink.Config) { c.URL, c.Timeout = "nats://"+p.Addr(), 20*time.Second })
	if err := s.Handle(t.Context(), event("ev_0", "orders", "A-1", watukuytype.Created, 1)); err != nil {
		t.Fatal(err)
	}
	p.StallReplies(time.Minute) // the publish goes out, its PubAck is held
	done := make(chan error, 1)
	go func() { done <- s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Updated, 2)) }()
	deadline := time.Now().Add(5 * time.Second)
	for b.count(t) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // bounded polling: the stream stores it, the ack waits
	}
	start := time.Now()
	p.Cut()
	select {
	case err := <-done:
		wantUnavailable(t, err, "event ev_1")
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("failed %s after the drop", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the publish still waits 10 s after its connection dropped")
	}
}

// A PubAck that does not come within the timeout, on a connection that stays up, is a
// failure of the server's (a SinkError that is not Unreachable), saying how long it waited.
func TestPubAckTimeoutIsSinkError(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	_, p := brokertest.Proxied(t, b.url)
	s := b.sink(t, func(c *natssink.Config) { c.URL, c.Timeout = "nats://"+p.Addr(), 500*time.Millisecond })
	if err := s.Handle(t.Context(), event("ev_0", "orders", "A-1", watukuytype.Created, 1)); err != nil {
		t.Fatal(err)
	}
	p.StallReplies(time.Minute)
	err := s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Updated, 2))
	if se := brokertest.SinkError(t, err); se.Unreachable || !strings.Contains(err.Error(), "no PubAck within 500ms") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a PubAck held past the timeout: %v (unreachable %v); want a SinkError saying it timed out", err, se.Unreachable)
	}
}

// An engine whose sink cannot reach the broker blocks the key, then parks the event once its
// retry horizon passed; after the link is back, retrying the parked row delivers it.
func TestEngineParksWhileUnreachableAndARetryDelivers(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	_, p := brokertest.Proxied(t, b.url)
	s := b.sink(t, func(c *natssink.Config) { c.URL, c.Timeout = "nats://"+p.Addr(), 3*time.Second })
	p.Cut()
	env := watukuytest.New(t, watukuytype.Poller{
		Name: "orders", Strategy: watukuytype.SnapshotDiff, Version: watukuytype.Field("v"),
		Fetch: func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(`{"id":"A-1","v":1}`)}}, nil
		},
		Handler:  s.Handle,
		Delivery: watukuytype.Delivery{Concurrency: 4, Attempts: 1, RetryHorizon: time.Millisecond},
	})
	key := watukuytype.Key{Poller: "orders"}
	var rows []watukuytype.ParkedInfo
	var err error
	for range 10 {
		env.Tick()
		if rows, err = env.Engine.Parked().List(t.Context(), key, "poison"); err != nil {
			t.Fatal(err)
		}
		if len(rows) > 0 {
			break
		}
		env.Clock.Advance(time.Hour)
	}
	if len(rows) != 1 || !strings.Contains(rows[0].Error, "sink: nats nats://"+p.Addr()) {
		t.Fatalf("parked while the broker was out of reach: %+v", rows)
	}
	if n := b.count(t); n != 0 {
		t.Fatalf("%d messages stored during the outage", n)
	}
	p.Restore()
	if n, err := env.Engine.Parked().Retry(t.Context(), key, rows[0].ID); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	env.Settle(5)
	m := b.messages(t, "", 1)[0]
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != rows[0].ID {
		t.Fatalf("delivered %s, want the parked event %s", id, rows[0].ID)
	}
}

// A change feed where several identities change several times between cycles, delivered
// with concurrency 8: each cycle's outbox holds several events of one identity, and the
// stream holds each identity's events in commit order, every version once.
func TestEngineDeliversEachIdentityInCommitOrder(t *testing.T) {
	b := newBroker(t)
	b.stream(t)
	s := b.sink(t, nil)
	const identities, rounds, perRound = 12, 3, 4
	var mu sync.Mutex
	var changes []json.RawMessage // the feed; the cursor is the index reached
	fetch := func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		mu.Lock()
		defer mu.Unlock()
		from, _ := strconv.Atoi(req.Cursor)
		to := min(from+25, len(changes))
		return watukuytype.Page{Items: slices.Clone(changes[from:to]), Next: strconv.Itoa(to), HasMore: to < len(changes)}, nil
	}
	env := watukuytest.New(t, watukuytype.Poller{
		Name: "orders", Version: watukuytype.Field("v"), Fetch: fetch,
		Handler: s.Handle, Delivery: watukuytype.Delivery{Concurrency: 8},
	})
	version := 0
	for range rounds {
		mu.Lock()
		for range perRound {
			version++
			for i := range identities {
				changes = append(changes, json.RawMessage(fmt.Sprintf(`{"id":"I-%02d","v":%d}`, i, version)))
			}
		}
		mu.Unlock()
		env.Settle(5)
	}
	seen := map[string][]int{}
	for _, m := range b.messages(t, "", identities*version) {
		var ev watukuytype.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.Atoi(ev.Version)
		seen[ev.Identity] = append(seen[ev.Identity], v)
	}
	var want []int
	for v := 1; v <= version; v++ {
		want = append(want, v)
	}
	for i := range identities {
		if id := fmt.Sprintf("I-%02d", i); !slices.Equal(seen[id], want) {
			t.Errorf("%s: versions %v in the stream, want %v", id, seen[id], want)
		}
	}
}

// No error, parked row or log line shows the URL's user or password or the token.
func TestCredentialsNeverAppear(t *testing.T) {
	const user, pass, token = "wtuser", "Sup3rS3cret-pw", "Sup3rS3cret-token"
	addr := brokertest.ClosedAddr(t)
	secretFree := func(t *testing.T, what, text string) {
		t.Helper()
		for _, secret := range []string{user, pass, token} {
			if strings.Contains(text, secret) {
				t.Fatalf("%s shows %q: %s", what, secret, text)
			}
		}
	}
	for _, tc := range []struct{ name, url, token string }{
		{"user and password", "nats://" + user + ":" + pass + "@" + addr, ""},
		{"token in the url", "nats://" + token + "@" + addr, ""},
		{"token option", "nats://" + addr, token},
		{"several servers", "nats://" + user + ":" + pass + "@" + addr + ", nats://" + user + ":" + pass + "@" + brokertest.ClosedAddr(t), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := natssink.New(natssink.Config{URL: tc.url, Token: tc.token, Subject: "w.${poller}", Stream: "W", Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			secretFree(t, "Target", s.Target())
			err = s.Handle(t.Context(), event("ev_1", "orders", "A-1", watukuytype.Created, 1))
			wantUnavailable(t, err, "sink: nats nats://")
			secretFree(t, "Handle's error", err.Error())
			_, err = s.Probe(t.Context())
			wantUnavailable(t, err, "probe: connect")
			secretFree(t, "Probe's error", err.Error())
		})
	}
	for _, bad := range []string{
		"http://" + user + ":" + pass + "@" + addr,               // wrong scheme
		"nats://" + user + ":" + pass + "@" + addr + ":99x",      // does not parse
		"nats://" + addr + ",amqp://" + user + ":" + pass + "@h", // second server's scheme
	} {
		_, err := natssink.New(natssink.Config{URL: bad, Subject: "w"})
		if err == nil {
			t.Fatalf("New(%s) accepted it", bad)
		}
		secretFree(t, "New's error", err.Error())
	}

	t.Run("engine logs and parked rows", func(t *testing.T) {
		s, err := natssink.New(natssink.Config{URL: "nats://" + user + ":" + pass + "@" + addr, Subject: "w.${poller}", Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		m := miniredis.RunT(t)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		m.SetTime(now)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer rdb.Close()
		var logs brokertest.Logs
		eng, err := watukuy.New(watukuy.Options{Redis: rdb, InstanceID: "natssink-test", Logger: zerolog.New(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(watukuytype.Poller{
			Name: "orders", Strategy: watukuytype.SnapshotDiff,
			Fetch: func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
				return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(`{"id":"A-1"}`)}}, nil
			},
			Handler:  s.Handle,
			Delivery: watukuytype.Delivery{Attempts: 2, RetryHorizon: time.Millisecond, Backoff: watukuytype.Backoff{Base: time.Millisecond, Factor: 1, Max: time.Millisecond}},
		}); err != nil {
			t.Fatal(err)
		}
		key := watukuytype.Key{Poller: "orders"}
		var rows []watukuytype.ParkedInfo
		for range 5 {
			if _, err := eng.Tick(t.Context(), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if rows, err = eng.Parked().List(t.Context(), key, "poison"); err != nil {
				t.Fatal(err)
			}
			if len(rows) > 0 {
				break
			}
			now = now.Add(time.Hour)
			m.SetTime(now)
		}
		if len(rows) != 1 {
			t.Fatalf("parked rows %+v: want the event parked", rows)
		}
		ki, err := eng.Inspect(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		text := logs.String()
		if !strings.Contains(text, "sink: nats nats://[redacted]@") || !strings.Contains(rows[0].Error, "sink: nats nats://[redacted]@") {
			t.Fatalf("the sink's error is not in the logs and the parked row (nothing checked):\n%s\n%+v", text, rows[0])
		}
		secretFree(t, "the engine's logs", text)
		secretFree(t, "the parked row", fmt.Sprintf("%+v", rows[0]))
		secretFree(t, "the key's info", fmt.Sprintf("%+v %+v", ki, ki.Blocked))
	})
}
