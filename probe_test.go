package watukuy_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytype"
)

// Probe looks at the page after the first when more follow: five items in one second with
// a limit of three stall the cursor there, which Probe reports in Stall (the first page alone
// is fine); with the API's tie-breaker the cursor moves on and Stall stays empty. Fields
// names the first item's top-level fields, for an identity path that matches nothing.
func TestProbeSeesTheCursorStallAfterTheFirstPage(t *testing.T) {
	t.Parallel()
	api := fakeapi.New()
	api.PutMany(5, "w", map[string]any{"price": 1})
	for _, tc := range []struct {
		name       string
		tieBreaker bool
		wantStall  string
	}{
		{name: "no tie-breaker", wantStall: "a full page of 3 items all at 2026-01-01T00:00:00Z and no tie-breaker parameter is set"},
		{name: "tie-breaker", tieBreaker: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: tc.tieBreaker})
			defer srv.Close()
			ts := &httppoll.TimestampCursor{Source: httppoll.Source{URL: srv.URL + "/items", Items: "data"},
				Field: "updated_at", Param: "updated_since", LimitParam: "limit", Limit: 3}
			if tc.tieBreaker {
				ts.TieBreaker = "after_id"
			}
			p := watukuytype.Poller{Name: "widgets", Fetch: ts.Fetch, Identity: watukuytype.Field("sku"), Version: watukuytype.Field("version"),
				Handler: func(context.Context, watukuytype.Event) error { return nil }}
			res, err := watukuy.Probe(t.Context(), p, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Items) != 3 || res.Invalid != 3 || !res.HasMore {
				t.Fatalf("probe: %+v", res)
			}
			if !strings.Contains(res.Stall, tc.wantStall) || (tc.wantStall == "") != (res.Stall == "") {
				t.Errorf("Stall = %q; want %q", res.Stall, tc.wantStall)
			}
			if want := []string{"id", "price", "updated_at", "updated_seq", "version"}; !slices.Equal(res.Fields, want) {
				t.Errorf("Fields = %v; want %v", res.Fields, want)
			}
		})
	}
}
