package redisstore

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the short scripts of concurrent cycles (begin, read_registry, end, set_due,
// renew, hold_claim) that meet in time in one pipeline: a round trip for many keys instead of
// one each. A call goes out at once while fewer than maxInFlight pipelines are in flight;
// otherwise it waits, and the calls that waited go out together as soon as a pipeline
// returns, sent by the first of them. So a lone call pays no wait, and under load the round
// trips (the cost of an idle cycle, on both sides) are shared.
//
// The scripts are independent (each on its own key, each atomic), so sending them together
// changes nothing of what each does; a pipeline that fails fails each of its calls as its own
// round trip would. A call whose context ended before its pipeline was sent is not sent (it
// fails with the context's error), as a call of its own would not be. On a Redis Cluster
// every call goes alone (alone): a pipeline there spans nodes, and a slow node would hold up
// the calls of the others.
type batcher struct {
	rdb   redis.UniversalClient
	alone bool

	mu       sync.Mutex
	pending  []*group
	inFlight int
}

// newBatcher is the batcher of rdb; on a cluster every call goes alone.
func newBatcher(rdb redis.UniversalClient, cluster bool) *batcher {
	return &batcher{rdb: rdb, alone: cluster}
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
	ctx   context.Context
	calls []*batchCall
	wake  chan []*group
}

// run sends calls (in one pipeline with whatever else is waiting) and returns when each has
// its reply in cmd, or its context's error when it ended before they were sent.
func (b *batcher) run(ctx context.Context, calls ...*batchCall) {
	g := &group{ctx: ctx, calls: calls}
	if b.alone {
		b.pipeline([]*group{g})
		return
	}
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		b.send(g, []*group{g})
		return
	}
	g.wake = make(chan []*group, 1)
	b.pending = append(b.pending, g)
	b.mu.Unlock()
	select {
	case batch := <-g.wake:
		if batch != nil {
			b.send(g, batch)
		}
	case <-ctx.Done():
		b.mu.Lock()
		i := slices.Index(b.pending, g)
		if i >= 0 {
			b.pending = slices.Delete(b.pending, i, i+1)
		}
		b.mu.Unlock()
		if i >= 0 {
			g.fail(ctx.Err())
			return
		}
		// Taken into a batch meanwhile: answered by it, or handed it to send.
		if batch := <-g.wake; batch != nil {
			b.send(g, batch)
		}
	}
}

// send runs batch in one pipeline on behalf of self, wakes its other groups, then hands the
// groups that queued meanwhile to the first of them to send (or frees its slot).
func (b *batcher) send(self *group, batch []*group) {
	b.pipeline(batch)
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

// pipeline sends the calls of batch's groups whose context has not ended, in one pipeline;
// the others fail with their context's error. The pipeline itself does not end with any one
// caller's context, since it carries the others' scripts: go-redis' timeouts bound it.
func (b *batcher) pipeline(batch []*group) {
	var live []*group
	var pctx context.Context
	for _, g := range batch {
		if err := g.ctx.Err(); err != nil {
			g.fail(err)
			continue
		}
		live = append(live, g)
		if pctx == nil {
			pctx = context.WithoutCancel(g.ctx) // its values (traces) ride along
		}
	}
	if len(live) == 0 {
		return
	}
	_, _ = b.rdb.Pipelined(pctx, func(p redis.Pipeliner) error {
		for _, g := range live {
			for _, c := range g.calls {
				c.cmd = c.lua.EvalSha(pctx, p, c.keys, c.argv...)
			}
		}
		return nil
	})
}

// fail answers g's calls with err, none of them sent.
func (g *group) fail(err error) {
	for _, c := range g.calls {
		c.cmd = redis.NewCmd(g.ctx)
		c.cmd.SetErr(err)
	}
}
