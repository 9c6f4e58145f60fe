package amqpsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/brokertest"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/sinks/amqpsink"
	"github.com/watukuy/watukuy/watukuytest"
	"github.com/watukuy/watukuy/watukuytype"
)

var _ sink.Broker = (*amqpsink.Sink)(nil)

// broker is the test's own view of RabbitMQ: it declares the test's exchanges and queues,
// deletes them when the test ends, and reads what arrived.
type broker struct {
	t    testing.TB
	url  string
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newBroker(t testing.TB) *broker {
	t.Helper()
	u := brokertest.AMQP(t)
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &broker{t: t, url: u, conn: conn, ch: ch}
}

// cleanup runs f on a channel of its own (the test's may be closed by then).
func (b *broker) cleanup(f func(ch *amqp.Channel) error) {
	b.t.Cleanup(func() {
		ch, err := b.conn.Channel()
		if err != nil {
			b.t.Logf("cleanup: %v", err)
			return
		}
		defer ch.Close()
		if err := f(ch); err != nil {
			b.t.Logf("cleanup: %v", err)
		}
	})
}

// exchange declares a topic exchange, deleted when the test ends.
func (b *broker) exchange(name string) {
	b.t.Helper()
	if err := b.ch.ExchangeDeclare(name, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare exchange %s: %v", name, err)
	}
	b.cleanup(func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) })
}

// queue declares a queue bound to exchange for each key (none for the default exchange),
// deleted when the test ends.
func (b *broker) queue(name, exchange string, keys ...string) {
	b.t.Helper()
	if _, err := b.ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare queue %s: %v", name, err)
	}
	b.cleanup(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(name, false, false, false); return err })
	for _, k := range keys {
		if err := b.ch.QueueBind(name, k, exchange, false, nil); err != nil {
			b.t.Fatalf("bind queue %s to %s with %s: %v", name, exchange, k, err)
		}
	}
}

// receive takes n messages off queue, failing the test when they do not come within 5 s.
func (b *broker) receive(queue string, n int) []amqp.Delivery {
	b.t.Helper()
	var got []amqp.Delivery
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n {
		d, ok, err := b.ch.Get(queue, true)
		if err != nil {
			b.t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			got = append(got, d)
			continue
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("queue %s: %d messages arrived within 5s, want %d", queue, len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return got
}

// count is how many messages queue holds.
func (b *broker) count(queue string) int {
	b.t.Helper()
	q, err := b.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		b.t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// newSink builds a sink closed when the test ends.
func newSink(t testing.TB, cfg amqpsink.Config) *amqpsink.Sink {
	t.Helper()
	s, err := amqpsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// withUser returns rawURL with user and password in place of its own.
func withUser(t *testing.T, rawURL, user, password string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

func event(id, poller string, typ watukuytype.EventType) watukuytype.Event {
	return watukuytype.Event{ID: id, Poller: poller, Partition: "eu", Type: typ, Lane: watukuytype.LaneLive,
		Identity: "o-" + id, Version: "3", ObservedAt: time.Date(2026, 3, 1, 12, 30, 45, 0, time.UTC), SchemaVersion: 1,
		Item: json.RawMessage(`{"id":"o-` + id + `","total":12.5}`)}
}

func TestHandlePublishesTheEnvelopeWithTheEventIDAsMessageID(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "orders.#")
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "orders.created"})
	ids := []string{"ev_1", "ev_2", "ev_3"}
	for _, id := range ids {
		if err := s.Handle(t.Context(), event(id, "orders", watukuytype.Created)); err != nil {
			t.Fatalf("Handle(%s): %v", id, err)
		}
	}
	for i, d := range b.receive(name, len(ids)) {
		want, err := sink.Envelope(event(ids[i], "orders", watukuytype.Created))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(d.Body, want) {
			t.Errorf("message %d body\n%s\nwant the envelope\n%s", i, d.Body, want)
		}
		if d.MessageId != ids[i] {
			t.Errorf("message %d message_id %q, want %q", i, d.MessageId, ids[i])
		}
	}
}

func TestHandleSetsTheMessageProperties(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "#")
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "orders"})
	ev := event("ev_props", "orders", watukuytype.Updated)
	if err := s.Handle(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	d := b.receive(name, 1)[0]
	checks := []struct {
		what      string
		got, want any
	}{
		{"message_id", d.MessageId, ev.ID},
		{"delivery mode", d.DeliveryMode, amqp.Persistent},
		{"content type", d.ContentType, "application/json"},
		{"type", d.Type, "updated"},
		{"timestamp", d.Timestamp.UTC(), ev.ObservedAt},
		{"routing key", d.RoutingKey, "orders"},
		{"header " + amqpsink.HeaderPoller, d.Headers[amqpsink.HeaderPoller], "orders"},
		{"header " + amqpsink.HeaderPartition, d.Headers[amqpsink.HeaderPartition], "eu"},
		{"header " + amqpsink.HeaderIdentity, d.Headers[amqpsink.HeaderIdentity], ev.Identity},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v (%T), want %v (%T)", c.what, c.got, c.got, c.want, c.want)
		}
	}
}

