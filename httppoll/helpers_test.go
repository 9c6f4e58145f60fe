package httppoll

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/watukuytype"
)

var listKey = watukuytype.Key{Poller: "orders", Partition: "t1"}

// api is an httptest server whose answers a test writes, and which records every request.
type api struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

// newAPI serves handle and records the requests it gets.
func newAPI(t *testing.T, handle http.HandlerFunc) *api {
	t.Helper()
	a := &api{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.reqs = append(a.reqs, r.Clone(context.Background()))
		a.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

// query returns the query of the n-th request (from 0).
func (a *api) query(t *testing.T, n int) url.Values {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if n >= len(a.reqs) {
		t.Fatalf("request %d was never sent (%d sent)", n, len(a.reqs))
	}
	return a.reqs[n].URL.Query()
}

// request returns the n-th request (from 0).
func (a *api) request(t *testing.T, n int) *http.Request {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if n >= len(a.reqs) {
		t.Fatalf("request %d was never sent (%d sent)", n, len(a.reqs))
	}
	return a.reqs[n]
}

func (a *api) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

// ids lists the "id" fields of a page's items.
func ids(p watukuytype.Page) []string {
	out := make([]string, len(p.Items))
	for i, it := range p.Items {
		out[i] = gjson.GetBytes(it, "id").String()
	}
	return out
}
