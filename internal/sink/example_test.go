package sink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// A receiver checks the official Standard Webhooks test vector, then a tampered body.
func ExampleVerify() {
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	now := time.Unix(1614265330, 0)

	fmt.Println(sink.Verify(secrets, h, []byte(`{"test": 2432232314}`), now, 5*time.Minute))
	fmt.Println(sink.Verify(secrets, h, []byte(`{"test": 1}`), now, 5*time.Minute))
	// Output:
	// <nil>
	// sink: webhook: no matching signature for message msg_p5jXN8AQM9LWM0D4loKWxJek
}

func ExampleSign() {
	sig, err := sink.Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		"msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	fmt.Println(sig, err)
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= <nil>
}

// A webhook sink delivers to a receiver that verifies every request.
func ExampleWebhook() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := sink.Verify([]string{secret}, r.Header, body, time.Now(), 0); err != nil {
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