func TestHandleToTheDefaultExchangeReachesTheQueueTheKeyNames(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.queue(name, "")
	s := newSink(t, amqpsink.Config{URL: b.url, RoutingKey: name})
	if err := s.Handle(t.Context(), event("ev_default", "orders", watukuytype.Created)); err != nil {
		t.Fatal(err)
	}
	if d := b.receive(name, 1)[0]; d.MessageId != "ev_default" {
		t.Fatalf("message_id %q", d.MessageId)
	}
}

func TestTemplatedRoutingKeyRoutesEachTypeToItsQueue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	types := []watukuytype.EventType{watukuytype.Created, watukuytype.Updated, watukuytype.Deleted}
	for _, typ := range types {
		b.queue(name+"_"+string(typ), name, "watukuy.*.*."+string(typ))
	}
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "watukuy.${poller}.${partition}.${type}"})
	for i, typ := range types {
		if err := s.Handle(t.Context(), event(fmt.Sprintf("ev_%d", i), "orders", typ)); err != nil {
			t.Fatalf("Handle(%s): %v", typ, err)
		}
	}
	for i, typ := range types {
		q := name + "_" + string(typ)
		d := b.receive(q, 1)[0]
		if want := "watukuy.orders.eu." + string(typ); d.RoutingKey != want || d.MessageId != fmt.Sprintf("ev_%d", i) {
			t.Errorf("queue %s holds %s with routing key %s, want ev_%d with %s", q, d.MessageId, d.RoutingKey, i, want)
		}
		if n := b.count(q); n != 0 {
			t.Errorf("queue %s holds %d more messages, want only its type's", q, n)
		}
	}
}

// A message no queue is bound for is returned by the broker before its ack: a failed attempt
// naming the exchange and routing key, and the channel it came back on goes on to deliver the
// next message (the return is not taken for that one's).
func TestUnroutableMessageIsASinkErrorNeverAnAck(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "orders.*")
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "${poller}.${type}"})
	err := s.Handle(t.Context(), event("ev_lost", "nobody", watukuytype.Created))
	if err == nil {
		t.Fatal("Handle acked a message no queue is bound for")
	}
	if se := brokertest.SinkError(t, err); se.Unreachable {
		t.Errorf("unroutable marked unreachable: %v", err)
	}
	for _, want := range []string{"sink: amqp", "event ev_lost", "unroutable", "no queue is bound to exchange " + name + " for routing key nobody.created"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for i := range 3 {
		id := fmt.Sprintf("ev_ok_%d", i)
		if err := s.Handle(t.Context(), event(id, "orders", watukuytype.Created)); err != nil {
			t.Fatalf("Handle(%s) after an unroutable one: %v", id, err)
		}
	}
	for i, d := range b.receive(name, 3) {
		if want := fmt.Sprintf("ev_ok_%d", i); d.MessageId != want {
			t.Errorf("message %d is %s, want %s", i, d.MessageId, want)
		}
	}
}

