// Package redisstore implements core.Store on go-redis. Every step of the commit protocol is
// one Lua script from internal/luascripts; every key of a (poller, partition) shares the hash
// tag {poller|partition}, so each script touches one slot and the store runs on Redis Cluster
// as on one node.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// Options configures a Store.
type Options struct {
	// Prefix starts every key; default "wk". Deployments sharing a Redis use different ones.
	Prefix string
	// Clock overrides the Redis server clock (TIME) for tests; nil uses the server's. Only
	// code inside this module can set it: production always runs on the server's clock.
	Clock func() time.Time
	// WaitReplicas, when > 0, makes every commit and every outbox read wait (WAIT, on the same
	// connection) until that many replicas have it, up to WaitTimeout (default 1s): the engine
	// delivers events only once their commit is replicated, so a failover to a replica never
	// loses a commit whose events reached the handler. For Redis with replicas (Sentinel,
	// Cluster with replicas).
	WaitReplicas int
	WaitTimeout  time.Duration
}

// Store is core.Store on Redis.
type Store struct {
	rdb     redis.UniversalClient
	prefix  string
	clock   func() time.Time
	scripts map[string]*redis.Script
	writes  atomic.Uint64 // write ids of fenced scripts that must not apply twice
	waitN   int
	waitFor time.Duration
	steps   []Step        // the layout's migration steps (layoutSteps; tests plug one in)
	markTTL time.Duration // how long a deletion mark lives (MarkTTL)
	batch   *batcher      // the cycles' short scripts, sent together
	// oneServer: rdb is a *redis.Client, and no server refused a script across slots (a
	// cluster-mode node behind a plain client does): a key's first Begin reads its seed from
	// the registry in its own script. Otherwise the registry is read first (seeded).
	oneServer atomic.Bool
}

var _ core.Store = (*Store)(nil)

// New returns a store on rdb (a single-node or cluster client).
func New(rdb redis.UniversalClient, opts Options) (*Store, error) {
	_, cluster := rdb.(*redis.ClusterClient)
	s := &Store{rdb: rdb, prefix: opts.Prefix, clock: opts.Clock, scripts: map[string]*redis.Script{}, waitN: opts.WaitReplicas, waitFor: opts.WaitTimeout,
		steps: layoutSteps(), markTTL: MarkTTL, batch: newBatcher(rdb, cluster)}
	_, plain := rdb.(*redis.Client) // a Ring or a cluster spreads the registry and the keys
	s.oneServer.Store(plain)
	if s.waitFor <= 0 {
		s.waitFor = time.Second
	}
	if s.prefix == "" {
		s.prefix = "wk"
	}
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q must not contain braces", s.prefix)
	}
	for _, name := range luascripts.Names() {
		src, err := luascripts.Source(name)
		if err != nil {
			return nil, err
		}
		s.scripts[name] = redis.NewScript(src)
	}
	return s, nil
}

// Key names: K = prefix:{poller|partition}.
func (s *Store) k(key watukuytype.Key, suffix string) string {
	return s.prefix + ":{" + key.Poller + "|" + key.Partition + "}:" + suffix
}
func (s *Store) pollersKey() string { return s.prefix + ":{global}:pollers" }
func (s *Store) layoutKey() string  { return s.prefix + ":{global}:layout" }

// dueKey is the due set of poller's keys. One set per poller, so that a claim reads only the
// pollers it runs; all share the {global} tag, so one script can claim across several.
func (s *Store) dueKey(poller string) string { return s.prefix + ":{global}:due:" + poller }

// WakeChannel is the pub/sub channel on which trigger and resume wake the schedulers.
func (s *Store) WakeChannel() string { return s.prefix + ":{global}:wake" }

// Prefix is the deployment's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// CheckEviction returns the server's maxmemory-policy and an error unless it is noeviction:
// an evicted lease or outbox would break the guarantees.
func (s *Store) CheckEviction(ctx context.Context) (string, error) {
	var policy string
	check := func(ctx context.Context, c *redis.Client) error {
		v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return fmt.Errorf("redisstore: read maxmemory-policy: %w", err)
		}
		policy = v["maxmemory-policy"]
		if policy != "noeviction" {
			return fmt.Errorf("redisstore: maxmemory-policy is %q on %s; watukuy needs noeviction (evicted leases or outboxes lose events)", policy, c.Options().Addr)
		}
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return policy, cc.ForEachShard(ctx, check)
	}
	c, ok := s.rdb.(*redis.Client)
	if !ok {
		return "", fmt.Errorf("redisstore: cannot check maxmemory-policy on a %T", s.rdb)
	}
	return policy, check(ctx, c)
}

