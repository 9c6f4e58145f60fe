// Package outage turns the failed and successful Redis calls of one process into two log
// lines per outage: an error when Redis stops answering and an info line with the outage's
// duration when it answers again, however many calls fail in between (the scheduler's claims,
// the data watcher's checks, asynq's and go-redis' own retries).
package outage

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Tracker is one process's view of whether Redis answers. The zero value is not usable; a
// nil *Tracker is (it ignores everything), so components can take one optionally.
type Tracker struct {
	log    zerolog.Logger
	onDown func()
	onUp   func(down time.Duration)
	now    func() time.Time

	mu    sync.Mutex
	down  bool
	since time.Time
	fails int
	by    map[string]bool // components that saw the outage
}

// Options configures a Tracker.
type Options struct {
	// OnDown runs once when an outage begins, OnUp once when it ends (metrics).
	OnDown func()
	OnUp   func(down time.Duration)
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// New returns a Tracker that logs to log.
func New(log zerolog.Logger, o Options) *Tracker {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{log: log, onDown: o.OnDown, onUp: o.OnUp, now: o.Now}
}

// Fail records a call by who that failed with err, an error for which Unreachable is true.
// The first failure of an outage logs one error naming who noticed it and the error; the
// following ones are only counted (the line at the end of the outage reports them).
func (t *Tracker) Fail(who string, err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	first := !t.down
	if first {
		t.down, t.since, t.fails, t.by = true, t.now(), 0, map[string]bool{}
	}
	t.fails++
	t.by[who] = true
	t.mu.Unlock()
	if !first {
		return
	}
	t.log.Error().Err(err).Str("noticedBy", who).
		Msg("Redis is unreachable: retrying with backoff; nothing is logged per attempt, one line follows when it answers again")
	if t.onDown != nil {
		t.onDown()
	}
}

// OK records a call that Redis answered; it ends an outage (logging its duration).
func (t *Tracker) OK() {
	if t == nil {
		return
	}
	t.mu.Lock()
	if !t.down {
		t.mu.Unlock()
		return
	}
	d := t.now().Sub(t.since)
	fails, by := t.fails, make([]string, 0, len(t.by))
	for w := range t.by {
		by = append(by, w)
	}
	t.down = false
	t.mu.Unlock()
	sort.Strings(by)
	t.log.Info().Str("downFor", d.Round(time.Millisecond).String()).Int("failedCalls", fails).Strs("seenBy", by).
		Msg("Redis answers again: the outage is over, polling resumes")
	if t.onUp != nil {
		t.onUp(d)
	}
}

// Down reports whether an outage is going on.
func (t *Tracker) Down() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.down
}

// Unreachable reports whether err means that Redis could not be reached or cannot serve yet:
// a network error (refused, reset, timeout, EOF), a client-side timeout, or a reply saying
// the server is not ready (LOADING while it replays its AOF, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN, READONLY during a failover). Errors of the command itself are not.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	return LooksUnreachable(err.Error())
}

// unreachableText are fragments of the messages of Unreachable errors, for errors that
// reach us as text only (asynq's and go-redis' log lines, errors wrapped without %w).
var unreachableText = []string{
	"connection refused", "connection reset", "broken pipe", "i/o timeout", "no route to host",
	"network is unreachable", "EOF", "connection pool timeout", "failed to dial", "use of closed network connection",
	"LOADING ", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY ", "context deadline exceeded",
}

// LooksUnreachable is Unreachable for an error's text (or a log line).
func LooksUnreachable(msg string) bool {
	for _, s := range unreachableText {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