// A missing exchange fails every event alike (SinkUnavailable, naming it); once it is
// declared, the same sink delivers: the broker closed only the channel.
func TestMissingExchangeIsUnavailableAndTheSinkRecoversOnceItExists(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "orders.created"})
	for i := range 2 { // the second on a new channel: the first one's was closed
		err := s.Handle(t.Context(), event(fmt.Sprintf("ev_%d", i), "orders", watukuytype.Created))
		if err == nil {
			t.Fatal("Handle acked an event published to a missing exchange")
		}
		if se := brokertest.SinkError(t, err); !se.Unreachable {
			t.Errorf("missing exchange not SinkUnavailable: %v", err)
		}
		if want := "exchange " + name + " does not exist"; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	b.exchange(name)
	b.queue(name, name, "orders.*")
	if err := s.Handle(t.Context(), event("ev_after", "orders", watukuytype.Created)); err != nil {
		t.Fatalf("Handle once the exchange exists: %v", err)
	}
	if d := b.receive(name, 1)[0]; d.MessageId != "ev_after" {
		t.Fatalf("got %s", d.MessageId)
	}
}

func TestRefusedCredentialsAreUnavailableAndNeverShown(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const password = "wrongpass-4f1c"
	s := newSink(t, amqpsink.Config{URL: withUser(t, b.url, "guest", password), Exchange: "amq.topic", RoutingKey: "k"})
	err := s.Handle(t.Context(), event("ev_1", "orders", watukuytype.Created))
	if err == nil {
		t.Fatal("Handle with a wrong password succeeded")
	}
	if se := brokertest.SinkError(t, err); !se.Unreachable {
		t.Errorf("refused credentials not SinkUnavailable: %v", err)
	}
	if !strings.Contains(err.Error(), "refused the credentials") {
		t.Errorf("error %q does not say the credentials were refused", err)
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("error shows the password: %q", err)
	}
}

// A distinctive user and password appear in no error of New, Handle or Probe, nor in
// the engine's logs of a run against the broker that refuses them.
func TestCredentialsAppearInNoErrorOrLog(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const user, password = "wtuser", "Sup3rS3cret-pw"
	bad := withUser(t, b.url, user, password)
	check := func(what, msg string) {
		t.Helper()
		if msg == "" {
			t.Errorf("%s: no message to check", what)
		}
		if strings.Contains(msg, password) || strings.Contains(msg, user) {
			t.Errorf("%s shows the credentials: %q", what, msg)
		}
	}

	// New: a URL that does not parse (its error would quote it), and a TLS setting on amqp://.
	for _, cfg := range []amqpsink.Config{
		{URL: "amqp://" + user + ":" + password + "@127.0.0.1:notaport/", RoutingKey: "k"},
		{URL: bad, RoutingKey: "k", CAFile: "ca.pem"},
	} {
		_, err := amqpsink.New(cfg)
		if err == nil {
			t.Fatalf("New(%+v) succeeded", cfg)
		}
		check("New", err.Error())
	}

	// Handle, Probe and an engine's delivery at once: RabbitMQ holds a refused login for
	// seconds, and they share the sink's dial.
	s := newSink(t, amqpsink.Config{URL: bad, Exchange: "amq.topic", RoutingKey: "k"})
	logs := &brokertest.Logs{}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, InstanceID: "amqpsink", Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	p := poller(s.Handle, func() []json.RawMessage { return []json.RawMessage{json.RawMessage(`{"id":"a","v":1}`)} })
	p.Delivery.Attempts = 1
	if err := eng.Register(p); err != nil {
		t.Fatal(err)
	}
	var handleErr, probeErr, tickErr error
	var rep watukuytype.TickReport
	var wg sync.WaitGroup
	wg.Go(func() { handleErr = s.Handle(t.Context(), event("ev_1", "orders", watukuytype.Created)) })
	wg.Go(func() { _, probeErr = s.Probe(t.Context()) })
	wg.Go(func() { rep, tickErr = eng.Tick(t.Context(), 10*time.Second) })
	wg.Wait()
	if handleErr == nil {
		t.Fatal("Handle with refused credentials succeeded")
	}
	check("Handle", handleErr.Error())
	if probeErr == nil {
		t.Fatal("Probe with refused credentials succeeded")
	}
	check("Probe", probeErr.Error())
	if got := s.Target(); strings.Contains(got, password) || strings.Contains(got, user) {
		t.Errorf("Target shows the credentials: %q", got)
	}
	if tickErr != nil {
		t.Fatal(tickErr)
	}
	if rep.Events != 1 || rep.Delivered != 0 {
		t.Fatalf("tick: %d events, %d delivered; want 1 event, not delivered", rep.Events, rep.Delivered)
	}
	if !strings.Contains(logs.String(), "refused the credentials") {
		t.Fatalf("the engine logged no failed delivery:\n%s", logs)
	}
	check("the engine's logs", logs.String())
}

