package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/internal/statuspage"
	"github.com/watukuy/watukuy/watukuytype"
)

// The measurements of what the data layout makes independent of a deployment's size: an
// operator's look at one key and a partitions add next to the poller's partition count
// (RegistryCosts), the longest script of operations on large states (LongestScripts), and
// what partitions that came and went leave behind (Churn).

// smallSize is the size each figure of RegistryCosts and LongestScripts is compared with.
const smallSize = 10

// benchSecret is the admin token RegistryCosts sends to the admin API and the status page.
const benchSecret = "bench-0123456789abcdef"

// cliEngine is an engine on the env's server without any poller registered, as the CLI, the
// admin API and the status page have: the pollers come from the registry. The caller closes
// the client.
func cliEngine(ctx context.Context, e *env) (*watukuy.Engine, redis.UniversalClient, error) {
	rdb, err := connect(ctx, e.url)
	if err != nil {
		return nil, nil, err
	}
	wk, err := watukuy.New(watukuy.Options{Redis: rdb, Prefix: e.prefix, InstanceID: "bench-cli"})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("bench: engine without pollers: %w", err)
	}
	return wk, rdb, nil
}

// netBytes is how many bytes the server sent while fn ran (INFO stats
// total_net_output_bytes), with nothing else talking to it: three INFO readings, the first
// two of which measure the size of an INFO reply, which the last two count once as well.
func (e *env) netBytes(ctx context.Context, fn func() error) (int64, error) {
	var n int64
	err := e.quiet(ctx, func() error {
		read := func() (int64, error) {
			v := infoField(ctx, e.rdb, "stats", "total_net_output_bytes")
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO stats total_net_output_bytes %q: %w", v, err)
			}
			return b, nil
		}
		a, err := read()
		if err != nil {
			return err
		}
		before, err := read()
		if err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
		after, err := read()
		if err != nil {
			return err
		}
		n = after - before - (before - a)
		return nil
	})
	return n, err
}

// median is the middle of vs (the upper one of an even count).
func median[T int64 | float64 | time.Duration](vs []T) T {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// timeGET sends GET target to h with the bench's bearer token n+1 times and returns the
// median time of the last n (the first warms up); any answer but 200 is an error.
func timeGET(ctx context.Context, h http.Handler, target string, n int) (time.Duration, error) {
	var ds []time.Duration
	for i := range n + 1 {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+benchSecret)
		rec := httptest.NewRecorder()
		t := time.Now()
		h.ServeHTTP(rec, req)
		d := time.Since(t)
		if rec.Code != http.StatusOK {
			body := rec.Body.String()
			return 0, fmt.Errorf("GET %s: %d %s", target, rec.Code, body[:min(len(body), 300)])
		}
		if i > 0 {
			ds = append(ds, d)
		}
	}
	return median(ds), nil
}

// registryCosts are the figures of RegistryCosts at one size.
type registryCosts struct {
	inspectBytes, addBytes int64
	api, status            time.Duration
	seed                   time.Duration
}

