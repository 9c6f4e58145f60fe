package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/watukuytype"
)

// CurrentLayout is the data layout this build writes (docs/design.md, Redis layout). A
// database records its layout in prefix:{global}:layout; a build refuses any other until
// `watukuy migrate` has run the steps between them.
const CurrentLayout = 1

// Step upgrades a database from layout From to From+1 in place. Run must be idempotent (an
// interrupted migration simply runs again) and must keep every process of layout From that is
// still running correct while it runs: a step only adds (expand); what the older layout alone
// needs goes in a later step, once no process of it runs (contract). The rule is in
// docs/design.md (Changing the layout).
type Step struct {
	From int
	// Run does the step and says what it did, for the operator.
	Run func(ctx context.Context, s *Store) (string, error)
}

// layoutSteps are this build's migration steps, in order: layout 1 is the first release's, so
// there are none yet. A step from layout n to n+1 goes here, with CurrentLayout raised to n+1.
func layoutSteps() []Step { return nil }

// outboxHolder is the one consumer of every outbox group.
const outboxHolder = "holder"

// Layout implements core.Store. A database without a recorded layout is empty when it holds no
// poller description either; one that holds descriptions but no layout is version 0, which no
// build runs on.
func (s *Store) Layout(ctx context.Context) (watukuytype.Layout, error) {
	l := watukuytype.Layout{Current: s.current()}
	// One transaction, so that a process recording the layout and registering its pollers in
	// between cannot make the database look unrecorded. The global keys share one slot.
	var get *redis.StringCmd
	var exists *redis.IntCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.layoutKey())
		exists = p.Exists(ctx, s.pollersKey())
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return l, err
	}
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		l.Empty = exists.Val() == 0
		return l, nil
	case err != nil:
		return l, err
	}
	if l.Version, err = strconv.Atoi(v); err != nil {
		return l, fmt.Errorf("redisstore: %s holds %q, not a layout version", s.layoutKey(), v)
	}
	return l, nil
}

// current is the layout the store's steps lead to.
func (s *Store) current() int {
	if len(s.steps) == 0 {
		return CurrentLayout
	}
	return s.steps[len(s.steps)-1].From + 1
}

// Migrate implements core.Store: the steps from the recorded layout to the current one, each
// recorded as it completes, so that an interrupted migration resumes where it stopped. An
// empty database is marked current.
func (s *Store) Migrate(ctx context.Context) (watukuytype.Migration, error) {
	l, err := s.Layout(ctx)
	if err != nil {
		return watukuytype.Migration{}, err
	}
	m := watukuytype.Migration{From: l.Version, To: l.Version, Steps: []string{}}
	switch {
	case l.Version > l.Current:
		return m, &watukuytype.LayoutError{Found: l.Version, Known: l.Current}
	case l.Empty:
		if err := s.rdb.Set(ctx, s.layoutKey(), l.Current, 0).Err(); err != nil {
			return m, err
		}
		m.To = l.Current
		m.Steps = append(m.Steps, fmt.Sprintf("empty database: recorded layout %d", l.Current))
		return m, nil
	case l.Version == 0:
		return m, &watukuytype.LayoutError{Found: 0, Known: l.Current}
	}
	for _, st := range s.steps {
		if st.From != m.To {
			continue
		}
		did, err := st.Run(ctx, s)
		if err != nil {
			return m, fmt.Errorf("redisstore: migrate %d→%d: %w", st.From, st.From+1, err)
		}
		if err := s.rdb.Set(ctx, s.layoutKey(), st.From+1, 0).Err(); err != nil {
			return m, err
		}
		m.To = st.From + 1
		m.Steps = append(m.Steps, fmt.Sprintf("%d→%d: %s", st.From, st.From+1, did))
	}
	return m, nil
}
