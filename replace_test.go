package watukuy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Replace (a config reload) swaps the definitions at once: the cycle running when it lands
// finishes with the definition it started with, the key's next cycle uses the new one, and an
// invalid set changes nothing.
func TestReplaceAppliesFromNextCycle(t *testing.T) {
	b := redistest.Miniredis(t)
	e := newEnv(t, b)
	e.api.Put("a", map[string]any{"n": 1})
	var mu sync.Mutex
	var handled []string
	handler := func(def string) watukuytype.Handler {
		return func(_ context.Context, ev watukuytype.Event) error {
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, def+":"+ev.Identity)
			return nil
		}
	}
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	feed := e.api.ChangeFeed(10)
	eng := e.engine(e.poller(func(p *watukuytype.Poller) {
		p.Handler = handler("old")
		p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			once.Do(func() { close(started); <-release })
			return feed(ctx, req)
		}
	}), nil)
	ctx := context.Background()
	if err := eng.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan watukuytype.CycleReport, 1)
	go func() { done <- eng.RunCycle(ctx, watukuytype.Key{Poller: "orders"}) }()
	<-started // the cycle is in its first request
	if err := eng.Replace(nil, e.poller(func(p *watukuytype.Poller) { p.Handler = handler("new") })); err != nil {
		t.Fatal(err)
	}
	err := eng.Replace(nil, e.poller(func(p *watukuytype.Poller) { p.Handler = handler("refused") }), e.poller(func(p *watukuytype.Poller) { p.Name, p.Fetch = "other", nil }))
	var ce *watukuytype.ConfigError
	if !errors.As(err, &ce) || ce.Poller != "other" || ce.Field != "fetch" {
		t.Fatalf("an invalid set: %v, want a ConfigError on other's fetch", err)
	}
	close(release)
	if rep := <-done; rep.Err != nil || rep.Delivered != 1 {
		t.Fatalf("the running cycle: %+v", rep)
	}
	e.api.Put("a", map[string]any{"n": 2})
	if err := eng.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
		t.Fatal(err)
	}
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders"}); rep.Err != nil || rep.Delivered != 1 {
		t.Fatalf("the next cycle: %+v", rep)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(handled) != "[old:a new:a]" {
		t.Fatalf("handled by %v, want the running cycle's by the old definition and the next by the new", handled)
	}
}
