package watukuy

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// For random mutation histories (creates, updates, deletes, re-creations, clock ties),
// random page sizes and every HTTP cursor strategy, the delivered events reproduce the API's
// final state per identity, and each identity's delivered versions never go backwards.
func TestPropertyDeliveriesReproduceTheAPI(t *testing.T) {
	for _, mk := range []func(testing.TB) redistest.Backend{
		func(tb testing.TB) redistest.Backend { return redistest.Miniredis(tb) },
		func(tb testing.TB) redistest.Backend { return redistest.Real(tb) },
	} {
		b := mk(t)
		t.Run(b.Name, func(t *testing.T) {
			run := 0
			rapid.Check(t, func(rt *rapid.T) {
				run++
				e := newEnv(t, b)
				srv := fakeapi.NewServer(e.api, fakeapi.ServerOptions{TieBreaker: true})
				defer srv.Close()
				strategy := rapid.SampledFrom([]string{"timestamp", "token", "snapshot"}).Draw(rt, "strategy")
				size := rapid.IntRange(1, 7).Draw(rt, "pageSize")
				p := e.poller(func(p *watukuytype.Poller) {
					p.Name = fmt.Sprintf("p%d", run) // fresh keys for every run on the shared Redis
					p.Schedule = watukuytype.Schedule{Min: time.Second, Max: time.Minute}
					switch strategy {
					case "timestamp": // deletes are invisible to a timestamp feed: reconcile finds them
						p.Fetch = timestampCursor(srv, size, true).Fetch
						p.Reconcile = &watukuytype.Reconcile{Every: time.Minute, Fetch: listCursor(srv, size).Fetch}
					case "token":
						p.Fetch = tokenCursor(srv, size).Fetch
						p.Tombstone = watukuytype.Flag("deleted")
					default:
						p.Strategy = watukuytype.SnapshotDiff
						p.Fetch = listCursor(srv, size).Fetch
						p.MaxPagesPerCycle = 1000
					}
				})
				eng := e.engine(p, nil)
				ops := rapid.SliceOfN(rapid.IntRange(0, 99), 1, 60).Draw(rt, "ops")
				for _, op := range ops {
					id := fmt.Sprintf("i%d", op%8)
					switch {
					case op < 50:
						e.api.Put(id, map[string]any{"n": op})
					case op < 65:
						e.api.Delete(id)
					case op < 80:
						e.api.Advance(time.Duration(op%3) * time.Second) // 0s keeps ties
					default:
						e.clock.Advance(2 * time.Minute)
						e.tick(eng)
					}
				}
				e.settle(eng)
				checkFinal(rt, e)
			})
		})
	}
}
