package natssink_test

import (
	"context"
	"encoding/json"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/sinks/natssink"
	"github.com/watukuy/watukuy/watukuytype"
)

// A Go poller whose events go to JetStream: the sink's Handle is the poller's Handler. The
// stream WATUKUY (subjects watukuy.*.*) is created at the first delivery if missing, with a
// duplicate window longer than the lease TTL plus schedule.max, so a re-sent event is
// stored once.
func Example() {
	sink, err := natssink.New(natssink.Config{
		URL:             "nats://127.0.0.1:4222",
		Subject:         "watukuy.${poller}.${type}",
		Stream:          "WATUKUY",
		Create:          true,
		DuplicateWindow: natssink.DefaultDuplicateWindow,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	eng, err := watukuy.New(watukuy.Options{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})})
	if err != nil {
		log.Fatal(err)
	}
	err = eng.Register(watukuytype.Poller{
		Name:     "orders",
		Strategy: watukuytype.SnapshotDiff,
		Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(`{"id":"A-1","status":"open"}`)}}, nil
		},
		Handler: sink.Handle,
	})
	if err != nil {
		log.Fatal(err)
	}
	if msg, err := sink.Probe(context.Background()); err != nil {
		log.Fatal(err)
	} else {
		log.Print(msg)
	}
}