// poller is a snapshot listing of what items returns, delivered to handler.
func poller(handler watukuytype.Handler, items func() []json.RawMessage) watukuytype.Poller {
	return watukuytype.Poller{
		Name:     "orders",
		Strategy: watukuytype.SnapshotDiff,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: items()}, nil
		},
		Version: watukuytype.Field("v"),
		Handler: handler,
	}
}

// A broker that cannot be reached fails Handle as unreachable, naming sink and
// target; once it is back, the next Handle connects again and delivers.
func TestUnreachableBrokerIsUnavailableAndHandleReconnects(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "#")
	u, proxy := brokertest.Proxied(t, b.url)
	s := newSink(t, amqpsink.Config{URL: u, Exchange: name, RoutingKey: "orders", Timeout: 3 * time.Second})
	if err := s.Handle(t.Context(), event("ev_before", "orders", watukuytype.Created)); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	for i := range 2 { // the connection the cut closed, then a dial the proxy refuses
		err := s.Handle(t.Context(), event(fmt.Sprintf("ev_cut_%d", i), "orders", watukuytype.Created))
		if err == nil {
			t.Fatal("Handle succeeded while the broker was unreachable")
		}
		if se := brokertest.SinkError(t, err); !se.Unreachable {
			t.Errorf("attempt %d: unreachable broker not SinkUnavailable: %v", i, err)
		}
		if want := "sink: amqp " + s.Target()[:strings.Index(s.Target(), " ")] + " exchange " + name; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q does not start with %q", err, want)
		}
	}
	proxy.Restore()
	if err := s.Handle(t.Context(), event("ev_after", "orders", watukuytype.Created)); err != nil {
		t.Fatalf("Handle after Restore: %v", err)
	}
	var ids []string
	for _, d := range b.receive(name, 2) {
		ids = append(ids, d.MessageId)
	}
	if !slices.Equal(ids, []string{"ev_before", "ev_after"}) {
		t.Fatalf("queue holds %v, want ev_before then ev_after", ids)
	}
}

// A broker that stops answering fails Handle after Timeout as a SinkError that is not
// "unreachable" (one event can meet it); the next Handle, once it answers, delivers.
func TestConfirmTimeoutIsASinkError(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "#")
	u, proxy := brokertest.Proxied(t, b.url)
	const timeout = 300 * time.Millisecond
	s := newSink(t, amqpsink.Config{URL: u, Exchange: name, RoutingKey: "orders", Timeout: timeout})
	if err := s.Handle(t.Context(), event("ev_before", "orders", watukuytype.Created)); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(time.Hour)
	start := time.Now()
	err := s.Handle(t.Context(), event("ev_stalled", "orders", watukuytype.Created))
	took := time.Since(start)
	proxy.Stall(0)
	if err == nil {
		t.Fatal("Handle succeeded while the broker's answers were held")
	}
	if se := brokertest.SinkError(t, err); se.Unreachable {
		t.Errorf("timeout marked unreachable: %v", err)
	}
	if !strings.Contains(err.Error(), "timed out after "+timeout.String()) {
		t.Errorf("error %q does not say it timed out", err)
	}
	if took > timeout+time.Second {
		t.Errorf("Handle took %v with a %v timeout", took, timeout)
	}
	if err := s.Handle(t.Context(), event("ev_after", "orders", watukuytype.Created)); err != nil {
		t.Fatalf("Handle after the stall: %v", err)
	}
	// At least once: the stalled message may have arrived too, once its bytes went through.
	var ids []string
	for _, d := range b.receive(name, 2) {
		ids = append(ids, d.MessageId)
	}
	if ids[0] != "ev_before" || !slices.Contains(append(ids, b.receiveAll(name)...), "ev_after") {
		t.Fatalf("queue holds %v, want ev_before and ev_after", ids)
	}
}

