package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A migration step plugs into the store's steps: migrate runs it from the layout it starts
// at, records the next layout, says what it did, and runs nothing the second time; a step
// that fails leaves the layout where it was, so migrate runs it again. The step here is
// synthetic (layout 1 is the first): it adds a field to every poller's description.
func TestMigrateRunsAPluggedStep(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		if _, err := s.Migrate(ctx); err != nil { // an empty database: recorded as layout 1
			t.Fatal(err)
		}
		registerListing(t, s, "a")
		fail := true
		s.steps = []Step{{From: 1, Run: func(ctx context.Context, s *Store) (string, error) {
			if fail {
				return "", errors.New("interrupted")
			}
			return "described every poller again", s.rdb.HSet(ctx, s.pollersKey(), "orders", `{"poller":"orders","v":2}`).Err()
		}}}
		if l, err := s.Layout(ctx); err != nil || l.Version != 1 || l.Current != 2 || l.Err() == nil {
			t.Fatalf("layout before the step: %+v, %v; want 1 of 2, refused", l, err)
		}
		if _, err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "migrate 1→2") {
			t.Fatalf("a failing step: %v", err)
		}
		if l, _ := s.Layout(ctx); l.Version != 1 {
			t.Fatalf("after a failed step the layout is %d", l.Version)
		}
		fail = false
		m, err := s.Migrate(ctx)
		if err != nil || m.From != 1 || m.To != 2 || len(m.Steps) != 1 || !strings.Contains(m.Steps[0], "described every poller again") {
			t.Fatalf("migrate: %+v, %v", m, err)
		}
		if got := b.Client.HGet(ctx, s.pollersKey(), "orders").Val(); !strings.Contains(got, `"v":2`) {
			t.Fatalf("the step's write: %q", got)
		}
		if m, err := s.Migrate(ctx); err != nil || m.From != 2 || m.To != 2 || len(m.Steps) != 0 {
			t.Fatalf("migrate again: %+v, %v", m, err)
		}
		var le *watukuytype.LayoutError
		if err := b.Client.Set(ctx, s.layoutKey(), "3", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx); !errors.As(err, &le) || le.Found != 3 || le.Known != 2 {
			t.Fatalf("migrate of a newer layout: %v", err)
		}
	})
}
