package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
)

// CurrentLayout is the data layout this build writes:
//
//	1  (unrecorded) every registry entry held its poller's whole definition summary
//	2  pollers are described once in prefix:{global}:pollers; registry entries name only
//	   where a key comes from (config or cli); the layout version is recorded
const CurrentLayout = 2

// Layout implements core.Store. Data without a recorded version is layout 1.
func (s *Store) Layout(ctx context.Context) (core.Layout, error) {
	l := core.Layout{Current: CurrentLayout}
	v, err := s.rdb.Get(ctx, s.layoutKey()).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return l, err
	default:
		if l.Version, err = strconv.Atoi(v); err != nil {
			return l, fmt.Errorf("redisstore: %s holds %q, not a layout version", s.layoutKey(), v)
		}
		return l, nil
	}
	// Cluster clients route EXISTS per slot; the global keys share one.
	n, err := s.rdb.Exists(ctx, s.registryKey(), s.dueKey(), s.pollersKey()).Result()
	if err != nil {
		return l, err
	}
	if n == 0 {
		l.Empty = true
	} else {
		l.Version = 1
	}
	return l, nil
}

// Migrate implements core.Store. Each step is idempotent on its own, so a migration that was
// interrupted simply runs again.
func (s *Store) Migrate(ctx context.Context) (core.Migration, error) {
	l, err := s.Layout(ctx)
	if err != nil {
		return core.Migration{}, err
	}
	m := core.Migration{From: l.Version, To: l.Version, Steps: []string{}}
	if l.Version > CurrentLayout {
		return m, &core.LayoutError{Found: l.Version, Known: CurrentLayout}
	}
	if l.Version == CurrentLayout {
		return m, nil
	}
	if !l.Empty && l.Version < 2 {
		n, err := s.splitRegistry(ctx)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate 1→2: %w", err)
		}
		m.Steps = append(m.Steps, fmt.Sprintf("1→2: described %d poller(s) once in %s; reduced the registry entries to their source", n, s.pollersKey()))
	}
	if err := s.rdb.Set(ctx, s.layoutKey(), CurrentLayout, 0).Err(); err != nil {
		return m, err
	}
	if l.Empty {
		m.Steps = append(m.Steps, fmt.Sprintf("empty database: recorded layout %d", CurrentLayout))
	}
	m.To = CurrentLayout
	return m, nil
}

// splitRegistry moves the poller summaries of layout-1 registry entries into the pollers hash
// and leaves {"source":"config"} in their place. It returns the number of pollers described.
func (s *Store) splitRegistry(ctx context.Context) (int, error) {
	all, err := s.rdb.HGetAll(ctx, s.registryKey()).Result()
	if err != nil {
		return 0, err
	}
	pollers := map[string]string{}
	entries := map[string]any{}
	for member, raw := range all {
		var v1 struct {
			Poller string `json:"poller"`
		}
		if json.Unmarshal([]byte(raw), &v1) != nil || v1.Poller == "" {
			continue // already a layout-2 entry
		}
		if _, err := core.ParseKey(member); err != nil {
			return 0, err
		}
		pollers[v1.Poller] = raw
		entries[member] = `{"source":"config"}`
	}
	if len(entries) == 0 {
		return 0, nil
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for name, raw := range pollers {
			p.HSetNX(ctx, s.pollersKey(), name, raw)
		}
		p.HSet(ctx, s.registryKey(), entries)
		return nil
	})
	return len(pollers), err
}