// Key returns the Redis key of one of key's structures (state, items, outbox, parked, holds,
// held, ...), for tests and tools.
func (s *Store) Key(key watukuytype.Key, suffix string) string { return s.k(key, suffix) }

// DueKey is the due set of poller's keys (member "poller|partition", score: due time ms),
// for tests and tools.
func (s *Store) DueKey(poller string) string { return s.dueKey(poller) }

// nowArg is the clock override passed to scripts ("" = the server's TIME).
func (s *Store) nowArg() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock().UnixMilli(), 10)
}

// nowOrLocal is the test clock, else this host's.
func (s *Store) nowOrLocal() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

func (s *Store) now(ctx context.Context) (time.Time, error) {
	if s.clock != nil {
		return s.clock(), nil
	}
	return s.rdb.Time(ctx).Result()
}

// newToken makes a lease token: random, so that no two grants share one even when a failover
// makes an epoch repeat.
func newToken() (string, error) {
	// 64 random bits in 11 characters: the token stays in every key's state hash,
	// and it only has to tell apart the grants that share one key's epoch.
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redisstore: lease token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// ClaimDue implements core.Store. Without poller names it claims for every poller of the
// pollers hash (one more round trip to read their names).
func (s *Store) ClaimDue(ctx context.Context, limit int, claimTimeout time.Duration, pollers []string) ([]watukuytype.Key, error) {
	r, err := s.claim(ctx, limit, claimTimeout, 0, pollers)
	return r.Keys, err
}

// claim runs claim_due.lua over the due sets of pollers (every registered poller's when
// none), with the claim's mark (0: none).
func (s *Store) claim(ctx context.Context, limit int, claimTimeout time.Duration, mark int, pollers []string) (claimDueReply, error) {
	pollers, err := s.pollerNames(ctx, pollers)
	if err != nil || len(pollers) == 0 {
		return claimDueReply{}, err
	}
	return run(ctx, s, nil, claimDueArgs{Now: s.nowArg(), Limit: limit, ClaimTimeout: claimTimeout, Grace: core.ClaimGrace,
		DefaultClaim: core.DefaultLeaseTTL + core.ClaimGrace, Mark: mark, Pollers: pollers})
}

// pollerNames is pollers, or when it is empty every poller of the pollers hash (one round
// trip).
func (s *Store) pollerNames(ctx context.Context, pollers []string) ([]string, error) {
	if len(pollers) > 0 {
		// Each once: a poller named twice would have its due set read twice by one claim,
		// and its keys claimed twice.
		unique := make([]string, 0, len(pollers))
		for _, p := range pollers {
			if !slices.Contains(unique, p) {
				unique = append(unique, p)
			}
		}
		return unique, nil
	}
	names, err := s.rdb.HKeys(ctx, s.pollersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: read the poller names in %s: %w", s.pollersKey(), err)
	}
	return names, nil
}

// ClaimForEnqueue claims like ClaimDue, for window only (whole milliseconds, at least one),
// with scores marked for ConfirmClaims: a scheduler's claim, held on once its tasks are
// enqueued.
func (s *Store) ClaimForEnqueue(ctx context.Context, limit int, window time.Duration, pollers []string) (core.Claim, error) {
	if window < time.Millisecond || window%time.Millisecond != 0 {
		return core.Claim{}, fmt.Errorf("redisstore: a claim window of %s: want whole milliseconds, at least one", window)
	}
	// A mark of the claim's own: another claim of the same key in the same millisecond (after
	// a trigger) has another but once in 1023, so a late confirmation of this one leaves it.
	mark := 1 + mrand.IntN(1023)
	r, err := s.claim(ctx, limit, window, mark, pollers)
	return core.Claim{Keys: r.Keys, At: r.At, Window: window, Mark: mark}, err
}

// ConfirmClaims holds on to keys of claim c whose tasks are enqueued: for claimTimeout, or (0)
// each key's lease TTL plus core.ClaimGrace, as long as a key's due time is still the one c
// wrote (one round trip). A scheduler claims with a short window and confirms after its
// enqueue, so a scheduler that dies in between leaves its keys claimed for the window only.
func (s *Store) ConfirmClaims(ctx context.Context, c core.Claim, keys []watukuytype.Key, claimTimeout time.Duration) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := run(ctx, s, nil, confirmClaimsArgs{Now: s.nowArg(), Claim: c, ClaimTimeout: claimTimeout, Grace: core.ClaimGrace,
		DefaultClaim: core.DefaultLeaseTTL + core.ClaimGrace, Keys: keys}); err != nil {
		return fmt.Errorf("redisstore: hold on to %d claimed keys: %w", len(keys), err)
	}
	return nil
}

