package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
)

// A tick that parks every item it reads as invalid (a wrong identity path) shows the parked
// counts, says what to do and exits 1; `parked retry --all --kind invalid` with the fixed
// config recovers every item without a list of ids.
func TestTickEveryItemInvalid(t *testing.T) {
	b := redistest.Real(t)
	api := fakeapi.New()
	api.PutMany(3, "w", map[string]any{"price": 1})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	config := func(identity string) string {
		return writeConfig(t, fmt.Sprintf(`pollers:
  - name: widgets
    request: {url: %s/items}
    items: data
    identity: %s
    version: version
    cursor: {strategy: timestamp, param: updated_since, field: updated_at}
    delivery: {stdout: {}}
`, srv.URL, identity))
	}
	out, _, err := run(t, "tick", "--config", config("sku"), "--redis", b.URL)
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(err.Error(), "every item read (3) was parked as invalid") {
		t.Fatalf("tick that parked every item: exit %d, %v\n%s", command.ExitCode(err), err, out)
	}
	for _, want := range []string{"items 3  events 0  delivered 0  parked 0  invalid 3  errors 0",
		"parked ls --poller widgets --kind invalid", "parked retry --poller widgets --all --kind invalid"} {
		if !strings.Contains(out, want) {
			t.Errorf("the tick report does not say %q:\n%s", want, out)
		}
	}
	out, _, err = run(t, "parked", "retry", "--poller", "widgets", "--all", "--kind", "invalid", "--config", config("id"), "--redis", b.URL)
	if err != nil || !strings.Contains(out, "retried 3 parked row(s) of widgets") {
		t.Fatalf("parked retry --all --kind invalid: %v\n%s", err, out)
	}
	if n := b.Client.HLen(t.Context(), "wk:{widgets|}:items").Val(); n != 3 {
		t.Fatalf("%d items stored after the retry, want 3", n)
	}
}

// A tick whose every event is parked as poison (a receiver that refuses every event, with no
// retry across cycles) says so and exits 1, although no cycle failed; a receiver that fails as
// a whole (5xx on every event) blocks the key's delivery instead, which inspect shows, and
// parks nothing.
func TestTickEveryEventPoison(t *testing.T) {
	b := redistest.Real(t)
	api := fakeapi.New()
	api.PutMany(2, "o", nil)
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	status := http.StatusBadRequest
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "receiver refuses", status)
	}))
	defer receiver.Close()
	config := func(poller string) string {
		return writeConfig(t, fmt.Sprintf(`pollers:
  - name: %s
    request: {url: %s/items}
    items: data
    version: version
    cursor: {strategy: timestamp, param: updated_since, field: updated_at}
    delivery:
      attempts: 1
      retry: {horizon: none}
      webhook: {url: %s, secret: whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=}
`, poller, srv.URL, receiver.URL))
	}
	cfg := config("orders")
	out, _, err := run(t, "tick", "--config", cfg, "--redis", b.URL)
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(err.Error(), "no event was delivered: 2 events parked as poison") {
		t.Fatalf("tick that parked every event: exit %d, %v\n%s", command.ExitCode(err), err, out)
	}
	if !strings.Contains(out, "events 2  delivered 0  parked 2  invalid 0  errors 0") || !strings.Contains(out, "parked retry --poller orders --all --kind poison") {
		t.Fatalf("the tick report:\n%s", out)
	}

	status = http.StatusServiceUnavailable
	cfg = config("invoices")
	out, _, err = run(t, "tick", "--config", cfg, "--redis", b.URL)
	if err != nil || !strings.Contains(out, "parked 0") {
		t.Fatalf("tick against a receiver that is down: %v\n%s", err, out)
	}
	out, _, err = run(t, "inspect", "--poller", "invoices", "--config", cfg, "--redis", b.URL)
	if err != nil || !strings.Contains(out, "blocked") {
		t.Fatalf("inspect of a blocked key: %v\n%s", err, out)
	}
	out, _, err = run(t, "inspect", "--poller", "invoices", "--partition", "", "--config", cfg, "--redis", b.URL)
	if err != nil || !strings.Contains(out, "blocked since") || !strings.Contains(out, "HTTP 503") {
		t.Fatalf("inspect of a blocked key in detail: %v\n%s", err, out)
	}
}
