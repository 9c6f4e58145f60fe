package sink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

// A webhook sink delivers to a receiver that verifies every request.
func ExampleWebhook() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, _ := webhook.NewVerifier([]string{secret}, webhook.Options{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := verifier.VerifyRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ev watukuytype.Event
		_ = json.Unmarshal(body, &ev)
		fmt.Println("received", r.Header.Get("webhook-id"), ev.Type, ev.Identity)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	wh, err := sink.NewWebhook(sink.Webhook{URL: receiver.URL + "/hooks", Secrets: []string{secret}})
	if err != nil {
		fmt.Println(err)
		return
	}
	var handler watukuytype.Handler = wh.Handle
	err = handler(context.Background(), watukuytype.Event{ID: "ev_1", Poller: "orders", Type: watukuytype.Created,
		Lane: "live", Identity: "A-1", Item: json.RawMessage(`{"id":"A-1"}`)})
	fmt.Println("acked:", err == nil)
	// Output:
	// received ev_1 created A-1
	// acked: true
}

// Stdout with no writer prints NDJSON to os.Stdout.
func ExampleStdout() {
	s := &sink.Stdout{}
	_ = s.Handle(context.Background(), watukuytype.Event{ID: "ev_1", Poller: "orders", Type: watukuytype.Deleted,
		Lane: "reconcile", Identity: "A-1", ObservedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	// Output:
	// {"id":"ev_1","poller":"orders","partition":"","type":"deleted","lane":"reconcile","identity":"A-1","observedAt":"2026-01-02T03:04:05Z","schemaVersion":0}
}
