package sink_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/watukuy/watukuy/internal/brokertest"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/sinks/amqpsink"
	"github.com/watukuy/watukuy/sinks/natssink"
	"github.com/watukuy/watukuy/sinks/pgsink"
	"github.com/watukuy/watukuy/watukuytype"
)

// BenchmarkSinks delivers distinct events into each sink from 4 and 16 goroutines at once
// (delivery.concurrency: different ordering keys), each Handle waiting for the receiver's
// answer or the broker's confirm, all in one run: a local webhook receiver answering 204, a
// file-backed JetStream stream, a RabbitMQ topic exchange with a persistent queue, a
// PostgreSQL table. events/s is what one worker process delivers to one sink setting.
func BenchmarkSinks(b *testing.B) {
	for _, s := range []struct {
		name string
		open func(b *testing.B, c int) watukuytype.Handler
	}{
		{"webhook", openWebhook},
		{"nats", openNATS},
		{"amqp", openAMQP},
		{"postgres", openPostgres},
	} {
		for _, c := range []int{4, 16} {
			b.Run(fmt.Sprintf("%s/c%d", s.name, c), func(b *testing.B) { deliver(b, c, s.open(b, c)) })
		}
	}
}

// deliver runs b.N events through handle from c goroutines and reports events/s.
func deliver(b *testing.B, c int, handle watukuytype.Handler) {
	ev := watukuytype.Event{Poller: "orders", Partition: "eu", Type: watukuytype.Updated, Lane: watukuytype.LaneLive,
		ObservedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), SchemaVersion: 1,
		Item: json.RawMessage(`{"id":"o-1","status":"paid","total":12.5,"lines":[{"sku":"A-1","qty":2}]}`)}
	warm := ev
	warm.ID, warm.Identity = "ev_warm", "warm"
	if err := handle(b.Context(), warm); err != nil { // connects (and creates the stream or table)
		b.Fatal(err)
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range c {
		wg.Go(func() {
			ev := ev
			ev.Identity = fmt.Sprintf("o-%d", g)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				ev.ID = fmt.Sprintf("ev_%d", i)
				if err := handle(b.Context(), ev); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

func openWebhook(b *testing.B, _ int) watukuytype.Handler {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.Cleanup(srv.Close)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a benchmark's secret of 32 bytes"))
	w, err := sink.NewWebhook(sink.Webhook{URL: srv.URL, Secrets: []string{secret}})
	if err != nil {
		b.Fatal(err)
	}
	return w.Handle
}

func openNATS(b *testing.B, _ int) watukuytype.Handler {
	url, name := brokertest.NATS(b), strings.ToUpper(brokertest.Name(b))
	b.Cleanup(func() {
		if nc, err := nats.Connect(url); err == nil {
			if js, err := jetstream.New(nc); err == nil {
				_ = js.DeleteStream(context.Background(), name)
			}
			nc.Close()
		}
	})
	return closing(b, func() (sink.Broker, error) {
		return natssink.New(natssink.Config{URL: url, Subject: name + ".${poller}.${type}", Stream: name, Create: true})
	})
}

func openAMQP(b *testing.B, _ int) watukuytype.Handler {
	url, name := brokertest.AMQP(b), brokertest.Name(b)
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.ExchangeDeclare(name, "topic", false, true, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-length": int32(10000)}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
		b.Fatal(err)
	}
	return closing(b, func() (sink.Broker, error) {
		return amqpsink.New(amqpsink.Config{URL: url, Exchange: name, RoutingKey: "${poller}.${type}"})
	})
}

func openPostgres(b *testing.B, c int) watukuytype.Handler {
	url, schema := brokertest.Postgres(b), brokertest.Name(b)
	b.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), url); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(context.Background())
		}
	})
	return closing(b, func() (sink.Broker, error) {
		return pgsink.New(pgsink.Config{URL: url, Table: schema + ".events", Create: true, MaxConns: int32(c)})
	})
}

// closing opens a broker sink, returns its handler and closes it when the benchmark ends.
func closing(b *testing.B, open func() (sink.Broker, error)) watukuytype.Handler {
	s, err := open()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s.Handle
}
