package httppoll

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

	"github.com/watukuy/watukuy/internal/leasectx"
	"github.com/watukuy/watukuy/watukuytype"
)

// The lease check on a connection's write belongs to the request that armed it: a 304 hands the
// connection back before Do returns, and the next request on it, frozen past its lease before
// its write, is still stopped by its own check (G8).
func TestG8GuardNotDisarmedByAnotherRequest(t *testing.T) {
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
	bCtx := leasectx.With(context.Background(), func() error {
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
	aCtx := leasectx.With(context.Background(), func() error { return nil })
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