// NextDue returns the earliest due entry among the named pollers' due sets (one pipelined
// round trip): the key and when it is due, or the zero key when they are empty. A claimed key
// is due when its claim lapses.
func (s *Store) NextDue(ctx context.Context, pollers []string) (watukuytype.Key, time.Time, error) {
	key, at, _, err := s.earliestDue(ctx, pollers, false)
	return key, at, err
}

// DueIn returns how long until the earliest entry of the named pollers' due sets (every
// registered poller's when none) is due by the server's clock, 0 when one is due now, and
// false when the sets are empty: a scheduler whose claim came back short sleeps that long
// rather than its whole idle period (one round trip; two without poller names).
func (s *Store) DueIn(ctx context.Context, pollers []string) (time.Duration, bool, error) {
	pollers, err := s.pollerNames(ctx, pollers)
	if err != nil {
		return 0, false, err
	}
	key, at, now, err := s.earliestDue(ctx, pollers, true)
	if err != nil || key == (watukuytype.Key{}) {
		return 0, false, err
	}
	return max(0, at.Sub(now)), true, nil
}

// earliestDue reads the first entry of each due set, and the server's time (the store's
// clock when it has one) when withNow, in one pipelined round trip.
func (s *Store) earliestDue(ctx context.Context, pollers []string, withNow bool) (key watukuytype.Key, at, now time.Time, err error) {
	cmds := make([]*redis.ZSliceCmd, len(pollers))
	var tc *redis.TimeCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if withNow && s.clock == nil {
			tc = p.Time(ctx)
		}
		for i, name := range pollers {
			cmds[i] = p.ZRangeWithScores(ctx, s.dueKey(name), 0, 0)
		}
		return nil
	}); err != nil {
		return key, at, now, fmt.Errorf("redisstore: read the due sets: %w", err)
	}
	switch {
	case tc != nil:
		now = tc.Val()
	case withNow:
		now = s.clock()
	}
	for _, c := range cmds {
		for _, z := range c.Val() {
			k, err := watukuytype.ParseKey(fmt.Sprint(z.Member))
			if t := time.UnixMilli(int64(z.Score)); err == nil && (key == (watukuytype.Key{}) || t.Before(at)) {
				key, at = k, t
			}
		}
	}
	return key, at, now, nil
}

// HoldClaim implements core.Store.
func (s *Store) HoldClaim(ctx context.Context, key watukuytype.Key, until time.Time) error {
	if _, err := run(ctx, s, nil, holdClaimArgs{Now: s.nowArg(), Key: key, Until: until}); err != nil {
		return fmt.Errorf("redisstore: hold the claim of %s: %w", key.Describe(), err)
	}
	return nil
}

// seedMaxAge is how long a first Begin's seed (the registry read it carries) is good for; a
// deletion mark (MarkTTL) lives longer.
const seedMaxAge = 5 * time.Second

// Begin implements core.Store. A key without an epoch (never begun, or deleted and forgotten)
// is seeded from its poller's high-water marks and its registry entry: in the same script on
// one server (firstSeed); elsewhere it is answered fresh, they are read, and it is begun again
// with them as its seed, so that its epochs, lives and outbox ids start above
// every deleted key's; in a cycle or an operation, a key the registry does not hold live is
// deleted (and a state a trigger or pause left it goes).
func (s *Store) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, mode core.BeginMode) (core.BeginResult, error) {
	token, err := newToken()
	if err != nil {
		return core.BeginResult{}, err
	}
	a := beginArgs{Key: key, Owner: owner, TTL: ttl, Now: s.nowArg(), Mode: mode, Token: token, Seed: s.firstSeed()}
	r, err := run(ctx, s, nil, a)
	return s.seeded(ctx, a, r, err)
}

// firstSeed is the seed a Begin is first sent with: on one server the script reads it from
// the registry when the key has no epoch; elsewhere (the registry in another slot or on
// another shard) none, and a key without an epoch is answered fresh (seeded).
func (s *Store) firstSeed() string {
	if s.oneServer.Load() {
		return seedFromRegistry
	}
	return ""
}

// crossSlot reports whether err is a cluster-mode server's refusal of a script whose keys span
// slots (refused before it ran: nothing was written).
func crossSlot(err error) bool { return err != nil && strings.Contains(err.Error(), "CROSSSLOT") }

