// Command webhookreceiver receives watukuy webhooks, verifies each with package webhook and
// prints the event. Point a watukuy webhook sink at http://<addr>/hooks/watukuy with the same
// secret:
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/webhookreceiver -addr 127.0.0.1:8080
//
// The secrets are space-separated; during a rotation give the old and the new one. A verified
// event is answered 204; a forged, tampered or stale request 401 and an event the program
// fails to handle 500, so the sink retries. Delivery is at least once: a real receiver
// deduplicates by the event id. The program imports only the standard library and package
// webhook, so it can be copied into a module of your own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/watukuy/watukuy/webhook"
)

// event is the JSON envelope of a watukuy event, as every sink sends it.
type event struct {
	ID            string          `json:"id"` // the same on every retry: the idempotency key
	Poller        string          `json:"poller"`
	Partition     string          `json:"partition"`
	Type          string          `json:"type"` // created, updated or deleted
	Lane          string          `json:"lane"` // live, reconcile or backfill
	Identity      string          `json:"identity"`
	Version       string          `json:"version,omitempty"`
	Seq           string          `json:"seq,omitempty"`
	ObservedAt    time.Time       `json:"observedAt"`
	SchemaVersion int             `json:"schemaVersion"`
	Item          json.RawMessage `json:"item,omitempty"` // the item as the API sent it
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	show := func(_ context.Context, ev event) error {
		fmt.Printf("%s %s %s %s %s\n", ev.ID, ev.Poller, ev.Type, ev.Identity, ev.Item)
		return nil
	}
	h, err := newHandler(strings.Fields(os.Getenv("WEBHOOK_SECRET")), show)
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookreceiver: WEBHOOK_SECRET:", err)
		os.Exit(2)
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "webhookreceiver: listening on http://%s/hooks/watukuy\n", *addr)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "webhookreceiver:", err)
		os.Exit(1)
	}
}

// newHandler serves POST /hooks/watukuy: it verifies each request against the secrets and
// hands the decoded event to handle.
func newHandler(secrets []string, handle func(context.Context, event) error) (http.Handler, error) {
	v, err := webhook.NewVerifier(secrets, webhook.Options{})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/watukuy", v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, "not a watukuy event: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := handle(r.Context(), ev); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	return mux, nil
}
