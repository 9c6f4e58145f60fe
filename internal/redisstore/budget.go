package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
)

// bucketKey is a shared budget's bucket, and heldKey the slots its keys hold. Each bucket has
// a hash tag of its own, so the buckets of a Redis Cluster spread over its nodes.
func (s *Store) bucketKey(name string) string { return s.prefix + ":{budget|" + name + "}:bucket" }

func (s *Store) heldKey(name string) string { return s.prefix + ":{budget|" + name + "}:held-slots" }

// TakeToken implements core.Store.
func (s *Store) TakeToken(ctx context.Context, t core.BudgetTake) (core.BudgetGrant, error) {
	return run(ctx, s, nil, budgetTakeArgs{Now: s.nowArg(), BudgetTake: t})
}

// PauseBudget implements core.Store.
func (s *Store) PauseBudget(ctx context.Context, bucket string, d time.Duration) (time.Time, error) {
	return run(ctx, s, nil, budgetPauseArgs{Now: s.nowArg(), Bucket: bucket, Pause: d})
}

// Buckets implements core.Store.
func (s *Store) Buckets(ctx context.Context, names []string) (map[string]core.Bucket, time.Time, error) {
	cmds := make([]*redis.SliceCmd, len(names))
	var now *redis.TimeCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.clock == nil {
			now = p.Time(ctx)
		}
		for i, n := range names {
			cmds[i] = p.HMGet(ctx, s.bucketKey(n), "tat", "pausedUntil")
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("redisstore: read budgets: %w", err)
	}
	at := time.Time{}
	if now != nil {
		at = now.Val()
	} else {
		at = s.clock()
	}
	out := make(map[string]core.Bucket, len(names))
	for i, n := range names {
		v := cmds[i].Val()
		var b core.Bucket
		if us, err := strconv.ParseInt(str(v[0]), 10, 64); err == nil {
			b.TAT = time.UnixMicro(us)
		}
		if ms, err := strconv.ParseInt(str(v[1]), 10, 64); err == nil && ms > 0 {
			b.PausedUntil = time.UnixMilli(ms)
		}
		out[n] = b
	}
	return out, at, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
