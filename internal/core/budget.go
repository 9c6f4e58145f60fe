package core

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/watukuytype"
)

// budgetInfo is a poller's budget in its registry entry, so that Inspect shows the budget's
// state with the Redis URL alone.
type budgetInfo struct {
	Name  string  `json:"name"`
	Rate  float64 `json:"rate"`
	PerMs int64   `json:"perMs"`
	Burst int     `json:"burst"`
}

func (bi *budgetInfo) budget() watukuytype.Budget {
	return watukuytype.Budget{Name: bi.Name, Rate: bi.Rate, Per: time.Duration(bi.PerMs) * time.Millisecond, Burst: bi.Burst}
}

func budgetsByName(bs []watukuytype.Budget) (map[string]watukuytype.Budget, error) {
	m := make(map[string]watukuytype.Budget, len(bs))
	for _, b := range bs {
		b, err := budget.WithDefaults(b)
		if err != nil {
			return nil, err
		}
		if _, dup := m[b.Name]; dup {
			return nil, &watukuytype.ConfigError{Field: "budgets.name", Msg: fmt.Sprintf("budget %q is defined twice", b.Name)}
		}
		m[b.Name] = b
	}
	return m, nil
}

// checkBudgetName: a poller's budget must be one of the engine's.
func checkBudgetName(budgets map[string]watukuytype.Budget, p *watukuytype.Poller) error {
	if _, ok := budgets[p.Budget]; p.Budget != "" && !ok {
		return &watukuytype.ConfigError{Poller: p.Name, Field: "budget", Msg: fmt.Sprintf("names budget %q, which is not defined (defined: %v)",
			p.Budget, slices.Sorted(maps.Keys(budgets)))}
	}
	return nil
}

// budgetOf is the budget the poller's requests draw from (nil: none, or no definition: an
// operation run from the registry alone sends no request); the caller holds e.mu.
func (e *Engine) budgetOf(p *watukuytype.Poller) *budgetInfo {
	if p == nil {
		return nil
	}
	b, ok := e.budgets[p.Budget]
	if p.Budget == "" || !ok {
		return nil
	}
	return &budgetInfo{Name: b.Name, Rate: b.Rate, PerMs: b.Per.Milliseconds(), Burst: b.Burst}
}

// takeToken takes the token of a lane's next request from the key's budget. A wait up to
// what is left of longestInCycleWait is sat out here (the live lane's slot kept meanwhile; a
// lower lane asks again after it), and a bucket paused meanwhile is asked again before the
// request goes. A longer wait is returned: the lane stops, and the key is due again when the
// budget can serve it. The live lane holds its token even then (up to longestHold ahead, in
// the bucket under the key), so a key that yields keeps its place in the budget's queue: its
// next ask gets that token back (fairness). err is the wait's (a yield) or the store's.
func (c *cycle) takeToken(ctx context.Context, lane watukuytype.Lane) (defer_ time.Duration, err error) {
	if c.budget == nil {
		return 0, nil
	}
	b := c.budget.budget()
	t := BudgetTake{Bucket: c.bucket, Key: c.key, Interval: budget.Interval(b), Burst: b.Burst, Reserve: budget.Reserve(lane, b.Burst)}
	if lane == watukuytype.LaneLive {
		t.Hold = longestHold
	}
	var waited time.Duration
	for {
		left := max(longestInCycleWait-waited, 0)
		t.SitOut = left
		g, err := c.e.store.TakeToken(ctx, t)
		if err != nil {
			return 0, keyErr("watukuy: take a token of budget "+c.bucket, c.key, err)
		}
		if g.Wait > left {
			// Too long to sit out: yield the worker. A held token is kept for the key, which
			// comes back a little before its slot, to sit out the rest.
			c.budgetEvent(b.Name, lane, g.Wait, false)
			d := g.Wait
			if g.Taken {
				d = max(g.Wait-longestInCycleWait, time.Millisecond)
			}
			c.defer_(lane, d)
			return d, nil
		}
		if g.Taken {
			c.budgetEvent(b.Name, lane, waited+g.Wait, true)
		}
		// At least a millisecond between two asks of a lower lane: a bucket that others keep
		// at its reserve answers with waits of microseconds.
		d := g.Wait
		if !g.Taken {
			d = max(d, time.Millisecond)
		}
		if d > 0 {
			if err := c.wait(ctx, d); err != nil {
				return 0, err
			}
			waited += d
		}
		if !g.Taken {
			continue
		}
		if d > 0 {
			// A 429 of another key may have paused the budget while this one sat out its
			// wait: the token is then spent, and the key waits for the pause's end.
			bs, now, err := c.e.store.Buckets(ctx, []string{c.bucket})
			if err != nil {
				return 0, keyErr("watukuy: read budget "+c.bucket, c.key, err)
			}
			if p := bs[c.bucket].PausedUntil; p.After(now) {
				c.budgetEvent(b.Name, lane, p.Sub(now), false)
				c.defer_(lane, p.Sub(now))
				return p.Sub(now), nil
			}
		}
		return 0, nil
	}
}

