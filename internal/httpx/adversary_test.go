package httpx

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// TestAdversaryG8GuardDisarmedByAnotherRequest: the lease check on the connection's write
// (guard.go) is armed per request and disarmed when Do returns, on the connection the request
// used. A response without a body (a 304, the idle lane's usual answer) hands the connection
// back to the pool BEFORE Do returns; another key's request B can take it and arm its own
// check, and then A's disarm clears B's. B, frozen between its own check in Do and the write
// (past its lease), then sends its request: the guard that stops exactly that (hole 6, G8) is
// off.
func TestAdversaryG8GuardDisarmedByAnotherRequest(t *testing.T) {
	var hitsB atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		hitsB.Add(1)
		_, _ = w.Write([]byte(`[]`))
	}))
	defer srv.Close()
	lost := errors.New("lease of key B lost")

	// B: its lease is gone from the moment it holds a connection (a freeze after Do's check).
	var frozen atomic.Bool
	bGot, aDone := make(chan struct{}), make(chan struct{})
	bCtx := watukuytype.WithLeaseCheck(context.Background(), func() error {
		if frozen.Load() {
			return lost
		}
		return nil
	})
	var once sync.Once
	bCtx = httptrace.WithClientTrace(bCtx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		frozen.Store(true)
		once.Do(func() { close(bGot) })
		select { // B is frozen until A's Do has returned
		case <-aDone:
		case <-time.After(5 * time.Second):
		}
	}})
	bErr := make(chan error, 1)

	// A: a 304 on a keep-alive connection; B starts as A's connection goes back to the pool.
	var started atomic.Bool
	aCtx := watukuytype.WithLeaseCheck(context.Background(), func() error { return nil })
	aCtx = httptrace.WithClientTrace(aCtx, &httptrace.ClientTrace{PutIdleConn: func(err error) {
		if err != nil || !started.CompareAndSwap(false, true) {
			return
		}
		go func() {
			_, err := (&Client{}).Do(bCtx, Request{Key: watukuytype.Key{Poller: "b"}, URL: srv.URL + "/b"})
			bErr <- err
		}()
		select { // B took the connection A just gave back
		case <-bGot:
		case <-time.After(5 * time.Second):
		}
	}})
	resp, err := (&Client{}).Do(aCtx, Request{Key: watukuytype.Key{Poller: "a"}, URL: srv.URL + "/a"})
	if err != nil || !resp.NotModified {
		t.Fatalf("A: %v %+v", err, resp)
	}
	close(aDone)
	if !started.Load() {
		t.Fatal("A's connection never went back to the pool: the setup did nothing")
	}
	err = <-bErr
	if !errors.Is(err, lost) || hitsB.Load() > 0 {
		t.Fatalf("G8: B's request was written after its lease check failed (err %v, the API got %d requests of B)", err, hitsB.Load())
	}
}

// TestAdversaryG8RetryAfterDateReadWithTheLocalClock: an HTTP-date Retry-After names a moment
// on the API's clock (its Date header says what that clock read). The helper subtracts the
// worker's own clock instead: a worker whose clock runs 2 minutes ahead of the API's reads
// "retry in 60 s" as "retry now", no window is saved, and the next request lands inside it.
func TestAdversaryG8RetryAfterDateReadWithTheLocalClock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UTC() // the API's clock
		w.Header().Set("Date", now.Format(http.TimeFormat))
		w.Header().Set("Retry-After", now.Add(60*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) } // the worker's clock
	_, err := (&Client{Now: ahead}).Do(context.Background(), Request{URL: srv.URL})
	var he *watukuytype.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("Do: %v", err)
	}
	if he.RetryAfter < 50*time.Second {
		t.Fatalf("G8: the API asked for 60 s (Retry-After date vs its Date header); the helper saved a window of %v", he.RetryAfter)
	}
}