// receiveAll takes what queue holds now.
func (b *broker) receiveAll(queue string) []string {
	b.t.Helper()
	var ids []string
	for {
		d, ok, err := b.ch.Get(queue, true)
		if err != nil {
			b.t.Fatal(err)
		}
		if !ok {
			return ids
		}
		ids = append(ids, d.MessageId)
	}
}

func TestCallersContextEndsHandle(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: "amq.topic", RoutingKey: "k"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.Handle(ctx, event("ev_1", "orders", watukuytype.Created))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle with a canceled context: %v, want context.Canceled", err)
	}
	var se *watukuytype.SinkError
	if errors.As(err, &se) {
		t.Errorf("the caller's cancellation is blamed on the sink: %v", err)
	}
}

// Engine level: an unreachable broker past the retry horizon parks the event; once it
// is back, a retry of the parked row delivers it.
func TestEngineParksWhileUnreachableAndRetryDelivers(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "#")
	u, proxy := brokertest.Proxied(t, b.url)
	s := newSink(t, amqpsink.Config{URL: u, Exchange: name, RoutingKey: "orders", Timeout: 3 * time.Second})
	var version atomic.Int32
	version.Store(1)
	p := poller(s.Handle, func() []json.RawMessage {
		return []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":"a","v":%d}`, version.Load()))}
	})
	p.Delivery = watukuytype.Delivery{Attempts: 2, Backoff: watukuytype.Backoff{Base: time.Millisecond, Factor: 1, Max: time.Millisecond},
		RetryHorizon: time.Millisecond}
	env := watukuytest.New(t, p)
	key := watukuytype.Key{Poller: "orders"}
	env.Settle(5) // a@1 delivered: the sink holds a connection, which the cut closes
	if d := b.receive(name, 1)[0]; !strings.Contains(string(d.Body), `"version":"1"`) {
		t.Fatalf("first delivery %s, want a@1", d.Body)
	}
	proxy.Cut()
	version.Store(2)
	// The first try blocks the key's delivery (the sink's failure), parking nothing.
	env.Clock.Advance(time.Hour)
	env.Tick()
	info, err := env.Engine.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Blocked == nil || !strings.Contains(info.Blocked.Error, "sink: amqp") || info.Parked != 0 {
		t.Fatalf("after the first try: blocked %+v, %d parked; want blocked by the sink's error, nothing parked", info.Blocked, info.Parked)
	}
	var rows []watukuytype.ParkedInfo
	for round := 0; len(rows) == 0; round++ {
		if round == 5 {
			t.Fatal("the event was not parked after 5 rounds against an unreachable broker")
		}
		env.Clock.Advance(time.Hour)
		if rep := env.Tick(); rep.Delivered != 0 {
			t.Fatalf("round %d delivered %d events while the broker was unreachable", round, rep.Delivered)
		}
		var err error
		if rows, err = env.Engine.Parked().List(t.Context(), key, "poison"); err != nil {
			t.Fatal(err)
		}
	}
	if len(rows) != 1 || !strings.Contains(rows[0].Error, "sink: amqp") {
		t.Fatalf("parked rows %+v, want the event with the sink's error", rows)
	}
	proxy.Restore()
	if n, err := env.Engine.Parked().Retry(t.Context(), key, rows[0].ID); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	var parked watukuytype.Event
	if err := json.Unmarshal(rows[0].Event, &parked); err != nil || parked.ID == "" {
		t.Fatalf("parked envelope %s: %v", rows[0].Event, err)
	}
	env.Settle(5)
	d := b.receive(name, 1)[0]
	if d.MessageId != parked.ID {
		t.Fatalf("delivered %s, want the parked %s", d.MessageId, parked.ID)
	}
}

