package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

func TestEnvelopeIsJSONMarshal(t *testing.T) {
	t.Parallel()
	ev := testEvent("ev_env")
	got, err := Envelope(ev)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(ev)
	if !bytes.Equal(got, want) {
		t.Fatalf("Envelope = %s, want json.Marshal = %s", got, want)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(got, &fields); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	wantNames := []string{"id", "identity", "item", "lane", "observedAt", "partition", "poller", "schemaVersion", "seq", "type", "version"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("fields %v, want %v", names, wantNames)
	}

	ev.Item = json.RawMessage(`{"a":`)
	if _, err := Envelope(ev); err == nil || !strings.Contains(err.Error(), "ev_env") {
		t.Errorf("invalid item: %v", err)
	}
}

// One event gives the same bytes on every sink.
func TestEnvelopeIdenticalAcrossSinks(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ev := testEvent("ev_same")
		want, err := Envelope(ev)
		if err != nil {
			t.Fatal(err)
		}

		srv, got := receiver(t, http.StatusOK)
		wh := newWebhook(t, Webhook{URL: srv.URL, Secrets: []string{vecSecret}})
		if err := wh.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
		webhookBody := (<-got).body

		st := &Stream{Client: b.Client, Key: "events"}
		if err := st.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
		msgs := b.Client.XRange(ctx, "events", "-", "+").Val()
		if len(msgs) != 1 {
			t.Fatalf("stream has %d entries", len(msgs))
		}
		streamBody := []byte(msgs[0].Values[StreamFieldEvent].(string))

		var buf bytes.Buffer
		if err := (&Stdout{W: &buf}).Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
		line, ok := bytes.CutSuffix(buf.Bytes(), []byte("\n"))
		if !ok || bytes.Contains(line, []byte("\n")) {
			t.Fatalf("stdout wrote %q, want one line", buf.Bytes())
		}

		for name, body := range map[string][]byte{"webhook": webhookBody, "stream": streamBody, "stdout": line} {
			if !bytes.Equal(body, want) {
				t.Errorf("%s sent\n%s\nwant\n%s", name, body, want)
			}
		}
	})
}
