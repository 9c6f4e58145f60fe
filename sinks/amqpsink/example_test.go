package amqpsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/sinks/amqpsink"
	"github.com/watukuy/watukuy/watukuytype"
)

// A poller whose events go to a RabbitMQ topic exchange, routed by poller and type
// (watukuy.orders.created, …). The exchange must exist; Probe says whether it does. Needs
// RabbitMQ and Redis, so it only compiles here.
func Example() {
	broker := url.URL{Scheme: "amqp", User: url.UserPassword("watukuy", os.Getenv("AMQP_PASSWORD")), Host: "rabbit.internal:5672", Path: "/"}
	s, err := amqpsink.New(amqpsink.Config{
		URL:        broker.String(),
		Exchange:   "events",
		RoutingKey: "watukuy.${poller}.${type}",
		Timeout:    5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	sentence, err := s.Probe(ctx)
	if err != nil {
		log.Fatal(err) // e.g. "… exchange events does not exist: declare it …"
	}
	fmt.Println(sentence) // exchange events exists

	eng, err := watukuy.New(watukuy.Options{Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})})
	if err != nil {
		log.Fatal(err)
	}
	err = eng.Register(watukuytype.Poller{
		Name:     "orders",
		Strategy: watukuytype.SnapshotDiff,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(`{"id":"A-1","updated_at":"2026-11-29T10:00:00Z"}`)}}, nil
		},
		Version: watukuytype.Field("updated_at"),
		// Each event is published, confirmed by the broker, then acked. Consumers
		// deduplicate by the message_id property (the event id): delivery is at least once.
		Handler: s.Handle,
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := eng.Tick(ctx, 30*time.Second); err != nil {
		log.Fatal(err)
	}
}