// Engine level: identities that change several times between rounds, each round's
// changes delivered by 4 ordering keys at once: the queue holds each identity's versions in
// commit order.
func TestEngineDeliversEachIdentityInCommitOrder(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "#")
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "${poller}.${type}"})

	// A change feed: every change is an entry; the cursor is how many were read.
	const identities, rounds, perRound = 8, 3, 3
	var mu sync.Mutex
	var changes []json.RawMessage
	p := watukuytype.Poller{
		Name: "orders",
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			mu.Lock()
			defer mu.Unlock()
			from, _ := strconv.Atoi(req.Cursor)
			to := min(from+10, len(changes))
			return watukuytype.Page{Items: slices.Clone(changes[from:to]), Next: strconv.Itoa(to), HasMore: to < len(changes)}, nil
		},
		Version:  watukuytype.Field("v"),
		Handler:  s.Handle,
		Delivery: watukuytype.Delivery{Concurrency: 4},
	}
	env := watukuytest.New(t, p)
	v := 0
	for range rounds {
		mu.Lock()
		for range perRound {
			v++
			for i := range identities {
				changes = append(changes, json.RawMessage(fmt.Sprintf(`{"id":"i%d","v":%d}`, i, v)))
			}
		}
		mu.Unlock()
		env.Settle(20)
	}
	got := map[string][]int{}
	for _, d := range b.receive(name, identities*rounds*perRound) {
		var ev watukuytype.Event
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(ev.Version)
		got[ev.Identity] = append(got[ev.Identity], n)
	}
	for i := range identities {
		id := fmt.Sprintf("i%d", i)
		want := make([]int, 0, v)
		for n := 1; n <= v; n++ {
			want = append(want, n)
		}
		if !slices.Equal(got[id], want) {
			t.Errorf("identity %s arrived as versions %v, want %v", id, got[id], want)
		}
	}
}

func TestConcurrentHandlesAllArrive(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, name, "#")
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: name, RoutingKey: "${type}"})
	const workers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := s.Handle(t.Context(), event(fmt.Sprintf("ev_%d_%d", w, i), "orders", watukuytype.Created)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for _, d := range b.receive(name, workers*each) {
		seen[d.MessageId] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct events arrived, want %d", len(seen), workers*each)
	}
}

func TestProbeSaysWhetherTheTargetExists(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	name := brokertest.Name(t)
	b.exchange(name)
	b.queue(name, "")
	tests := []struct {
		name    string
		cfg     amqpsink.Config
		want    string // in the sentence
		wantErr string // in the error
	}{
		{"exchange exists", amqpsink.Config{Exchange: name, RoutingKey: "k"}, "exchange " + name + " exists", ""},
		{"exchange missing", amqpsink.Config{Exchange: name + "_missing", RoutingKey: "k"}, "", "exchange " + name + "_missing does not exist: declare it"},
		{"queue of the default exchange exists", amqpsink.Config{RoutingKey: name}, "queue " + name + " exists", ""},
		{"queue of the default exchange missing", amqpsink.Config{RoutingKey: name + "_missing"}, "", "queue " + name + "_missing does not exist"},
		{"templated key on the default exchange", amqpsink.Config{RoutingKey: "${poller}"}, "not checked", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.URL = b.url
			s := newSink(t, tt.cfg)
			got, err := s.Probe(t.Context())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Probe = %q, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(got, tt.want) {
				t.Fatalf("Probe = %q, %v; want a sentence saying %q", got, err, tt.want)
			}
		})
	}
	// Probe declared nothing.
	for _, missing := range []func(ch *amqp.Channel) error{
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(name+"_missing", amqp.ExchangeTopic, false, false, false, false, nil)
		},
		func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(name+"_missing", false, false, false, false, nil)
			return err
		},
	} {
		ch, err := b.conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := missing(ch); err == nil {
			_ = ch.Close()
			t.Fatal("Probe created what it checked")
		}
	}
}

