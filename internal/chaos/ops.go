package chaos

import (
	"context"
	"errors"
	"fmt"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/watukuytype"
)

// operate is the operator's hand in a run: now and then a backfill from the beginning, a
// rewind of the live cursor, a pause lifted a few steps later, or the parked rows of a key
// retried (or discarded).
func (s *scenario) operate(ctx context.Context, step int) {
	for k, until := range s.paused {
		if step >= until {
			s.op(ctx, "resume", k, false, func(eng *core.Engine) error { return eng.Resume(ctx, k) })
			delete(s.paused, k)
		}
	}
	if s.rng.Float64() >= s.o.OpRate {
		return
	}
	keys := s.allKeys()
	k := keys[s.rng.IntN(len(keys))]
	switch s.rng.IntN(4) {
	case 3:
		// Parked rows retried mid-run (discarded now and then), as an operator racing cycles.
		retry := s.rng.IntN(4) > 0
		name := map[bool]string{true: "parked retry", false: "parked discard"}[retry]
		s.op(ctx, name, k, true, func(eng *core.Engine) error {
			rows, err := eng.ListParked(ctx, k, "poison")
			if err != nil || len(rows) == 0 {
				return err
			}
			ids := make([]string, 0, len(rows))
			for _, r := range rows {
				ids = append(ids, r.ID)
			}
			if retry {
				_, err = eng.RetryParked(ctx, k, ids)
			} else {
				_, err = eng.DiscardParked(ctx, k, ids)
			}
			return err
		})
	case 0:
		s.op(ctx, "backfill", k, true, func(eng *core.Engine) error {
			_, err := eng.Backfill(ctx, k, watukuytype.BackfillRequest{})
			return err
		})
	case 1:
		s.op(ctx, "reset-cursor", k, true, func(eng *core.Engine) error { return eng.ResetCursor(ctx, k, "", false) })
	case 2:
		if _, ok := s.paused[k]; !ok {
			s.op(ctx, "pause", k, false, func(eng *core.Engine) error { return eng.Pause(ctx, k) })
			s.paused[k] = step + 1 + s.rng.IntN(5)
		}
	}
}

// op runs one operator action as the CLI would: a new process that knows only the Redis URL
// (no poller definitions), with a random kill point armed as often as an engine's. A refusal
// (a snapshotDiff backfill) or a kill is counted and logged, not fatal: the run's guarantees
// must hold either way.
func (s *scenario) op(ctx context.Context, name string, k watukuytype.Key, leased bool, fn func(eng *core.Engine) error) {
	s.gen++
	instance := fmt.Sprintf("operator-gen%d", s.gen)
	st, err := redisstore.New(s.rdb, redisstore.Options{Prefix: s.prefix, Clock: s.clock.Now})
	if err != nil {
		s.res.Ops[name+" failed"]++
		return
	}
	fs := &FaultyStore{Store: st, Instance: instance, Rec: s.rec, Clock: s.clock.Now}
	if s.rng.Float64() < s.o.KillRate {
		fs.Arm(KillPoints()[s.rng.IntN(len(KillPoints()))])
	}
	eng, err := core.NewEngine(core.Options{Store: fs, InstanceID: instance, Clock: s.clock.Now})
	if err != nil {
		s.res.Ops[name+" failed"]++
		return
	}
	if ki, err := eng.Inspect(ctx, k); leased && err == nil && ki.LeaseExpires != nil && ki.LeaseExpires.After(s.clock.Now()) {
		// A killed instance's lease lapses only as the run's clock moves, which it does not
		// while an operation waits for it (up to 5 s). An operator would try again later.
		s.res.Ops[name+" skipped (leased)"]++
		return
	}
	err = fn(eng)
	var ce *watukuytype.ConfigError
	switch {
	case err == nil:
		s.res.Ops[name]++
	case errors.As(err, &ce):
		s.res.Ops[name+" refused"]++
	case fs.Killed() != "":
		s.res.Ops[name+" killed"]++
	default:
		s.res.Ops[name+" failed"]++
	}
	if err != nil {
		fmt.Fprintf(s.o.Log, "operator: %s %s: %v\n", name, k, err)
	}
}

// resumeAll lifts every pause the operator left, before the run settles.
func (s *scenario) resumeAll(ctx context.Context) error {
	for k := range s.paused {
		if err := s.engines[0].eng.Resume(ctx, k); err != nil { // no kill point fires any more
			return err
		}
		delete(s.paused, k)
	}
	return nil
}