// seeded finishes a Begin whose reply r (or error) came back: a key without an epoch (Fresh)
// is begun again with its seed, read from the registry, up to twice more.
func (s *Store) seeded(ctx context.Context, a beginArgs, r beginReply, err error) (core.BeginResult, error) {
	for tries := 1; ; tries++ {
		if a.Seed == seedFromRegistry && crossSlot(err) {
			// A cluster-mode server behind a plain client: from now on the registry is read
			// first, as on a cluster.
			s.oneServer.Store(false)
			a.Seed, a.Now = "", s.nowArg()
			r, err = run(ctx, s, nil, a)
		}
		if err != nil || !r.Fresh {
			return r.BeginResult, err
		}
		if tries == 3 {
			return core.BeginResult{}, fmt.Errorf("redisstore: begin %s: its seed kept coming too late (%v each)", a.Key.Describe(), seedMaxAge)
		}
		reg, rerr := run(ctx, s, nil, readRegistryArgs{Key: a.Key})
		if rerr != nil {
			return core.BeginResult{}, fmt.Errorf("redisstore: begin %s: read the registry: %w", a.Key.Describe(), rerr)
		}
		live := reg.Entry != "" && !strings.HasPrefix(reg.Entry, "-")
		if !live && (a.Mode == core.BeginForCycle || a.Mode == core.BeginForOp) {
			a.Seed = "gone"
		} else {
			a.Seed = fmt.Sprintf("%d %d %d %d", reg.Epoch, reg.Floor, r.Now.UnixMilli(), seedMaxAge.Milliseconds())
		}
		a.Now = s.nowArg()
		r, err = run(ctx, s, nil, a)
	}
}

// Renew implements core.Store.
func (s *Store) Renew(ctx context.Context, l core.Lease) (core.Confirm, error) {
	return run(ctx, s, &l, renewArgs{Key: l.Key, fence: s.fenceOf(l), TTL: l.TTL})
}

// values is a command's values, none when it was not sent.
func values(c *redis.SliceCmd) []any {
	if c == nil {
		return nil
	}
	return c.Val()
}

// LoadRows implements core.Store: rows, tombstones and, as asked, parked invalid observations
// and the backfill's touched set, in one round trip.
func (s *Store) LoadRows(ctx context.Context, key watukuytype.Key, identities []string, want core.LoadWant) (core.StoredRows, error) {
	if len(identities) == 0 {
		return core.StoredRows{}, nil
	}
	var rc, pc *redis.SliceCmd
	var tc *redis.FloatSliceCmd
	var uc *redis.BoolSliceCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rc = p.HMGet(ctx, s.k(key, "items"), identities...)
		tc = p.ZMScore(ctx, s.k(key, "gone"), identities...)
		if want.Parked {
			pc = p.HMGet(ctx, s.k(key, "invalid"), identities...)
		}
		if want.Touched {
			members := make([]any, len(identities))
			for i, id := range identities {
				members[i] = id
			}
			uc = p.SMIsMember(ctx, s.k(key, "touched"), members...)
		}
		return nil
	}); err != nil {
		return core.StoredRows{}, fmt.Errorf("redisstore: load rows of %s: %w", key.Describe(), err)
	}
	out := core.StoredRows{Rows: make([][]byte, len(identities)), Tombstones: make([]int64, len(identities)),
		Parked: make([]core.ParkedRow, len(identities))}
	if uc != nil {
		out.Touched = uc.Val()
	}
	for i, x := range rc.Val() {
		if str, ok := x.(string); ok {
			out.Rows[i] = []byte(str)
		}
	}
	for i, f := range tc.Val() {
		out.Tombstones[i] = int64(f)
	}
	for i, x := range values(pc) {
		if str, ok := x.(string); ok {
			id, version, _ := strings.Cut(str, "\n") // as commit_poll.lua writes it
			out.Parked[i] = core.ParkedRow{ID: id, Version: version}
		}
	}
	return out, nil
}

// LoadPayloads implements core.Store.
func (s *Store) LoadPayloads(ctx context.Context, key watukuytype.Key, identities []string) ([][]byte, error) {
	if len(identities) == 0 {
		return nil, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.k(key, "payloads"), identities...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: load payloads of %s: %w", key.Describe(), err)
	}
	out := make([][]byte, len(identities))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i] = []byte(str)
		}
	}
	return out, nil
}

