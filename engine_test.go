package watukuy

import (
	"fmt"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

func TestEndToEndChangeFeed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		for i := 0; i < 25; i++ {
			e.api.Put(fmt.Sprintf("o%02d", i), map[string]any{"total": i})
		}
		eng := e.engine(e.poller(), nil)
		rep := e.tick(eng)
		if rep.Ran != 1 || rep.Events != 25 || rep.Delivered != 25 {
			t.Fatalf("first tick: %+v", rep)
		}
		e.api.Put("o03", map[string]any{"total": 99})
		e.settle(eng)
		evs := e.rec.events()
		if len(evs) != 26 || evs[25].Type != Updated || evs[25].Identity != "o03" || evs[25].Version != "2" {
			t.Fatalf("got %d events, last %+v", len(evs), evs[len(evs)-1])
		}
		ki, err := eng.Inspect(t.Context(), "orders", "")
		if err != nil {
			t.Fatal(err)
		}
		if ki.Items != 25 || ki.OutboxPending != 0 || ki.Cursor == "" || ki.Status != "idle" {
			t.Fatalf("inspect: %+v", ki)
		}
	})
}
