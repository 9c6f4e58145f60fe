package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the short scripts of concurrent cycles (begin, end, set_due, renew,
// hold_claim) that meet in time in one pipeline: a round trip for many keys instead of one
// each. A call goes out at once while fewer than maxInFlight pipelines are in flight;
// otherwise it waits, and the calls that waited go out together as soon as a pipeline
// returns, sent by the first of them. So a lone call pays no wait, and under load the
// round trips (the cost of an idle cycle, on both sides) are shared.
//
// The scripts are independent (each on its own key, each atomic), so sending them together
// changes nothing of what each does; a pipeline that fails fails each of its calls as its own
// round trip would.
type batcher struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	pending  []*group
	inFlight int
}

// maxInFlight bounds the pipelines in flight at once; calls beyond wait for one to return.
const maxInFlight = 2

// batchCall is one script of a caller; a caller's calls go in the same pipeline, in order.
type batchCall struct {
	lua  *redis.Script
	keys []string
	argv []any
	cmd  *redis.Cmd
}

// group is one caller's calls and how it is woken: a nil batch when its calls are answered,
// a batch (its own among them) for it to send.
type group struct {
	calls []*batchCall
	wake  chan []*group
}

// run sends calls (in one pipeline with whatever else is waiting) and returns when each has
// its reply in cmd.
func (b *batcher) run(ctx context.Context, calls ...*batchCall) {
	g := &group{calls: calls}
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		b.send(ctx, g, []*group{g})
		return
	}
	g.wake = make(chan []*group, 1)
	b.pending = append(b.pending, g)
	b.mu.Unlock()
	if batch := <-g.wake; batch != nil {
		b.send(ctx, g, batch)
	}
}

// send runs batch in one pipeline on behalf of self, wakes its other groups, then hands the
// groups that queued meanwhile to the first of them to send (or frees its slot). The
// pipeline does not end with self's ctx: it carries other callers' scripts.
func (b *batcher) send(ctx context.Context, self *group, batch []*group) {
	pctx := context.WithoutCancel(ctx)
	_, _ = b.rdb.Pipelined(pctx, func(p redis.Pipeliner) error {
		for _, g := range batch {
			for _, c := range g.calls {
				c.cmd = c.lua.EvalSha(pctx, p, c.keys, c.argv...)
			}
		}
		return nil
	})
	b.mu.Lock()
	next := b.pending
	b.pending = nil
	if len(next) == 0 {
		b.inFlight--
	}
	b.mu.Unlock()
	if len(next) > 0 {
		next[0].wake <- next
	}
	for _, g := range batch {
		if g != self {
			g.wake <- nil
		}
	}
}