// Identities implements core.Store.
func (s *Store) Identities(ctx context.Context, key watukuytype.Key) ([]string, error) {
	// HSCAN in steps rather than one HKEYS: a million identities in one command would hold
	// Redis for a long time.
	var ids []string
	seen := map[string]bool{} // HSCAN may return a field twice
	for cursor := uint64(0); ; {
		kv, next, err := s.rdb.HScan(ctx, s.k(key, "items"), cursor, "", 2000).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: identities of %s: %w", key.Describe(), err)
		}
		for i := 0; i < len(kv); i += 2 {
			if !seen[kv[i]] {
				seen[kv[i]] = true
				ids = append(ids, kv[i])
			}
		}
		if cursor = next; cursor == 0 {
			return ids, nil
		}
	}
}

// listedKey is the hash of the identities a listing of lane that spans cycles has shown.
func (s *Store) listedKey(key watukuytype.Key, lane watukuytype.Lane) string {
	return s.k(key, "listed:"+string(lane))
}

// Listed implements core.Store: HSCAN in steps, as Identities.
func (s *Store) Listed(ctx context.Context, key watukuytype.Key, lane watukuytype.Lane) (map[string]bool, error) {
	out := map[string]bool{}
	for cursor := uint64(0); ; {
		kv, next, err := s.rdb.HScan(ctx, s.listedKey(key, lane), cursor, "", 2000).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: the identities a listing of %s showed: %w", key.Describe(), err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1] == "1"
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// CommitPoll implements core.Store.
func (s *Store) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	res, replicated, err := runReplicated(ctx, s, &l, commitPollArgs{Key: l.Key, writeFence: s.writeFenceOf(l), TTL: l.TTL, Commit: c})
	if err != nil {
		return core.CommitResult{}, err
	}
	res.Unreplicated = !replicated
	return res, nil
}

// ReadOutbox implements core.Store.
func (s *Store) ReadOutbox(ctx context.Context, l core.Lease, n int) (core.Batch, error) {
	b, replicated, err := runReplicated(ctx, s, &l, readOutboxArgs{Key: l.Key, fence: s.fenceOf(l), Count: n})
	if err != nil {
		return core.Batch{}, err
	}
	b.Unreplicated = !replicated
	return b, nil
}

// Ack implements core.Store.
func (s *Store) Ack(ctx context.Context, l core.Lease, acked []core.Entry) (bool, error) {
	r, err := run(ctx, s, &l, ackArgs{Key: l.Key, fence: s.fenceOf(l), Entries: acked})
	return r.Paused, err
}

// Park implements core.Store.
func (s *Store) Park(ctx context.Context, l core.Lease, p core.Parking) error {
	_, err := run(ctx, s, &l, parkArgs{Key: l.Key, fence: s.fenceOf(l), Parking: p})
	return err
}

// End implements core.Store. On one server end.lua writes the key's next due time itself (one
// script). Elsewhere the due set lives in another slot than the key's state, so the end script
// and the due write (set_due.lua) travel in one pipeline (one round trip), and when the end
// script reports a trigger that landed during the cycle, the due entry is made due now (the
// pipelined write may have pushed it to NextDue). When the end script reports LEASE_LOST the
// due entry is healed from the state (healDue); on one server only a missing one is given
// back. A re-sent end whose first attempt was applied (DUPLICATE) succeeded.
func (s *Store) End(ctx context.Context, l core.Lease, e core.EndRequest) error {
	err := s.end(ctx, l, e, s.oneServer.Load())
	if crossSlot(err) {
		// A cluster-mode server behind a plain client refused the script before running it:
		// from now on the due write goes apart, as on a cluster.
		s.oneServer.Store(false)
		e.Next = nil // sent with the refused End, and answered
		err = s.end(ctx, l, e, false)
	}
	return err
}

// end sends e's end script, its due write (in the script when folded, else set_due.lua beside
// it) and the next cycle's Begin when e carries one, in one round trip.
func (s *Store) end(ctx context.Context, l core.Lease, e core.EndRequest, folded bool) error {
	due := strconv.FormatInt(ms(e.NextDue), 10)
	end := endArgs{Key: l.Key, writeFence: s.writeFenceOf(l), State: e.State, Delete: e.Delete, Trigger: e.Trigger}
	if folded {
		end.Due = due
	}
	keys, argv := end.encode(s)
	endCall := &batchCall{lua: s.scripts[end.name()], keys: keys, argv: argv}
	calls := []*batchCall{endCall}
	var dueCall *batchCall
	var dueArgs setDueArgs
	if !folded {
		dueArgs = setDueArgs{Now: s.nowArg(), Key: l.Key, Due: due}
		dueKeys, dueArgv := dueArgs.encode(s)
		dueCall = &batchCall{lua: s.scripts[dueArgs.name()], keys: dueKeys, argv: dueArgv}
		calls = append(calls, dueCall)
	}
	var begin beginArgs
	if n := e.Next; n != nil {
		// The next cycle's Begin, on another key: independent of this End's outcome.
		token, err := newToken()
		if err != nil {
			return err
		}
		begin = beginArgs{Key: n.Key, Owner: n.Owner, TTL: n.TTL, Now: s.nowArg(), Mode: core.BeginForCycle, Token: token, Seed: s.firstSeed()}
		bk, bargv := begin.encode(s)
		calls = append(calls, &batchCall{lua: s.scripts[begin.name()], keys: bk, argv: bargv})
	}
	_, _ = s.batchRun(ctx, calls...)
	if e.Next != nil {
		s.answerNext(ctx, e.Next, begin, calls[len(calls)-1].cmd)
	}
	v, err := endCall.cmd.Result()
	if err != nil {
		err = s.mapErr(end.name(), &l, err)
		switch {
		case !watukuytype.IsLeaseLost(err):
		case folded:
			// The fenced-off script wrote no due time, and a newer claim's entry stays; but
			// an entry removed meanwhile (a stale task's unschedule of the claimed key) comes
			// back, as the repair sweep would give it.
			_, _ = s.repairKeys(ctx, l.Key.Poller, []core.RegKey{{Partition: l.Key.Partition}})
		default:
			s.healDue(ctx, l.Key)
		}
		return err
	}
	if dueCall != nil {
		dv, derr := dueCall.cmd.Result()
		if derr == nil {
			_, derr = dueArgs.decode(dv)
		}
		if derr != nil {
			return fmt.Errorf("redisstore: end %s: due entry: %w", l.Key.Describe(), derr)
		}
	}
	r, err := end.decode(v)
	if err != nil {
		return err
	}
	if r.Triggered && !folded {
		return s.setDue(ctx, l.Key, "0") // triggered during the cycle: due now
	}
	return nil
}

// healDue rewrites key's due entry from its state after an End that was fenced off (on a
// cluster, the set_due.lua beside it ran all the same): the current owner's next due time, or
// none for a deleted key (partitions delete ran meanwhile). Best effort: the repair sweep and
// the next claim cover a failure.
func (s *Store) healDue(ctx context.Context, key watukuytype.Key) {
	v, err := s.rdb.HMGet(ctx, s.k(key, "state"), statehash.NextDue, statehash.Deleted).Result()
	if err != nil {
		return
	}
	switch next, _ := v[0].(string); {
	case v[1] == "1":
		_ = s.setDue(ctx, key, "remove")
	case next != "":
		_ = s.setDue(ctx, key, next)
	}
}

// answerNext records in n the reply of its Begin sent with an End; a key without an epoch
// gets its seed now (seeded), as its own Begin would. An End whose context ended before it
// was sent leaves n unsent.
func (s *Store) answerNext(ctx context.Context, n *core.NextBegin, a beginArgs, c *redis.Cmd) {
	v, err := c.Result()
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return
	}
	n.Sent = true
	var r beginReply
	if err != nil {
		err = s.mapErr(a.name(), nil, err)
	} else {
		r, err = a.decode(v)
	}
	n.Result, n.Err = s.seeded(ctx, a, r, err)
}

