package sink

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/watukuy/watukuy/watukuytype"
)

// Broker is a sink that holds connections to a message system (NATS JetStream, RabbitMQ,
// PostgreSQL): a worker process builds one per sink setting, shares it between the pollers
// that name the same one, probes it for `validate --probe` and closes it when it stops.
//
// New of each broker package connects nothing: the first Handle does, so a worker starts
// while its broker is down, and each attempt reports the outage as a failed attempt. An
// error that any event would meet (no connection, refused credentials, a missing stream,
// exchange or table) is a watukuytype.SinkUnavailable, so the key's delivery blocks and
// retries instead of parking good events; a timeout or a server's failure is a
// *watukuytype.SinkError; a refusal of the one message is a plain error.
type Broker interface {
	Handle(ctx context.Context, ev watukuytype.Event) error
	// Kind names the sink: "nats", "amqp" or "postgres" (the sink label of the metrics).
	Kind() string
	// Target describes where events go, credentials redacted: the URL and the stream and
	// subject, exchange and routing key, or table.
	Target() string
	// Probe connects and says whether the target exists ("stream ORDERS exists, subjects
	// orders.>"); an error says why it cannot be used. It publishes nothing, and creates
	// nothing even with create set (it says what would be created).
	Probe(ctx context.Context) (string, error)
	// Close closes the connections; Handle after Close fails.
	Close() error
}

// Brokers holds a process's broker sinks, one per distinct setting, shared by every poller
// that names it; Close closes them all when the process stops. A reload builds its pollers
// after Mark and, once they run, closes with CloseUnused what no poller names any more. The
// zero value is ready.
type Brokers struct {
	mu   sync.Mutex
	m    map[string]Broker
	used map[string]bool // the keys Get was asked for since Mark
}

// Get returns the broker kept under key, or the one open makes (kept only when it succeeds).
func (bs *Brokers) Get(key string, open func() (Broker, error)) (Broker, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.used == nil {
		bs.used = map[string]bool{}
	}
	bs.used[key] = true
	if b, ok := bs.m[key]; ok {
		return b, nil
	}
	b, err := open()
	if err != nil {
		return nil, err
	}
	if bs.m == nil {
		bs.m = map[string]Broker{}
	}
	bs.m[key] = b
	return b, nil
}

// All returns the brokers, ordered by key.
func (bs *Brokers) All() []Broker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	keys := slices.Sorted(maps.Keys(bs.m))
	out := make([]Broker, len(keys))
	for i, k := range keys {
		out[i] = bs.m[k]
	}
	return out
}

// Mark starts a build: CloseUnused keeps the brokers Get is asked for from now on.
func (bs *Brokers) Mark() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.used = map[string]bool{}
}

// CloseUnused closes and forgets the brokers Get was not asked for since Mark.
func (bs *Brokers) CloseUnused() error { return bs.closeIf(func(k string) bool { return !bs.used[k] }) }

// Close closes every broker.
func (bs *Brokers) Close() error { return bs.closeIf(func(string) bool { return true }) }

func (bs *Brokers) closeIf(drop func(key string) bool) error {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	var errs []error
	for k, b := range bs.m {
		if drop(k) {
			errs = append(errs, b.Close())
			delete(bs.m, k)
		}
	}
	return errors.Join(errs...)
}