func TestHandleAndProbeAfterCloseSayTheSinkIsClosed(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, amqpsink.Config{URL: b.url, Exchange: "amq.topic", RoutingKey: "k"})
	if _, err := s.Probe(t.Context()); err != nil { // connects
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	err := s.Handle(t.Context(), event("ev_1", "orders", watukuytype.Created))
	if !errors.Is(err, amqpsink.ErrClosed) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Handle after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Probe(t.Context()); !errors.Is(err, amqpsink.ErrClosed) {
		t.Fatalf("Probe after Close: %v, want ErrClosed", err)
	}
}

// New connects nothing: a sink on a port nobody listens on builds, and its Handle fails.
func TestNewConnectsNothing(t *testing.T) {
	t.Parallel()
	s, err := amqpsink.New(amqpsink.Config{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x", RoutingKey: "k"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	err = s.Handle(t.Context(), event("ev_1", "orders", watukuytype.Created))
	if se := brokertest.SinkError(t, err); !se.Unreachable || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("Handle against a closed port: %v, want SinkUnavailable saying connect", err)
	}
}

func TestKindAndTargetHideCredentials(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  amqpsink.Config
		want string
	}{
		{amqpsink.Config{URL: "amqp://wtuser:pw-secret@rabbit:5672/prod", Exchange: "events", RoutingKey: "watukuy.${type}"},
			"amqp://[redacted]@rabbit:5672/prod exchange events routing key watukuy.${type}"},
		{amqpsink.Config{URL: "amqp://rabbit/", RoutingKey: "orders"}, "amqp://rabbit/ the default exchange routing key orders"},
	}
	for _, tt := range tests {
		s, err := amqpsink.New(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if s.Kind() != "amqp" || s.Target() != tt.want {
			t.Errorf("Kind, Target = %q, %q; want amqp, %q", s.Kind(), s.Target(), tt.want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing-ca.pem")
	const ok = "amqp://guest:guest@127.0.0.1:5672/"
	tests := []struct {
		name string
		cfg  amqpsink.Config
		want string
	}{
		{"empty URL", amqpsink.Config{RoutingKey: "k"}, "URL is empty"},
		{"wrong scheme", amqpsink.Config{URL: "http://127.0.0.1:5672/", RoutingKey: "k"}, "URL http://127.0.0.1:5672/"},
		{"empty routing key", amqpsink.Config{URL: ok, Exchange: "x"}, "RoutingKey is empty"},
		{"unknown variable", amqpsink.Config{URL: ok, RoutingKey: "${tenant}"}, "RoutingKey: unknown variable ${tenant}"},
		{"long exchange", amqpsink.Config{URL: ok, Exchange: strings.Repeat("x", 256), RoutingKey: "k"}, "Exchange is 256 bytes long"},
		{"negative timeout", amqpsink.Config{URL: ok, RoutingKey: "k", Timeout: -time.Second}, "Timeout is negative"},
		{"TLS files on amqp://", amqpsink.Config{URL: ok, RoutingKey: "k", CAFile: missing}, "is not amqps://"},
		{"missing CA file", amqpsink.Config{URL: "amqps://127.0.0.1:5671/", RoutingKey: "k", CAFile: missing}, "CAFile: open " + missing + ": no such file"},
		{"CA file not PEM", amqpsink.Config{URL: "amqps://127.0.0.1:5671/", RoutingKey: "k", CAFile: notPEM}, "CAFile " + notPEM + " holds no PEM certificate"},
		{"cert without key", amqpsink.Config{URL: "amqps://127.0.0.1:5671/", RoutingKey: "k", CertFile: missing}, "CertFile and KeyFile go together"},
		{"missing cert file", amqpsink.Config{URL: "amqps://127.0.0.1:5671/", RoutingKey: "k", CertFile: missing, KeyFile: missing}, "CertFile " + missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := amqpsink.New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "sink: amqp: ") {
				t.Fatalf("New: %v, want an error saying %q", err, tt.want)
			}
		})
	}
	// amqps:// without files uses the system's roots.
	if _, err := amqpsink.New(amqpsink.Config{URL: "amqps://127.0.0.1:5671/", RoutingKey: "k"}); err != nil {
		t.Fatalf("New amqps:// without files: %v", err)
	}
}