// ReleaseParked implements core.Store.
func (s *Store) ReleaseParked(ctx context.Context, l core.Lease, retry bool, ids []string) (int, int, error) {
	r, err := run(ctx, s, &l, releaseParkedArgs{Key: l.Key, writeFence: s.writeFenceOf(l), Retry: retry, IDs: ids})
	return int(r.Released), int(r.Returned), err
}

// LeaseLive reports whether some instance holds key's lease now (server clock).
func (s *Store) LeaseLive(ctx context.Context, key watukuytype.Key) (bool, error) {
	exp, err := s.rdb.HGet(ctx, s.k(key, "state"), statehash.LeaseExpires).Int64()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now, err := s.now(ctx)
	if err != nil {
		return false, err
	}
	return time.UnixMilli(exp).After(now), nil
}

// SetDue implements core.Store.
func (s *Store) SetDue(ctx context.Context, key watukuytype.Key, at time.Time) error {
	return s.setDue(ctx, key, strconv.FormatInt(ms(at), 10))
}

// HandBack makes a claimed key due again after d by the server's clock, unless it is due now
// (a scheduler's claim that could not be enqueued).
func (s *Store) HandBack(ctx context.Context, key watukuytype.Key, d time.Duration) error {
	return s.setDue(ctx, key, "+"+strconv.FormatInt(d.Milliseconds(), 10))
}