// RegistryCosts measures what an operator's look at one key costs next to its poller's
// size: one poller of o.RegistryKeys partitions registered as an engine registers its config
// keys (Setup), each key's first cycle run; then, from an engine without the poller's
// definition (as the CLI's, the admin API's and the status page's): the bytes Redis sends for
// one Inspect (the median of three keys) and for one partitions add (INFO
// total_net_output_bytes on a quiet server, the INFO reply's own size calibrated out), and the
// median time of five GET /api/keys?poller=bench&limit=100 through the admin API's handler
// and of five of the status page's first page (handlers called in process, bearer token).
// Each figure's baseline is the same at 10 partitions, in the same run.
func RegistryCosts(ctx context.Context, o Options) ([]Result, error) {
	n := o.RegistryKeys
	t0, load := time.Now(), loadAvg()
	small, err := registryCostsAt(ctx, o, smallSize)
	if err != nil {
		return nil, err
	}
	big, err := registryCostsAt(ctx, o, n)
	if err != nil {
		return nil, err
	}
	took := time.Since(t0)
	details := map[string]float64{"partitions": float64(n), "baselinePartitions": smallSize, "firstCyclesSeconds": big.seed.Seconds()}
	mk := func(name, unit, goal string, v, base float64, met bool, notes string) Result {
		r := Result{Name: fmt.Sprintf("%s-%d", name, n), Value: v, Unit: unit, Baseline: base, Goal: goal, Duration: took, Load1: load,
			BaselineOf: fmt.Sprintf("the same at %d partitions, same run", smallSize), Details: map[string]float64{}, Notes: notes}
		for k, v := range details {
			r.Details[k] = v
		}
		r.meet(met)
		return r
	}
	setup := fmt.Sprintf("one poller of %d partitions registered by an engine's Setup, each key's first cycle run (%.1fs)", n, big.seed.Seconds())
	return []Result{
		mk("inspect-bytes", "B", "<= 16384", float64(big.inspectBytes), float64(small.inspectBytes), big.inspectBytes <= 16384,
			"bytes Redis sent for one Inspect(poller, partition) from an engine without the poller's definition (median of 3 keys; INFO total_net_output_bytes, "+
				"the INFO reply's own size calibrated out, nothing else talking to the server); "+setup),
		mk("api-keys-ms", "ms", "< 300", millis(big.api), millis(small.api), big.api < 300*time.Millisecond,
			fmt.Sprintf("GET /api/keys?poller=bench&limit=100 through the admin API's handler (called in process, bearer token, an engine without pollers), median of 5 after one untimed: "+
				"a page of 100 keys (%d at the baseline's size); ", min(100, smallSize))+setup),
		mk("status-page-ms", "ms", "< 300", millis(big.status), millis(small.status), big.status < 300*time.Millisecond,
			fmt.Sprintf("GET /status (the status page's first page) through its handler (called in process, bearer token, an engine without pollers), median of 5 after one untimed: "+
				"its first page of %d keys (%d at the baseline's size); ", n, smallSize)+setup),
		mk("add-bytes", "B", "<= 16384", float64(big.addBytes), float64(small.addBytes), big.addBytes <= 16384,
			"bytes Redis sent for one partitions add (Partitions().Add of a new partition, from an engine without the poller's definition, after one untimed add); "+setup),
	}, nil
}

// registryCostsAt runs RegistryCosts' figures with n partitions on a server of their own.
func registryCostsAt(ctx context.Context, o Options, n int) (registryCosts, error) {
	var c registryCosts
	e, st, err := openStore(ctx, o, fmt.Sprintf("registry%d", n))
	if err != nil {
		return c, err
	}
	defer e.close()
	p := noopPoller(n, 0)
	eng, err := newEngine(st, "bench", p, watukuytype.Hooks{})
	if err != nil {
		return c, err
	}
	t := time.Now()
	if err := eng.Setup(ctx); err != nil {
		return c, fmt.Errorf("register %d keys: %w", n, err)
	}
	if _, err := runFirstCycles(ctx, eng, keysOf(p), 64); err != nil {
		return c, err
	}
	c.seed = time.Since(t)
	wk, rdb, err := cliEngine(ctx, e)
	if err != nil {
		return c, err
	}
	defer rdb.Close()
	// One untimed look first: the engine's connection, its layout check and its scripts.
	if _, err := wk.Inspect(ctx, watukuytype.Key{Poller: pollerName, Partition: p.Partitions[0]}); err != nil {
		return c, fmt.Errorf("inspect: %w", err)
	}
	var inspect []int64
	for _, i := range []int{n / 4, n / 2, 3 * n / 4} {
		part := p.Partitions[i]
		b, err := e.netBytes(ctx, func() error {
			_, err := wk.Inspect(ctx, watukuytype.Key{Poller: pollerName, Partition: part})
			return err
		})
		if err != nil {
			return c, fmt.Errorf("inspect %s: %w", part, err)
		}
		inspect = append(inspect, b)
	}
	c.inspectBytes = median(inspect)

	tokens, err := admintoken.NewSet([]admintoken.Token{{ID: "bench", Secret: benchSecret, ReadOnly: true}}...)
	if err != nil {
		return c, fmt.Errorf("bench: admin token: %w", err)
	}
	api := admin.NewAPI(admin.Options{Engine: wk, Tokens: tokens})
	if c.api, err = timeGET(ctx, api, "/api/keys?poller="+pollerName+"&limit=100", 5); err != nil {
		return c, err
	}
	page := statuspage.New(statuspage.Options{Engine: wk, Tokens: tokens})
	if c.status, err = timeGET(ctx, page, statuspage.Root, 5); err != nil {
		return c, err
	}

	if err := wk.Partitions().Add(ctx, watukuytype.Key{Poller: pollerName, Partition: "added-0"}); err != nil {
		return c, fmt.Errorf("partitions add: %w", err)
	}
	c.addBytes, err = e.netBytes(ctx, func() error {
		return wk.Partitions().Add(ctx, watukuytype.Key{Poller: pollerName, Partition: "added-1"})
	})
	if err != nil {
		return c, fmt.Errorf("partitions add: %w", err)
	}
	return c, nil
}

