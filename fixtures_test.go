package watukuy

// Helpers shared by this package's tests beside helpers_test.go: the light backends, a store
// with hooks, and a consumer's view of the delivered events.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// eachLight runs fn on miniredis and a private redis-server, not the cluster: the machine is
// small and what these tests check does not depend on the topology.
func eachLight(t *testing.T, fn func(t *testing.T, b redistest.Backend)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, redistest.Miniredis(t)) })
	t.Run("redis-server", func(t *testing.T) { fn(t, redistest.Real(t)) })
}

// hookStore runs test code around chosen store calls, to land a fault or another instance's
// move at an exact point of a cycle.
type hookStore struct {
	core.Store
	afterBegin   func(b core.BeginResult)
	beforeCommit func(c core.Commit)
	afterCommit  func(c core.Commit, r core.CommitResult)
	beforeAck    func(l core.Lease, acked []core.Entry) error
	afterAck     func()
	afterPark    func()
}

func (h *hookStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, op core.BeginMode) (core.BeginResult, error) {
	b, err := h.Store.Begin(ctx, key, owner, ttl, op)
	if err == nil && h.afterBegin != nil {
		h.afterBegin(b)
	}
	return b, err
}

func (h *hookStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	if h.beforeCommit != nil {
		h.beforeCommit(c)
	}
	r, err := h.Store.CommitPoll(ctx, l, c)
	if err == nil && h.afterCommit != nil {
		h.afterCommit(c, r)
	}
	return r, err
}

func (h *hookStore) Ack(ctx context.Context, l core.Lease, acked []core.Entry) (bool, error) {
	if h.beforeAck != nil {
		if err := h.beforeAck(l, acked); err != nil {
			return false, err
		}
	}
	paused, err := h.Store.Ack(ctx, l, acked)
	if err == nil && h.afterAck != nil {
		h.afterAck()
	}
	return paused, err
}

func (h *hookStore) Park(ctx context.Context, l core.Lease, p core.Parking) error {
	err := h.Store.Park(ctx, l, p)
	if err == nil && h.afterPark != nil {
		h.afterPark()
	}
	return err
}

// hooked puts h in front of the engine's store (Options.wrapStore).
func hooked(h *hookStore) func(core.Store) core.Store {
	return func(s core.Store) core.Store { h.Store = s; return h }
}

// tcpAddr is the host:port a backend's single-node client dials.
func tcpAddr(t *testing.T, b redistest.Backend) string {
	t.Helper()
	c, ok := b.Client.(*redis.Client)
	if !ok {
		t.Fatalf("%s: not a single-node client", b.Name)
	}
	return c.Options().Addr
}

// stateOf reads the "state" field of an item (the whole content of the tests' unversioned
// pollers).
func stateOf(item json.RawMessage) string {
	var it struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(item, &it)
	return it.State
}

// stateFingerprint makes "state" the whole content of an item.
func stateFingerprint(item json.RawMessage) ([]byte, error) { return []byte(stateOf(item)), nil }

// stateOnly makes the test poller a snapshot listing without a version whose content is the
// items' state field alone (no timestamp in the fingerprint), so content can come back.
func stateOnly(e *env) func(p *watukuytype.Poller) {
	return func(p *watukuytype.Poller) {
		p.Version = nil
		p.Fingerprint = func(item json.RawMessage) ([]byte, error) {
			var it struct {
				State string `json:"state"`
			}
			err := json.Unmarshal(item, &it)
			return []byte(it.State), err
		}
		p.Strategy = watukuytype.SnapshotDiff
		p.Fetch = e.api.Listing(10)
		p.ConfirmDeletes = 1
	}
}

// dedupingConsumer applies events as a consumer that dedupes by id does (what G2's ids are
// for) and reports the ids it dropped as repeats.
func dedupingConsumer(evs []watukuytype.Event) (state map[string]string, repeats []string) {
	state = map[string]string{}
	seen := map[string]int{}
	for i, ev := range evs {
		if j, dup := seen[ev.ID]; dup {
			repeats = append(repeats, fmt.Sprintf("event %d (%s %s %q) has the id of event %d (%s %s %q)",
				i, ev.Type, ev.Identity, stateOf(ev.Item), j, evs[j].Type, evs[j].Identity, stateOf(evs[j].Item)))
			continue
		}
		seen[ev.ID] = i
		if ev.Type == watukuytype.Deleted {
			delete(state, ev.Identity)
			continue
		}
		state[ev.Identity] = stateOf(ev.Item)
	}
	return state, repeats
}

// deliveriesOf lists identity's deliveries as lane:type:state.
func deliveriesOf(evs []watukuytype.Event, identity string) []string {
	var out []string
	for _, ev := range evs {
		if ev.Identity == identity {
			out = append(out, fmt.Sprintf("%s:%s:%s", ev.Lane, ev.Type, stateOf(ev.Item)))
		}
	}
	return out
}

// strictBadPrefix is a Validate that rejects items whose state starts with "bad" while strict
// holds.
func strictBadPrefix(strict *atomic.Bool) func(json.RawMessage) error {
	return func(item json.RawMessage) error {
		if strict.Load() && strings.HasPrefix(stateOf(item), "bad") {
			return fmt.Errorf("bad state")
		}
		return nil
	}
}

// retryAllParked retries every parked invalid row of a key, oldest first (parked ls order).
func retryAllParked(t *testing.T, eng *Engine, poller string) {
	t.Helper()
	rows, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: poller, Partition: ""}, "invalid")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := eng.Parked().Retry(t.Context(), watukuytype.Key{Poller: poller, Partition: ""}, r.ID); err != nil {
			t.Logf("retry %s (%s): %v", r.ID, r.Identity, err)
		}
	}
}