// setDue writes (or removes) key's due entry unless it is due now (set_due.lua).
func (s *Store) setDue(ctx context.Context, key watukuytype.Key, due string) error {
	if _, err := run(ctx, s, nil, setDueArgs{Now: s.nowArg(), Key: key, Due: due}); err != nil {
		return fmt.Errorf("redisstore: due entry of %s: %w", key.Describe(), err)
	}
	return nil
}

// Unschedule implements core.Store.
func (s *Store) Unschedule(ctx context.Context, key watukuytype.Key) error {
	return s.setDue(ctx, key, "remove")
}

// ReadLog implements core.Store. Log entries are ids of the server's real time, in ms.
func (s *Store) ReadLog(ctx context.Context, key watukuytype.Key, from, to time.Time, after string, n int) ([]core.Entry, error) {
	start := strconv.FormatInt(ms(from), 10)
	if after != "" {
		start = "(" + after
	}
	msgs, err := s.rdb.XRangeN(ctx, s.k(key, "log"), start, strconv.FormatInt(ms(to), 10), int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: read the log of %s: %w", key.Describe(), err)
	}
	out := make([]core.Entry, len(msgs))
	for i, m := range msgs {
		str := func(f string) string { v, _ := m.Values[f].(string); return v }
		out[i] = core.Entry{StreamID: m.ID, ID: str("id"), OrderingKey: str("ok"), Envelope: []byte(str("ev")), Seq: m.ID}
	}
	return out, nil
}

// Pause implements core.Store: one script, so that a pause never lands in the deletion mark
// of a partitions delete that completed since the caller looked.
func (s *Store) Pause(ctx context.Context, key watukuytype.Key) error {
	paused, err := run(ctx, s, nil, pauseArgs{Key: key})
	if err == nil && !paused {
		err = core.ErrKeyDeleted
	}
	return err
}

// Resume implements core.Store.
func (s *Store) Resume(ctx context.Context, key watukuytype.Key) error {
	return s.trigger(ctx, key, true)
}

// Trigger implements core.Store.
func (s *Store) Trigger(ctx context.Context, key watukuytype.Key) error {
	return s.trigger(ctx, key, false)
}

// trigger makes key due now (and, to resume, lifts its pause): the state first, then the due
// entry, each refused (core.ErrKeyDeleted) when a partitions delete got there first.
func (s *Store) trigger(ctx context.Context, key watukuytype.Key, resume bool) error {
	written, err := run(ctx, s, nil, triggerArgs{Key: key, Resume: resume})
	if err == nil && written {
		written, err = run(ctx, s, nil, triggerDueArgs{Now: s.nowArg(), Key: key})
	}
	if err != nil {
		return fmt.Errorf("redisstore: trigger %s: %w", key.Describe(), err)
	}
	if !written {
		return core.ErrKeyDeleted
	}
	return s.rdb.Publish(ctx, s.WakeChannel(), key.String()).Err()
}

// ClearThrottle implements core.Store.
func (s *Store) ClearThrottle(ctx context.Context, key watukuytype.Key) (time.Time, error) {
	var until *redis.StringCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		until = p.HGet(ctx, s.k(key, "state"), statehash.Throttled)
		p.HDel(ctx, s.k(key, "state"), statehash.Throttled)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return time.Time{}, fmt.Errorf("redisstore: clear the throttle window of %s: %w", key.Describe(), err)
	}
	v, err := until.Int64()
	if err != nil {
		return time.Time{}, nil // none (or not a time: removed all the same)
	}
	return time.UnixMilli(v), nil
}

// Inspect implements core.Store.
func (s *Store) Inspect(ctx context.Context, key watukuytype.Key) (core.Snapshot, error) {
	snaps, err := s.InspectMany(ctx, []watukuytype.Key{key})
	if err != nil {
		return core.Snapshot{}, err
	}
	return snaps[0], nil
}

// inspectCmds are one key's reads of InspectMany.
type inspectCmds struct {
	st                                   *redis.MapStringStringCmd
	outbox, held, items, parked, invalid *redis.IntCmd
	oldest                               *redis.XMessageSliceCmd
	waiting                              *redis.IntCmd
	nextRetry                            *redis.ZSliceCmd
}