// defer_ records that the budget made a lane of the key wait d: the live lane's wait paces the
// key; a lower lane's only brings its own lane back (the backfill's next slice).
func (c *cycle) defer_(lane watukuytype.Lane, d time.Duration) {
	if lane == watukuytype.LaneLive {
		c.deferred = max(c.deferred, d)
	} else {
		c.lowerDeferred = max(c.lowerDeferred, d)
	}
}

// longestHold is how far ahead the live lane holds a token it cannot sit out.
const longestHold = 10 * time.Minute

func (c *cycle) budgetEvent(name string, lane watukuytype.Lane, wait time.Duration, taken bool) {
	if h := c.e.hooks.OnBudget; h != nil {
		h(c.key, name, lane, wait, taken)
	}
	if !taken {
		c.logger().Debug().Str("budget", c.bucket).Str("lane", string(lane)).Dur("wait", wait).Msg("budget has no token: the key yields")
	}
}

// pauseBudget holds back every key of the key's budget for d: the API answered 429, or said
// no request remains until its reset. It is the account's limit, not only this key's.
func (c *cycle) pauseBudget(ctx context.Context, d time.Duration) error {
	if c.budget == nil || d <= 0 {
		return nil
	}
	until, err := c.e.store.PauseBudget(ctx, c.bucket, d)
	if err != nil {
		return keyErr("watukuy: pause budget "+c.bucket, c.key, err)
	}
	c.logger().Info().Str("budget", c.bucket).Time("until", until).Msg("budget paused: the API asked every key of it to wait")
	return nil
}

// budgetPause is how long a throttling answer pauses the budget: its Retry-After, else the
// reset its rate-limit headers give, else a second.
func budgetPause(retryAfter time.Duration, rl *watukuytype.RateLimit) time.Duration {
	switch {
	case retryAfter > 0:
		return retryAfter
	case rl != nil && rl.Reset > 0:
		return rl.Reset
	}
	return time.Second
}

// Budgets shows every bucket of the budgets of the known pollers (registered here or in the
// registry), with the keys that draw from each, reading the registry a page at a time and the
// buckets in one read.
func (e *Engine) Budgets(ctx context.Context) ([]watukuytype.BudgetInfo, error) {
	byBucket := map[string]*watukuytype.BudgetInfo{}
	err := e.eachTarget(ctx, "", func(t target) error {
		bi := t.info.Budget
		if bi == nil {
			return nil
		}
		name := budget.Bucket(bi.Name, t.key.Partition)
		if byBucket[name] == nil {
			byBucket[name] = &watukuytype.BudgetInfo{Budget: bi.budget(), Bucket: name}
		}
		byBucket[name].Keys = append(byBucket[name].Keys, t.key)
		return nil
	})
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(byBucket))
	if len(names) == 0 {
		return nil, nil
	}
	stored, now, err := e.store.Buckets(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("watukuy: read budgets: %w", err)
	}
	out := make([]watukuytype.BudgetInfo, 0, len(names))
	for _, n := range names {
		info := byBucket[n]
		st := stored[n]
		info.Tokens = budget.Tokens(info.Budget, st.TAT, now)
		if st.PausedUntil.After(now) {
			info.PausedUntil = st.PausedUntil
			info.Tokens = 0
		}
		out = append(out, *info)
	}
	slices.SortFunc(out, func(a, b watukuytype.BudgetInfo) int { return cmp.Compare(a.Bucket, b.Bucket) })
	return out, nil
}
