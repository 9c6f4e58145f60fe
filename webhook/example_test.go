package webhook_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/watukuy/watukuy/webhook"
)

// A receiver checks the official Standard Webhooks test vector, then a tampered body.
func ExampleVerifier_Verify() {
	v, err := webhook.NewVerifier([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, webhook.Options{
		Now: func() time.Time { return time.Unix(1614265330, 0) }, // the vector's time; omit for time.Now
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")

	fmt.Println(v.Verify(h, []byte(`{"test": 2432232314}`)))
	fmt.Println(v.Verify(h, []byte(`{"test": 1}`)))
	// Output:
	// <nil>
	// webhook: no matching signature for message msg_p5jXN8AQM9LWM0D4loKWxJek
}

// During a rotation the sender signs with the old and the new secret; a receiver that knows
// either one accepts the message.
func ExampleSign() {
	oldSecret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSecret := "whsec_c2Vjb25kLXNlY3JldC1rZXktMjQtYnl0ZXM="
	body := []byte(`{"test": 2432232314}`)
	sig, err := webhook.Sign([]string{oldSecret, newSecret}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Fields(sig)[0])

	h := http.Header{}
	h.Set(webhook.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(webhook.HeaderTimestamp, "1614265330")
	h.Set(webhook.HeaderSignature, sig)
	clock := webhook.Options{Now: func() time.Time { return time.Unix(1614265330, 0) }}
	for _, secret := range []string{oldSecret, newSecret} {
		v, _ := webhook.NewVerifier([]string{secret}, clock)
		fmt.Println(v.Verify(h, body))
	}
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// <nil>
	// <nil>
}

// An HTTP receiver: Middleware lets only verified requests through, and the handler decodes
// the watukuy event envelope. Deduplicate by the event id, since delivery is at least once.
func ExampleVerifier_Middleware() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	v, err := webhook.NewVerifier([]string{secret}, webhook.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The envelope's JSON fields; version and seq are absent when empty, item when the
	// event has none.
	type event struct {
		ID            string          `json:"id"`
		Poller        string          `json:"poller"`
		Partition     string          `json:"partition"`
		Type          string          `json:"type"` // created, updated or deleted
		Lane          string          `json:"lane"` // live, reconcile or backfill
		Identity      string          `json:"identity"`
		Version       string          `json:"version"`
		Seq           string          `json:"seq"`
		ObservedAt    time.Time       `json:"observedAt"`
		SchemaVersion int             `json:"schemaVersion"`
		Item          json.RawMessage `json:"item"`
	}
	receiver := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, "not a watukuy event: "+err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Println("received", ev.ID, ev.Poller, ev.Type, ev.Identity, string(ev.Item))
		w.WriteHeader(http.StatusNoContent)
	}))

	// What watukuy's webhook sink sends, and the same body tampered with.
	body := `{"id":"ev_1","poller":"orders","partition":"","type":"created","lane":"live",` +
		`"identity":"A-1","observedAt":"2026-01-02T03:04:05Z","schemaVersion":0,"item":{"id":"A-1"}}`
	now := time.Now().Unix()
	sig, _ := webhook.Sign([]string{secret}, "ev_1", now, []byte(body))
	for _, b := range []string{body, strings.Replace(body, "A-1", "A-2", 1)} {
		req := httptest.NewRequest(http.MethodPost, "/hooks/watukuy", strings.NewReader(b))
		req.Header.Set(webhook.HeaderID, "ev_1")
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now, 10))
		req.Header.Set(webhook.HeaderSignature, sig)
		rec := httptest.NewRecorder()
		receiver.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// received ev_1 orders created A-1 {"id":"A-1"}
	// 204
	// 401
}
