package watukuytype

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ConfigError is an invalid poller definition or setting; it names the poller and field.
type ConfigError struct {
	Poller string
	Field  string
	Msg    string
}

// LeaseLostError reports a fenced write rejected because the lease's epoch is stale or the
// lease expired; the write changed nothing.
type LeaseLostError struct {
	Key    Key
	Epoch  int64
	Reason string
}

// HTTPError is a non-success answer of a third-party API.
type HTTPError struct {
	Key        Key
	StatusCode int
	URL        string
	// Body is the start of the response body (at most 512 bytes), for lastError.
	Body string
	// RetryAfter is the parsed Retry-After header (0 when absent or malformed).
	RetryAfter time.Duration
	// RateLimit is what the response's rate-limit headers said, if anything.
	RateLimit *RateLimit
}

// CursorStallError reports a cursor that cannot advance: a full page whose items all carry
// the cursor's own timestamp, from an API without a tie-breaker. Re-asking would loop forever.
type CursorStallError struct {
	Key    Key
	Cursor string
	Msg    string
}

// IsLeaseLost reports whether err is (or wraps) a LeaseLostError.
func IsLeaseLost(err error) bool {
	var l *LeaseLostError
	return errors.As(err, &l)
}

// NotFoundError names a poller or partition that neither this engine nor the registry knows.
type NotFoundError struct {
	Poller    string
	Partition string
	// PartitionMissing is true when the poller exists but the partition does not.
	PartitionMissing bool
	// Deleted is true when the partition was deleted (partitions delete): a config's
	// partition stays listed, as deleted, and takes no operation until partitions add.
	Deleted bool
	// Known lists the pollers (or the poller's partitions) that exist.
	Known []string
	// Hint says what to do, when there is more to say than the list.
	Hint string
}

// KeyBusyError reports an operation that could not take the key's lease: another instance's
// cycle or operation held it for the whole wait. Nothing changed; try again.
type KeyBusyError struct {
	Key    Key
	Waited time.Duration
}

// ConflictError reports an operation the key's present state refuses (a partition added
// that exists, a parked invalid item that still fails the poller's checks). Nothing changed.
type ConflictError struct {
	Key Key
	Msg string
}

// ReplayUnavailableError reports a replay of a poller that keeps no event log.
type ReplayUnavailableError struct {
	Key Key
}

// LayoutError reports a database whose data layout this build cannot run on.
type LayoutError struct {
	Found int
	Known int
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("watukuy: config: poller %q: %s: %s", e.Poller, e.Field, e.Msg)
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("watukuy: %s: lease lost (epoch %d): %s", e.Key.Describe(), e.Epoch, e.Reason)
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("watukuy: %s: HTTP %d from %s", e.Key.Describe(), e.StatusCode, e.URL)
}

func (e *CursorStallError) Error() string {
	return fmt.Sprintf("watukuy: %s: cursor stall at %q: %s", e.Key.Describe(), e.Cursor, e.Msg)
}

func (e *NotFoundError) Error() string {
	var msg string
	if e.PartitionMissing {
		msg = fmt.Sprintf("watukuy: poller %q has no partition %q", e.Poller, e.Partition)
	} else {
		msg = fmt.Sprintf("watukuy: unknown poller %q", e.Poller)
	}
	if len(e.Known) > 0 {
		shown := make([]string, len(e.Known))
		for i, k := range e.Known {
			shown[i] = fmt.Sprintf("%q", k)
		}
		msg += "; known: " + strings.Join(shown, ", ")
	} else if !e.PartitionMissing {
		msg += "; no poller is registered in this Redis (start a worker with the config, or check --redis and --prefix)"
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *KeyBusyError) Error() string {
	return fmt.Sprintf("watukuy: %s: the key stayed leased by another instance for %v; try again", e.Key.Describe(), e.Waited)
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("watukuy: %s: %s", e.Key.Describe(), e.Msg)
}

func (e *ReplayUnavailableError) Error() string {
	return fmt.Sprintf("watukuy: %s: cannot replay: the poller keeps no event log; set log.retention (e.g. 168h) in its config and restart the workers: events committed from then on can be replayed",
		e.Key.Describe())
}

func (e *LayoutError) Error() string {
	if e.Found == 0 {
		return fmt.Sprintf("watukuy: the Redis database holds watukuy data but records no data layout (this build writes version %d): it was not written by a release of watukuy; point --redis or --prefix elsewhere", e.Known)
	}
	if e.Found > e.Known {
		return fmt.Sprintf("watukuy: the Redis data layout is version %d, newer than this build knows (%d): upgrade watukuy before starting workers against it", e.Found, e.Known)
	}
	return fmt.Sprintf("watukuy: the Redis data layout is version %d, older than this build's %d: run `watukuy migrate` first", e.Found, e.Known)
}

// SinkError is a handler's failure that is the sink's rather than the event's: any event
// would have failed. A handler returns one (SinkUnavailable, or the webhook sink's for a
// refused connection, a timeout or a 5xx) so the engine blocks the key's delivery, retries
// it on the Delivery.Retry schedule and keeps polling, instead of counting the failure
// against the event (and in the end parking it as poison). Errors of the network that reach
// the engine unwrapped (net.Error) are classified alike.
type SinkError struct {
	Err error
	// Unreachable: the sink could not be reached at all (connection refused, DNS, TLS): one
	// event shows it. Otherwise it answered with a failure one event can also cause (a 5xx, a
	// timeout): the key blocks when two events in a row fail so and none is delivered.
	Unreachable bool
}

func (e *SinkError) Error() string { return e.Err.Error() }
func (e *SinkError) Unwrap() error { return e.Err }

// SinkUnavailable marks err as the failure of a sink that cannot take any event now (see
// SinkError); a handler returns it when its downstream is down.
func SinkUnavailable(err error) error { return &SinkError{Err: err, Unreachable: true} }

// ErrEngineStopped is what an engine's cycles and the operations that act return once Stop
// was called: a stopped engine runs nothing more (its reads still answer).
var ErrEngineStopped = errors.New("watukuy: the engine is stopped (Stop was called): it runs no cycle or operation")

// StoppedError is an operation over several keys (Engine.Each) that failed at Key after Done
// keys before it were done: it stopped there, and running it again is safe.
type StoppedError struct {
	Key  Key
	Done int
	Err  error
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("%v (stopped there: %d key(s) before it were done; running it again is safe)", e.Err, e.Done)
}

func (e *StoppedError) Unwrap() error { return e.Err }
