package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

const (
	secret      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherSecret = "whsec_c2Vjb25kLXNlY3JldC1rZXktMjQtYnl0ZXM="
)

// receiver starts the program's handler and returns its URL and the events it accepted.
func receiver(t *testing.T, secrets ...string) (string, <-chan watukuytype.Event) {
	t.Helper()
	got := make(chan watukuytype.Event, 4)
	h, err := newHandler(secrets, func(_ context.Context, ev watukuytype.Event) error {
		got <- ev
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/hooks/watukuy", got
}

// watukuy's own webhook sink delivers to the receiver, which decodes every field of the
// envelope; a sink signing with a secret the receiver does not know gets 401.
func TestReceiverAcceptsTheWebhookSink(t *testing.T) {
	url, got := receiver(t, secret)
	sent := watukuytype.Event{ID: "ev_0123456789abcdef", Poller: "orders", Partition: "t_42", Type: watukuytype.Updated,
		Lane: "live", Identity: "A-1", Version: "3", Seq: "1764410400000-0",
		ObservedAt: time.Date(2026, 11, 29, 10, 0, 1, 123456789, time.UTC), SchemaVersion: 2,
		Item: json.RawMessage(`{"id":"A-1","status":"paid"}`)}
	wh, err := sink.NewWebhook(sink.Webhook{URL: url, Secrets: []string{otherSecret, secret}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Handle(context.Background(), sent); err != nil {
		t.Fatalf("delivery = %v, want accepted", err)
	}
	ev := <-got
	if !ev.ObservedAt.Equal(sent.ObservedAt) {
		t.Fatalf("observedAt %v, want %v", ev.ObservedAt, sent.ObservedAt)
	}
	ev.ObservedAt = sent.ObservedAt
	if !reflect.DeepEqual(ev, sent) {
		t.Fatalf("decoded event\n got %+v\nwant %+v", ev, sent)
	}

	forger, err := sink.NewWebhook(sink.Webhook{URL: url, Secrets: []string{otherSecret}})
	if err != nil {
		t.Fatal(err)
	}
	var se *sink.StatusError
	if err := forger.Handle(context.Background(), sent); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Fatalf("delivery under an unknown secret = %v, want 401", err)
	}
	if len(got) != 0 {
		t.Fatal("the receiver handled a message it could not verify")
	}
}

func TestReceiverRejects(t *testing.T) {
	url, got := receiver(t, secret)
	body := `{"id":"ev_1","poller":"orders","partition":"","type":"created","lane":"live","identity":"A-1","observedAt":"2026-01-02T03:04:05Z","schemaVersion":0}`
	now := time.Now().Unix()
	cases := []struct {
		name         string
		signed, sent string
		ts           int64
		status       int
	}{
		{"tampered body", body, strings.Replace(body, "A-1", "A-2", 1), now, http.StatusUnauthorized},
		{"stale", body, body, now - int64(webhook.DefaultTolerance/time.Second) - 60, http.StatusUnauthorized},
		{"signed but not an event", `["x"]`, `["x"]`, now, http.StatusBadRequest},
	}
	for _, c := range cases {
		sig, err := webhook.Sign([]string{secret}, "ev_1", c.ts, []byte(c.signed))
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(c.sent))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(webhook.HeaderID, "ev_1")
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(c.ts, 10))
		req.Header.Set(webhook.HeaderSignature, sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
	}
	if len(got) != 0 {
		t.Fatalf("the receiver handled %d rejected requests", len(got))
	}
}
