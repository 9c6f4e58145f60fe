package watukuy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Error messages name a key as the CLI flags do (poller "x", partition "y"; no partition for
// the unpartitioned key), never in its Redis form "x|y", and say each thing once: no
// "watukuy: " and no key twice when one error wraps another.
func TestErrorMessagesNameKeysOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	b := redistest.Miniredis(t)
	e := newEnv(t, b)
	failing := func(name string, partitions ...string) watukuytype.Poller {
		return e.poller(func(p *watukuytype.Poller) {
			p.Name, p.Partitions = name, partitions
			p.Fetch = (&httppoll.PageCursor{Source: httppoll.Source{URL: srv.URL + "/items"}, Param: "page"}).Fetch
		})
	}
	eng := e.engine(failing("widgets"), nil)
	for _, p := range []watukuytype.Poller{failing("orders", "eu", "us"), e.poller(func(p *watukuytype.Poller) { p.Name = "customers" })} {
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	page1 := srv.URL + "/items?page=1"
	errOf := func(_ any, err error) error { return err }

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"probe with HTTP 500", errOf(Probe(ctx, failing("widgets"), "")),
			`watukuy: probe poller "widgets": HTTP 500 from ` + page1},
		{"probe of a partition with HTTP 500", errOf(Probe(ctx, failing("orders", "eu"), "eu")),
			`watukuy: probe poller "orders", partition "eu": HTTP 500 from ` + page1},
		{"a cycle's HTTP 500", eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: "us"}).Err,
			`live lane of poller "orders", partition "us" at cursor "": HTTP 500 from ` + page1},
		{"replay unavailable", errOf(eng.Replay(ctx, watukuytype.Key{Poller: "customers", Partition: ""}, time.Time{}, time.Time{})),
			`watukuy: poller "customers": cannot replay: the poller keeps no event log; set log.retention (e.g. 168h) in its config and restart the workers: events committed from then on can be replayed`},
		{"unknown partition", eng.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: "asia"}),
			`watukuy: poller "orders" has no partition "asia"; known: "eu", "us"`},
		{"lease lost", &watukuytype.LeaseLostError{Key: watukuytype.Key{Poller: "orders", Partition: "eu"}, Epoch: 3, Reason: "the lease expired"},
			`watukuy: poller "orders", partition "eu": lease lost (epoch 3): the lease expired`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error")
			}
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("message\n got %s\nwant %s", got, tc.want)
			}
			if strings.Contains(tc.err.Error(), "|") || strings.Count(tc.err.Error(), "watukuy: ") > 1 {
				t.Fatalf("key in its Redis form or a repeated prefix: %s", tc.err)
			}
		})
	}
}