// scriptGoal is the goal for the longest script of an operation, in ms.
const scriptGoal = 50

// scriptLoad is one workload of LongestScripts.
type scriptLoad struct {
	name string // the result's name
	what string // what its size counts
	size int
	only string // the script reported, "" for the longest of any
	// prepare builds the workload's state of n on key and returns its operation.
	prepare func(ctx context.Context, s *scriptRun, key watukuytype.Key, n int) (func() error, error)
}

// scriptRun is the server of LongestScripts and its engines.
type scriptRun struct {
	e  *env
	st *redisstore.Store
	wk *watukuy.Engine // without the poller's definition, as an operator's
}

// LongestScripts measures the longest Lua script Redis runs for operations whose cost must
// not depend on the size of the state they act on, each on a state of that size built through
// the store's own scripts (Begin, CommitPoll, ReadOutbox, Park under an operation's lease),
// with every command logged while the operation runs (SLOWLOG, slowlog-log-slower-than 0):
// a parked retry of one poison event beside o.ParkedOutbox pending events of other ordering
// keys, a retry of a poison event with o.HeldEvents events held behind it (both with
// Parked().Retry from an engine without the poller's definition), a claim of 100 keys
// (ClaimDue) from a due set of o.ClaimKeys keys, partitions delete of a partition with
// o.DeleteItems tracked items, and the commits that trim o.Tombstones tombstones expired
// together (a test clock moved past their retention; the longest commit is reported). Value:
// the longest script of the operation, ms; baseline: the same at 10. On a shared server
// (--redis) the slowlog settings are changed while an operation runs and put back after.
func LongestScripts(ctx context.Context, o Options) ([]Result, error) {
	loads := []scriptLoad{
		{"longest-script-parked-retry", "pending events of other ordering keys", o.ParkedOutbox, "", prepareParkedRetry},
		{"longest-script-held-retry", "events held behind the poison event", o.HeldEvents, "", prepareHeldRetry},
		{"longest-script-claim", "keys in the due set", o.ClaimKeys, "", prepareClaim},
		{"longest-script-delete", "tracked items", o.DeleteItems, "", prepareDelete},
		{"longest-script-tombstones", "tombstones expiring together", o.Tombstones, "commit_poll", prepareTombstones},
	}
	e, st, err := openStore(ctx, o, "scripts")
	if err != nil {
		return nil, err
	}
	defer e.close()
	var parts []string
	for _, l := range loads {
		if l.name != "longest-script-claim" {
			parts = append(parts, l.name+"-small", l.name+"-big")
		}
	}
	p := noopPoller(0, 0)
	p.Partitions = parts
	eng, err := newEngine(st, "bench", p, watukuytype.Hooks{})
	if err != nil {
		return nil, err
	}
	if err := eng.Setup(ctx); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	if _, err := runFirstCycles(ctx, eng, keysOf(p), 8); err != nil {
		return nil, err
	}
	wk, rdb, err := cliEngine(ctx, e)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	s := &scriptRun{e: e, st: st, wk: wk}
	var out []Result
	for _, l := range loads {
		r, err := s.measure(ctx, l)
		if err != nil {
			return out, fmt.Errorf("%s: %w", l.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// measure builds l's state at 10 and at l.size and traces its operation at each.
func (s *scriptRun) measure(ctx context.Context, l scriptLoad) (Result, error) {
	r, t0 := start(l.name)
	r.Unit, r.Goal = "ms", fmt.Sprintf("<= %d", scriptGoal)
	r.BaselineOf = fmt.Sprintf("the same with %d %s, same run", smallSize, l.what)
	var build time.Duration
	var traces [2]trace
	for i, n := range []int{smallSize, l.size} {
		key := watukuytype.Key{Poller: pollerName, Partition: l.name + [2]string{"-small", "-big"}[i]}
		t := time.Now()
		op, err := l.prepare(ctx, s, key, n)
		if err != nil {
			return r, fmt.Errorf("build %d %s: %w", n, l.what, err)
		}
		build = time.Since(t)
		if traces[i], err = s.e.traced(ctx, op); err != nil {
			return r, fmt.Errorf("with %d %s: %w", n, l.what, err)
		}
	}
	script, d := traces[1].longest(l.only)
	_, base := traces[0].longest(l.only)
	if d == 0 {
		return r, fmt.Errorf("no script of the operation was logged (%d commands)", traces[1].commands)
	}
	r.Value, r.Baseline = millis(d), millis(base)
	r.meet(r.Value <= scriptGoal)
	r.Details = map[string]float64{"size": float64(l.size), "baselineSize": smallSize, "buildSeconds": build.Seconds()}
	traces[1].details(r.Details)
	r.Notes = fmt.Sprintf("the longest script (%s) of the operation with %d %s; every command logged while it ran (slowlog-log-slower-than 0): "+
		"%d sent by clients (the longest %.3f ms, %s), %d called by scripts; state built in %.1fs through the store's scripts; details: each script's longest run (scriptMs:)",
		script, l.size, l.what, traces[1].commands, millis(traces[1].longestCommand), traces[1].commandName, traces[1].calls, build.Seconds())
	r.Duration = time.Since(t0)
	return r, nil
}

// buildLease is how long the lease of a state's building lasts.
const buildLease = 10 * time.Minute

// withLease runs fn under an operation's lease of key (store.Begin in mode op), then ends it
// with the key due in an hour.
func withLease(ctx context.Context, st core.Store, key watukuytype.Key, fn func(l core.Lease) error) error {
	b, err := st.Begin(ctx, key, "bench-build", buildLease, core.BeginForOp)
	if err != nil {
		return fmt.Errorf("begin %s: %w", key.Describe(), err)
	}
	if b.Status != core.BeginOK {
		return fmt.Errorf("begin %s: status %d", key.Describe(), b.Status)
	}
	ferr := fn(b.Lease)
	if err := st.End(ctx, b.Lease, core.EndRequest{NextDue: b.Now.Add(time.Hour), Trigger: b.State[statehash.Trigger]}); err != nil && ferr == nil {
		ferr = fmt.Errorf("end %s: %w", key.Describe(), err)
	}
	return ferr
}

// commitBatch is how many events, items or tombstones one commit of a state's building writes.
const commitBatch = 1000

// benchEvent is an outbox event of ordering key ok.
func benchEvent(i int, ok string) core.OutboxEvent {
	id := fmt.Sprintf("ev_%07d", i)
	return core.OutboxEvent{ID: id, OrderingKey: ok,
		Envelope: fmt.Appendf(nil, `{"id":%q,"type":"updated","poller":"bench","identity":"ord-%07d","data":{"status":"paid","total":%d.95,"currency":"EUR"}}`, id, i, i)}
}

// commitEvents commits n events (ordering key ok(i)), commitBatch a commit, and returns how
// many of them joined held events.
func commitEvents(ctx context.Context, st core.Store, l core.Lease, n int, ok func(i int) string) (int, error) {
	diverted := 0
	for from := 0; from < n; from += commitBatch {
		evs := make([]core.OutboxEvent, 0, commitBatch)
		for i := from; i < min(from+commitBatch, n); i++ {
			evs = append(evs, benchEvent(i, ok(i)))
		}
		res, err := st.CommitPoll(ctx, l, core.Commit{Events: evs})
		if err != nil {
			return diverted, fmt.Errorf("commit events %d-%d: %w", from, from+len(evs)-1, err)
		}
		diverted += len(res.Diverted)
	}
	return diverted, nil
}

// parkedEvent is a parked poison event's row as the engine writes it (core's parkedRow).
type parkedEvent struct {
	Kind     string      `json:"kind"`
	ID       string      `json:"id"`
	Error    string      `json:"error"`
	Errors   []string    `json:"errors"`
	Attempts int         `json:"attempts"`
	Event    parkedEntry `json:"event"`
	ParkedAt int64       `json:"parkedAt"`
}

// parkedEntry is the event of a parked row (core's heldEntry).
type parkedEntry struct {
	ID  string `json:"id"`
	OK  string `json:"ok"`
	EV  string `json:"ev"`
	Seq string `json:"seq"`
}

// parkPoison commits one event of ordering key ok, reads it and parks it as poison, as a
// cycle whose handler refused it does; it returns its parked id.
func parkPoison(ctx context.Context, st core.Store, l core.Lease, ok string) (string, error) {
	ev := benchEvent(0, ok)
	ev.ID = "ev_poison"
	if _, err := st.CommitPoll(ctx, l, core.Commit{Events: []core.OutboxEvent{ev}}); err != nil {
		return "", fmt.Errorf("commit the poison event: %w", err)
	}
	b, err := st.ReadOutbox(ctx, l, 1)
	if err != nil {
		return "", fmt.Errorf("read the poison event: %w", err)
	}
	if len(b.Entries) != 1 || b.Entries[0].ID != ev.ID {
		return "", fmt.Errorf("read %d entries for the poison event", len(b.Entries))
	}
	ent := b.Entries[0]
	row, err := json.Marshal(parkedEvent{Kind: "poison", ID: ent.ID, Error: "bench: refused", Errors: []string{"bench: refused"}, Attempts: 1,
		Event: parkedEntry{ID: ent.ID, OK: ent.OrderingKey, EV: string(ent.Envelope), Seq: ent.Seq}, ParkedAt: time.Now().UnixMilli()})
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	if err := st.Park(ctx, l, core.Parking{Poison: []core.Poison{{Entry: ent, ParkedID: ent.ID, Row: row}}}); err != nil {
		return "", fmt.Errorf("park the poison event: %w", err)
	}
	return ent.ID, nil
}

// retryOp is Parked().Retry of id from the engine without the poller's definition.
func (s *scriptRun) retryOp(ctx context.Context, key watukuytype.Key, id string) func() error {
	return func() error {
		n, err := s.wk.Parked().Retry(ctx, key, id)
		if err == nil && n != 1 {
			err = fmt.Errorf("retried %d rows of 1", n)
		}
		return err
	}
}

// prepareParkedRetry parks a poison event, then commits n events of other ordering keys
// after it, left pending.
func prepareParkedRetry(ctx context.Context, s *scriptRun, key watukuytype.Key, n int) (func() error, error) {
	var id string
	err := withLease(ctx, s.st, key, func(l core.Lease) (err error) {
		if id, err = parkPoison(ctx, s.st, l, "poison"); err != nil {
			return err
		}
		_, err = commitEvents(ctx, s.st, l, n, func(i int) string { return fmt.Sprintf("ok-%07d", i) })
		return err
	})
	if err != nil {
		return nil, err
	}
	if snap, err := s.st.Inspect(ctx, key); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	} else if snap.OutboxLen != int64(n) {
		return nil, fmt.Errorf("the outbox holds %d events of %d", snap.OutboxLen, n)
	}
	return s.retryOp(ctx, key, id), nil
}

// prepareHeldRetry parks a poison event, then commits n events of its ordering key, which
// join its held events.
func prepareHeldRetry(ctx context.Context, s *scriptRun, key watukuytype.Key, n int) (func() error, error) {
	var id string
	err := withLease(ctx, s.st, key, func(l core.Lease) (err error) {
		if id, err = parkPoison(ctx, s.st, l, "hot"); err != nil {
			return err
		}
		diverted, err := commitEvents(ctx, s.st, l, n, func(int) string { return "hot" })
		if err == nil && diverted != n {
			err = fmt.Errorf("%d of %d events joined the held ones", diverted, n)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.retryOp(ctx, key, id), nil
}

// prepareClaim puts n keys due now into the poller's due set (ZADD, a thousand members a
// command: the due set is the claim's whole state) and claims 100 of them.
func prepareClaim(ctx context.Context, s *scriptRun, _ watukuytype.Key, n int) (func() error, error) {
	now, err := s.e.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	due := float64(now.Add(-time.Second).UnixMilli())
	dueKey := s.st.DueKey(pollerName)
	// The due set holds these n keys alone: the other workloads' keys (a retry makes its key
	// due now) leave it.
	if err := s.e.rdb.Del(ctx, dueKey).Err(); err != nil {
		return nil, fmt.Errorf("empty the due set: %w", err)
	}
	for from := 0; from < n; from += 100_000 {
		if _, err := s.e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < min(from+100_000, n); i += 1000 {
				zs := make([]redis.Z, 0, 1000)
				for j := i; j < min(i+1000, n); j++ {
					zs = append(zs, redis.Z{Score: due, Member: fmt.Sprintf("%s|p%07d", pollerName, j)})
				}
				p.ZAdd(ctx, dueKey, zs...)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("fill the due set: %w", err)
		}
	}
	return func() error {
		keys, err := s.st.ClaimDue(ctx, 100, 0, []string{pollerName})
		if err == nil && len(keys) != min(100, n) {
			err = fmt.Errorf("claimed %d keys of %d", len(keys), min(100, n))
		}
		return err
	}, nil
}

// benchItem is the stored row of tracked item i (about 300 bytes).
func benchItem(i int) []byte {
	return fmt.Appendf(nil, `{"status":"paid","id":"ord-%07d","currency":"EUR","total":%d.95,"customer":{"name":"Zoë Müller","email":"zoe%d@example.com"},"updated_at":"2026-11-29T10:%02d:00Z","version":1}`, i, i, i, i%60)
}

// prepareDelete commits n tracked items and returns partitions delete of the key, from the
// engine without the poller's definition.
func prepareDelete(ctx context.Context, s *scriptRun, key watukuytype.Key, n int) (func() error, error) {
	err := withLease(ctx, s.st, key, func(l core.Lease) error {
		for from := 0; from < n; from += commitBatch {
			ups := make([]core.Upsert, 0, commitBatch)
			for i := from; i < min(from+commitBatch, n); i++ {
				ups = append(ups, core.Upsert{Identity: fmt.Sprintf("ord-%07d", i), Row: benchItem(i)})
			}
			if _, err := s.st.CommitPoll(ctx, l, core.Commit{Upserts: ups}); err != nil {
				return fmt.Errorf("commit items %d-%d: %w", from, from+len(ups)-1, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if snap, err := s.st.Inspect(ctx, key); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	} else if snap.Items != int64(n) {
		return nil, fmt.Errorf("the key tracks %d items of %d", snap.Items, n)
	}
	return func() error { return s.wk.Partitions().Delete(ctx, key) }, nil
}

// tombstoneRetention is how long the tombstones of LongestScripts are kept.
const tombstoneRetention = time.Hour

// benchClock is a clock for the store's scripts that the tombstones' workload moves.
type benchClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *benchClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *benchClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// prepareTombstones commits n tombstones of one generation (a store on a test clock, the
// server's time at the start), moves the clock past their retention and returns the commits
// that trim them, under one lease, until none is left.
func prepareTombstones(ctx context.Context, s *scriptRun, key watukuytype.Key, n int) (func() error, error) {
	now, err := s.e.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	clock := &benchClock{t: now}
	st, err := redisstore.New(s.e.rdb, redisstore.Options{Prefix: s.e.prefix, Clock: clock.now})
	if err != nil {
		return nil, fmt.Errorf("bench: store: %w", err)
	}
	gen := now.UnixMilli()
	err = withLease(ctx, st, key, func(l core.Lease) error {
		for from := 0; from < n; from += commitBatch {
			ts := make([]core.Tombstone, 0, commitBatch)
			for i := from; i < min(from+commitBatch, n); i++ {
				ts = append(ts, core.Tombstone{Identity: fmt.Sprintf("ord-%07d", i), Gen: gen})
			}
			if _, err := st.CommitPoll(ctx, l, core.Commit{Tombstones: ts, TombstoneRetention: tombstoneRetention}); err != nil {
				return fmt.Errorf("commit tombstones %d-%d: %w", from, from+len(ts)-1, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	gone := st.Key(key, "gone")
	if c, err := s.e.rdb.ZCard(ctx, gone).Result(); err != nil {
		return nil, fmt.Errorf("ZCARD %s: %w", gone, err)
	} else if c != int64(n) {
		return nil, fmt.Errorf("%s holds %d tombstones of %d", gone, c, n)
	}
	clock.add(tombstoneRetention + time.Minute)
	return func() error {
		return withLease(ctx, st, key, func(l core.Lease) error {
			for range n/commitBatch + 2 {
				if _, err := st.CommitPoll(ctx, l, core.Commit{TombstoneRetention: tombstoneRetention}); err != nil {
					return fmt.Errorf("commit: %w", err)
				}
				if c, err := s.e.rdb.ZCard(ctx, gone).Result(); err != nil || c == 0 {
					return err
				}
			}
			c, _ := s.e.rdb.ZCard(ctx, gone).Result()
			return fmt.Errorf("%d tombstones left after %d commits", c, n/commitBatch+2)
		})
	}, nil
}

// ChurnGoal is the most Redis keys a poller of one config partition may hold once partitions
// that came and went have left their deletion marks behind.
const ChurnGoal = 10

// Churn measures what partitions that came and went leave behind: o.ChurnKeys partitions
// added with partitions add to a poller of one config partition, each polled once (a cycle)
// and deleted with partitions delete, 16 at a time, through an engine holding the poller's
// definition; then, after redisstore.MarkTTL (waited out on the server), the Redis keys of
// the poller are counted: those under its keys' hash tags ({bench|...}) and its own global
// ones (due set, registry index and leaves). It checks that one of the partitions added back
// starts above the deleted ones' epochs (the poller's high-water mark). Value: that count;
// baseline: the count before the churn.
func Churn(ctx context.Context, o Options) (Result, error) {
	n := o.ChurnKeys
	r, t0 := start("churn-keys")
	r.Unit, r.BaselineOf, r.Goal = "keys", "the poller's keys before the churn (one config partition), same run", fmt.Sprintf("<= %d", ChurnGoal)
	e, st, err := openStore(ctx, o, "churn")
	if err != nil {
		return r, err
	}
	defer e.close()
	p := noopPoller(1, 0)
	eng, err := newEngine(st, "bench", p, watukuytype.Hooks{})
	if err != nil {
		return r, err
	}
	if err := eng.Setup(ctx); err != nil {
		return r, fmt.Errorf("register: %w", err)
	}
	if _, err := runFirstCycles(ctx, eng, keysOf(p), 1); err != nil {
		return r, err
	}
	before, _, err := pollerKeys(ctx, e, st, pollerName)
	if err != nil {
		return r, err
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("c%07d", i)
	}
	var deletedEpoch int64
	churn := func(part string) error {
		k := watukuytype.Key{Poller: pollerName, Partition: part}
		if err := eng.AddPartition(ctx, k); err != nil {
			return fmt.Errorf("partitions add %s: %w", part, err)
		}
		if rep := eng.RunCycle(ctx, k); rep.Outcome != watukuytype.Ran || rep.Err != nil {
			return fmt.Errorf("cycle of %s: outcome %v: %w", part, rep.Outcome, rep.Err)
		}
		if part == parts[0] {
			ki, err := eng.Inspect(ctx, k)
			if err != nil {
				return fmt.Errorf("inspect %s: %w", part, err)
			}
			deletedEpoch = ki.LeaseEpoch
		}
		if err := eng.DeletePartition(ctx, k); err != nil {
			return fmt.Errorf("partitions delete %s: %w", part, err)
		}
		return nil
	}
	t := time.Now()
	if err := eachConcurrently(ctx, parts, 16, churn); err != nil {
		return r, err
	}
	churned := time.Since(t)
	deleted := time.Now()
	withMarks, _, err := pollerKeys(ctx, e, st, pollerName)
	if err != nil {
		return r, err
	}
	retiredKey := e.prefix + ":{global}:retired"
	marks, err := e.rdb.HGet(ctx, retiredKey, pollerName).Result()
	if err != nil {
		return r, fmt.Errorf("the high-water marks of %s in %s: %w", pollerName, retiredKey, err)
	}
	es, fs, _ := strings.Cut(marks, " ")
	retiredEpoch, err1 := strconv.ParseInt(es, 10, 64)
	retiredFloor, err2 := strconv.ParseInt(fs, 10, 64)
	if err1 != nil || err2 != nil {
		return r, fmt.Errorf("the high-water marks of %s in %s: %q is not \"epoch floor\"", pollerName, retiredKey, marks)
	}
	if err := waitUntil(ctx, deleted.Add(redisstore.MarkTTL+time.Second)); err != nil {
		return r, err
	}
	after, kinds, err := pollerKeys(ctx, e, st, pollerName)
	if err != nil {
		return r, err
	}
	// One of them added back, its marks gone: it starts above the poller's high-water mark.
	k := watukuytype.Key{Poller: pollerName, Partition: parts[0]}
	if err := eng.AddPartition(ctx, k); err != nil {
		return r, fmt.Errorf("partitions add %s again: %w", parts[0], err)
	}
	if rep := eng.RunCycle(ctx, k); rep.Outcome != watukuytype.Ran || rep.Err != nil {
		return r, fmt.Errorf("cycle of %s added again: outcome %v: %w", parts[0], rep.Outcome, rep.Err)
	}
	ki, err := eng.Inspect(ctx, k)
	if err != nil {
		return r, fmt.Errorf("inspect %s added again: %w", parts[0], err)
	}
	if ki.LeaseEpoch <= retiredEpoch || ki.LeaseEpoch <= deletedEpoch {
		return r, fmt.Errorf("%s added again after its deletion was forgotten has epoch %d, not above the deleted one's %d (high-water mark %d)",
			parts[0], ki.LeaseEpoch, deletedEpoch, retiredEpoch)
	}
	r.Value, r.Baseline = float64(after), float64(before)
	r.meet(after <= ChurnGoal)
	r.Details = map[string]float64{"partitionsChurned": float64(n), "keysWithMarks": float64(withMarks), "retiredEpoch": float64(retiredEpoch),
		"retiredFloor": float64(retiredFloor), "deletedEpoch": float64(deletedEpoch), "epochAddedAgain": float64(ki.LeaseEpoch),
		"churnSeconds": churned.Seconds()}
	for kind, c := range kinds {
		r.Details["keys:"+kind] = float64(c)
	}
	r.Notes = fmt.Sprintf("%d partitions added (partitions add), polled once and deleted (partitions delete), 16 at a time, in %.1fs, by an engine holding the poller's definition; "+
		"the poller's Redis keys ({%s|...} and its due set, registry index and leaves) counted %v after the last delete (the deletion marks' TTL + 1s): %d, "+
		"%d before the marks expired; the high-water marks (%s) hold %q; %s added again started at epoch %d, above the deleted one's %d",
		n, churned.Seconds(), pollerName, redisstore.MarkTTL+time.Second, after, withMarks, retiredKey, marks, parts[0], ki.LeaseEpoch, deletedEpoch)
	r.Duration = time.Since(t0)
	return r, nil
}

// pollerKeys counts the Redis keys of poller: those under its keys' hash tags
// ({poller|partition}) and its own global ones (due set, registry index and leaves); also by
// kind (kindOf).
func pollerKeys(ctx context.Context, e *env, st *redisstore.Store, poller string) (int, map[string]int, error) {
	kinds := map[string]int{}
	total := 0
	index := e.prefix + ":{global}:keys:" + poller
	for _, pat := range []string{e.prefix + ":{" + poller + "|*", index + "|*"} {
		it := e.rdb.Scan(ctx, 0, pat, 1000).Iterator()
		for it.Next(ctx) {
			kinds[kindOf(e.prefix, it.Val())]++
			total++
		}
		if err := it.Err(); err != nil {
			return 0, nil, fmt.Errorf("scan %s: %w", pat, err)
		}
	}
	for _, k := range []string{st.DueKey(poller), index} {
		n, err := e.rdb.Exists(ctx, k).Result()
		if err != nil {
			return 0, nil, fmt.Errorf("exists %s: %w", k, err)
		}
		if n == 1 {
			kinds[kindOf(e.prefix, k)]++
			total++
		}
	}
	return total, kinds, nil
}
