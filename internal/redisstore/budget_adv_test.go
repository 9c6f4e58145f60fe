package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// budget_take.lua adds a fractional interval (µs, three decimals) to the stored tat and
// stores the sum rounded to a whole µs: under saturation every token rounds the same way,
// and an interval of 333.333 µs (3000/s) advances tat by 333 µs, a 0.1% faster rate that
// adds up without bound. With a burst of 1, 3000 tokens taken back to back hold one more
// than the budget allows; at 30,000/s it is 1%, at 700,000/s (1.43 µs → 1 µs) 43%.
func TestBudgetTakeKeepsAFractionalInterval(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, _ := newStore(t, b)
		ctx := context.Background()
		bg := watukuytype.Budget{Name: "shop", Rate: 3000, Per: time.Second, Burst: 1}
		var slots []time.Time
		for range 3000 {
			g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: budget.Interval(bg), Burst: 1, SitOut: time.Hour})
			if err != nil || !g.Taken {
				t.Fatalf("take: %+v, %v", g, err)
			}
			slots = append(slots, g.At.Add(g.Wait))
		}
		if e, from, to := budget.Excess(bg, slots, 0); e > 1e-6 {
			t.Fatalf("3000 slots of a 3000/s budget of burst 1 span %v: %.2f more than it allows in %v", slots[len(slots)-1].Sub(slots[0]), e, to.Sub(from))
		}
	})
}
