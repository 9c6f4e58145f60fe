package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// watcher records what run prints and closes seen once every one of want has been printed.
type watcher struct {
	mu   sync.Mutex
	out  strings.Builder
	want []string
	seen chan struct{}
}

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(p)
	if w.want == nil {
		return len(p), nil
	}
	for _, s := range w.want {
		if !strings.Contains(w.out.String(), s) {
			return len(p), nil
		}
	}
	w.want = nil
	close(w.seen)
	return len(p), nil
}

// The quickstart delivers the shop's first orders and customers as created events, then
// stops cleanly when its context ends.
func TestQuickstartPrintsEvents(t *testing.T) {
	w := &watcher{
		// The first cycle of each poller reports the five seeded items as created.
		want: []string{"orders    created  ord-001  v1", "customers created  cus-005  v1"},
		seen: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, w) }()
	select {
	case <-w.seen:
	case err := <-done:
		t.Fatalf("run returned %v before printing the events", err)
	case <-time.After(30 * time.Second):
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("no created events for both pollers after 30s; printed:\n%s", w.out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after cancel = %v", err)
	}
}

// Logs to a pipe carry no colour codes, nor with NO_COLOR set.
func TestLogsPlainOffTerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if !plain(w) {
		t.Error("colours on a pipe")
	}
	t.Setenv("NO_COLOR", "1")
	if !plain(os.Stdin) || !plain(w) {
		t.Error("colours with NO_COLOR set")
	}
}
