package core

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// DataMarks is what the data watcher reads in one round trip: the data id (a random id
// recorded once per database, "" when absent) and which of the global keys exist. A loss is
// told by the data id alone. The key registry is no mark: it holds entries only for keys no
// poller entry lists (partitions add), so it is absent from a database of config keys.
type DataMarks struct {
	ID string
	// Layout and Pollers report whether the layout marker and the poller descriptions exist.
	Layout, Pollers bool
	// Missing names the global keys that do not exist (for the log).
	Missing []string
}

// DataStore is the part of the store the data watcher needs.
type DataStore interface {
	// DataMarks reads the data id and which global keys exist, in one round trip.
	DataMarks(ctx context.Context) (DataMarks, error)
	// MintDataID records id as the database's data id unless one is recorded, and returns
	// the recorded one.
	MintDataID(ctx context.Context, id string) (string, error)
	// Wake wakes the schedulers (pub/sub), so they claim at once.
	Wake(ctx context.Context) error
}

// DataWatch notices that Redis lost its data (restarted empty, flushed, failed over to an
// empty replica) while the process runs, and recovers from it: it logs one error naming the
// loss, calls OnLoss (a metric), registers the engine's pollers again (registry, poller
// descriptions, layout marker, due entries: the keys are claimed again) and wakes the
// schedulers.
//
// A database is told apart from its replacement by its data id, a random id recorded next to
// the layout marker. Every process remembers the id it saw; an id that is gone or changed is
// a loss, also for a process that checks after another one registered again (and recorded a
// new id), so every process notices and registers its own pollers. A database that was empty
// when the process started is no loss: there was no id to remember.
//
// Partitions added at run time (watukuy partitions add) are not in any process's
// definition: they are gone with the data, and the log says so.
type DataWatch struct {
	Engine *Engine
	Store  DataStore
	// Every is the period of the check; default 1s.
	Every time.Duration
	// Reregister registers the engine's pollers again after a loss (workers, run, dev); a
	// scheduler, which does not register pollers at start either, only reports.
	Reregister bool
	// OnLoss runs once per loss noticed (metrics).
	OnLoss func()
	// OnCheck, when set, receives the outcome of every check (nil: Redis answered) and reports
	// whether it took care of a failure (the process's outage tracker logs an unreachable
	// Redis once per outage). The failures it leaves are logged at most once a minute.
	OnCheck func(err error) (handled bool)
	// NewID returns a fresh data id; default a random hex id.
	NewID func() string

	mu       sync.Mutex
	known    string    // the data id last seen
	pending  bool      // a loss was reported; registering again has not succeeded yet
	loggedAt time.Time // when a check's non-outage error was last logged
}

// Run checks every Every until ctx ends.
func (w *DataWatch) Run(ctx context.Context) {
	every := w.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(every, time.Second))
		_, err := w.Check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.outcome(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// outcome hands a check's outcome to OnCheck, and logs a failure it left (at most once a
// minute).
func (w *DataWatch) outcome(err error) {
	handled := w.OnCheck != nil && w.OnCheck(err)
	switch {
	case err == nil, handled:
	default:
		w.mu.Lock()
		log := time.Since(w.loggedAt) >= time.Minute
		if log {
			w.loggedAt = time.Now()
		}
		w.mu.Unlock()
		if log {
			w.Engine.log.Error().Err(err).Msg("data watcher: checking that Redis still holds watukuy's data failed")
		}
	}
}

// Check reads the marks once; when the data id this process saw is gone or changed, it
// reports the loss and (with Reregister) registers the pollers again. It returns whether it
// found a loss. A registration that fails is tried again at the next Check, without a second
// report.
func (w *DataWatch) Check(ctx context.Context) (bool, error) {
	m, err := w.Store.DataMarks(ctx)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	lost := w.known != "" && m.ID != w.known
	if lost {
		w.known = "" // the next id seen is the new database's
		w.pending = w.Reregister
	}
	pending := w.pending
	w.mu.Unlock()
	if lost {
		w.report(m)
	}
	if pending {
		if err := w.reregister(ctx); err != nil {
			return lost, err
		}
		if m, err = w.Store.DataMarks(ctx); err != nil {
			return lost, err
		}
	}
	if m.ID == "" && m.Layout {
		// Data registered by a process without the watcher (or just registered again): give
		// the database its id, the first process to get here wins.
		id := w.NewID
		if id == nil {
			id = randomID
		}
		if m.ID, err = w.Store.MintDataID(ctx, id()); err != nil {
			return lost, err
		}
	}
	if m.ID != "" {
		w.mu.Lock()
		w.known = m.ID
		w.mu.Unlock()
	}
	return lost, nil
}

// reregister registers the engine's pollers again and wakes the schedulers.
func (w *DataWatch) reregister(ctx context.Context) error {
	e := w.Engine
	e.mu.Lock()
	e.registered = false
	e.mu.Unlock()
	if err := e.ensureRegistered(ctx); err != nil {
		return fmt.Errorf("watukuy: register the pollers again after Redis lost its data: %w", err)
	}
	w.mu.Lock()
	w.pending = false
	w.mu.Unlock()
	pollers, keys := e.registration()
	w.Engine.log.Info().Strs("pollers", pollers).Int("keys", keys).Msg("data loss: pollers registered again, their keys are due now")
	_ = w.Store.Wake(ctx) // best effort: without it the schedulers claim within a second anyway
	return nil
}

// report logs the loss once and counts it.
func (w *DataWatch) report(m DataMarks) {
	pollers, keys := w.Engine.registration()
	gone := "the data id changed (another process already registered again)"
	if len(m.Missing) > 0 {
		gone = strings.Join(m.Missing, ", ") + " gone"
	}
	var what string
	switch {
	case !w.Reregister:
		what = "this scheduler registers no pollers: the workers register theirs again"
	case len(pollers) == 0:
		what = "this process runs no pollers"
	default:
		what = fmt.Sprintf("registering %d poller(s) and their %d configured key(s) again, due now", len(pollers), keys)
	}
	w.Engine.log.Error().Strs("missing", m.Missing).Strs("pollers", pollers).Int("keys", keys).
		Msg("Redis lost its data (restarted empty, flushed, or failed over to an empty replica): " + gone + "; " + what +
			". Lost with it: cursors and snapshots (items are read from the start and emitted again as created), undelivered events, parked rows, " +
			"and partitions added at run time (watukuy partitions add: add them again)")
	if w.OnLoss != nil {
		w.OnLoss()
	}
}

// randomID is a fresh data id.
func randomID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// registration lists the engine's pollers and counts their configured keys.
func (e *Engine) registration() (pollers []string, keys int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.pollers {
		pollers = append(pollers, p.Name)
		keys += len(pollerKeys(p))
	}
	sort.Strings(pollers)
	return pollers, keys
}
