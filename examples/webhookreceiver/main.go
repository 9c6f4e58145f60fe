// Command webhookreceiver receives watukuy webhooks, verifies each with package webhook and
// prints the event. Point a watukuy webhook sink at http://<addr>/hooks/watukuy with the same
// secret:
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/webhookreceiver -addr 127.0.0.1:8080
//
// The secrets are space-separated; during a rotation give the old and the new one. A verified
// event is answered 204; a forged, tampered or stale request 401 and an event the program
// fails to handle 500, so the sink retries. Delivery is at least once: a real receiver
// deduplicates by the event id. The program imports only the standard library and the public
// packages webhook and watukuytype, so it can be copied into a module of your own.
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

	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	show := func(_ context.Context, ev watukuytype.Event) error {
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
func newHandler(secrets []string, handle func(context.Context, watukuytype.Event) error) (http.Handler, error) {
	v, err := webhook.NewVerifier(secrets, webhook.Options{})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/watukuy", v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev watukuytype.Event
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