// InspectMany implements core.Store: one pipeline reads every key's structures, the oldest
// entry of each outbox (its stream id is the server time it was added) and the server's TIME,
// which those entries' ages are counted by (and which is Snapshot.Now unless a test clock
// overrides it).
func (s *Store) InspectMany(ctx context.Context, keys []watukuytype.Key) ([]core.Snapshot, error) {
	cmds := make([]inspectCmds, len(keys))
	var serverTime *redis.TimeCmd
	// Ordering keys released later than now wait for a failed event's next try; now is this
	// host's clock here (the counts are for reading, not for deciding).
	after := "(" + strconv.FormatInt(ms(s.nowOrLocal()), 10)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			c := &cmds[i]
			c.st = p.HGetAll(ctx, s.k(key, "state"))
			c.outbox = p.XLen(ctx, s.k(key, "outbox"))
			c.oldest = p.XRangeN(ctx, s.k(key, "outbox"), "-", "+", 1)
			c.parked = p.ZCard(ctx, s.k(key, "parked-ids"))
			// Invalid items are parked as inv_..., poison events under their event ids (ev_...).
			c.invalid = p.ZLexCount(ctx, s.k(key, "parked-ids"), "[inv_", "(inv`")
			c.held = p.ZCard(ctx, s.k(key, "held"))
			c.items = p.HLen(ctx, s.k(key, "items"))
			c.waiting = p.ZCount(ctx, s.k(key, "released"), after, "+inf")
			c.nextRetry = p.ZRangeByScoreWithScores(ctx, s.k(key, "released"), &redis.ZRangeBy{Min: after, Max: "+inf", Count: 1})
		}
		serverTime = p.Time(ctx)
		return nil
	})
	if err != nil {
		return nil, err
	}
	now := serverTime.Val()
	if s.clock != nil {
		now = s.clock()
	}
	out := make([]core.Snapshot, len(keys))
	for i, c := range cmds {
		state := c.st.Val()
		lease := map[string]string{}
		for f, v := range state {
			if statehash.IsLeaseField(f) {
				lease[f] = v
				delete(state, f)
			}
		}
		snap := core.Snapshot{State: state, OutboxLen: c.outbox.Val(), Parked: c.parked.Val(), ParkedInvalid: c.invalid.Val(),
			Held: c.held.Val(), Items: c.items.Val(), Now: now, Waiting: c.waiting.Val()}
		if z := c.nextRetry.Val(); len(z) > 0 {
			snap.NextRetry = time.UnixMilli(int64(z[0].Score)).UTC()
		}
		if msgs := c.oldest.Val(); len(msgs) > 0 {
			if ms, ok := streamMillis(msgs[0].ID); ok {
				snap.OutboxOldest = time.UnixMilli(ms).UTC()
				snap.OutboxOldestAge = serverTime.Val().Sub(snap.OutboxOldest)
			}
		}
		snap.LeaseOwner = lease[statehash.LeaseOwner]
		if e, ok := lease[statehash.LeaseEpoch]; ok {
			snap.LeaseEpoch, _ = strconv.ParseInt(e, 10, 64)
		}
		if x, ok := lease[statehash.LeaseExpires]; ok {
			n, _ := strconv.ParseInt(x, 10, 64)
			snap.LeaseExpires = time.UnixMilli(n)
		}
		out[i] = snap
	}
	return out, nil
}

// streamMillis is the millisecond part of a stream id ("1700000000000-3").
func streamMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}

// ListParked implements core.Store.
func (s *Store) ListParked(ctx context.Context, key watukuytype.Key, prefix, after string, limit int) ([]core.ParkedJSON, error) {
	if limit <= 0 {
		return nil, nil
	}
	return run(ctx, s, nil, listParkedArgs{Key: key, Prefix: prefix, After: after, Limit: limit})
}

// CountParked implements core.Store.
func (s *Store) CountParked(ctx context.Context, keys []watukuytype.Key) ([]int64, error) {
	return s.cards(ctx, len(keys), func(i int) string { return s.k(keys[i], "parked-ids") })
}

// CountScheduled implements core.Store.
func (s *Store) CountScheduled(ctx context.Context, pollers []string) ([]int64, error) {
	return s.cards(ctx, len(pollers), func(i int) string { return s.dueKey(pollers[i]) })
}

// cards reads ZCARD of n sorted sets in one pipelined round trip.
func (s *Store) cards(ctx context.Context, n int, key func(int) string) ([]int64, error) {
	cmds := make([]*redis.IntCmd, n)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.ZCard(ctx, key(i))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("redisstore: count: %w", err)
	}
	out := make([]int64, n)
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// ParkedRows implements core.Store.
func (s *Store) ParkedRows(ctx context.Context, key watukuytype.Key, ids []string) ([][]byte, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vs, err := s.rdb.HMGet(ctx, s.k(key, "parked"), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: read parked rows of %s: %w", key.Describe(), err)
	}
	out := make([][]byte, len(vs))
	for i, v := range vs {
		if str, ok := v.(string); ok {
			out[i] = []byte(str)
		}
	}
	return out, nil
}
