package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
)

// dataIDKey holds the database's data id: a random id recorded once, next to the layout
// marker, by the first process whose data watcher finds the layout without one. A process
// that saw one id and then finds none, or another, knows that Redis lost its data (the data
// watcher, core.DataWatch). Nothing but a data loss removes it.
func (s *Store) dataIDKey() string { return s.prefix + ":{global}:data-id" }

// DataMarks implements core.DataStore: one pipelined round trip (every key is under {global},
// one slot on a cluster). The registry is not read: it is absent while every key is a config
// key (listed in its poller's entry), which is no loss.
func (s *Store) DataMarks(ctx context.Context) (core.DataMarks, error) {
	var id *redis.StringCmd
	names := []string{s.layoutKey(), s.pollersKey()}
	exists := make([]*redis.IntCmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		id = p.Get(ctx, s.dataIDKey())
		for i, n := range names {
			exists[i] = p.Exists(ctx, n)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return core.DataMarks{}, err
	}
	m := core.DataMarks{ID: id.Val()}
	if m.ID == "" {
		m.Missing = append(m.Missing, s.dataIDKey())
	}
	for i, present := range []*bool{&m.Layout, &m.Pollers} {
		*present = exists[i].Val() > 0
		if !*present {
			m.Missing = append(m.Missing, names[i])
		}
	}
	return m, nil
}

// MintDataID implements core.DataStore: SETNX and GET in one transaction.
func (s *Store) MintDataID(ctx context.Context, id string) (string, error) {
	var got *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, s.dataIDKey(), id, 0)
		got = p.Get(ctx, s.dataIDKey())
		return nil
	})
	if err != nil {
		return "", err
	}
	return got.Val(), nil
}

// Wake implements core.DataStore: a message on the schedulers' wake channel.
func (s *Store) Wake(ctx context.Context) error {
	return s.rdb.Publish(ctx, s.WakeChannel(), "").Err()
}
