package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// The typed contract between this package and the Lua scripts of internal/luascripts: one
// arguments type per script, whose encode gives KEYS and ARGV in the order of the script's
// header and whose decode checks the reply's every type, naming the script, the key and the
// field when the reply has another shape.

// script is one Lua script called with its arguments.
type script[R any] interface {
	// name is the script's file name without .lua.
	name() string
	// encode gives KEYS and ARGV, in the order the script's header lists them.
	encode(s *Store) (keys []string, argv []any)
	// decode reads the script's reply.
	decode(reply any) (R, error)
}

// Error codes the scripts fail with (redis.error_reply), recognised by their prefix.
const (
	// codeLeaseLost: the fence check found another grant's epoch or token, or an expired lease.
	codeLeaseLost = "LEASE_LOST"
	// codeNoScript: the server lost its script cache (restart, failover).
	codeNoScript = "NOSCRIPT"
)

// duplicate is the status reply of a write-once script whose write id was applied before.
const duplicate = "DUPLICATE"

// run executes sc (EVALSHA, loading the script on NOSCRIPT) and decodes its reply; a
// LEASE_LOST error becomes *watukuytype.LeaseLostError for l (nil for the unfenced scripts).
func run[R any](ctx context.Context, s *Store, l *core.Lease, sc script[R]) (R, error) {
	keys, argv := sc.encode(s)
	var v any
	var err error
	if lua := s.scripts[sc.name()]; batched[sc.name()] {
		v, err = s.batchRun(ctx, &batchCall{lua: lua, keys: keys, argv: argv})
	} else {
		v, err = lua.Run(ctx, s.rdb, keys, argv...).Result()
	}
	if err != nil {
		var zero R
		return zero, s.mapErr(sc.name(), l, err)
	}
	return sc.decode(v)
}

// batched names the short scripts of a cycle that go out with others' (batcher).
var batched = map[string]bool{"begin": true, "read_registry": true, "end": true, "set_due": true, "renew": true, "hold_claim": true}

// batchRun sends calls through the store's batcher and returns the first's reply; a call a
// server without the script refused (NOSCRIPT: restarted, failed over) is run again on its
// own with the script's source.
func (s *Store) batchRun(ctx context.Context, calls ...*batchCall) (any, error) {
	s.batch.run(ctx, calls...)
	for _, c := range calls {
		if redis.HasErrorPrefix(c.cmd.Err(), codeNoScript) {
			c.cmd = c.lua.Eval(ctx, s.rdb, c.keys, c.argv...) // EVAL caches the script too
		}
	}
	return calls[0].cmd.Result()
}

// runReplicated executes sc and, with WaitReplicas set, WAIT right after it on the same
// connection of the node that owns its first key, and reports whether enough replicas have
// the script's writes (and every write before them). Without WaitReplicas it is run,
// replicated.
func runReplicated[R any](ctx context.Context, s *Store, l *core.Lease, sc script[R]) (R, bool, error) {
	var zero R
	if s.waitN <= 0 {
		v, err := run(ctx, s, l, sc)
		return v, true, err
	}
	name := sc.name()
	keys, argv := sc.encode(s)
	node, ok := s.rdb.(*redis.Client)
	if cc, isCluster := s.rdb.(*redis.ClusterClient); isCluster {
		n, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return zero, false, fmt.Errorf("redisstore: %s: node of %s: %w", name, keys[0], err)
		}
		node, ok = n, true
	}
	if !ok {
		return zero, false, fmt.Errorf("redisstore: waitReplicas needs a *redis.Client or *redis.ClusterClient, not a %T", s.rdb)
	}
	lua := s.scripts[name]
	for attempt := 0; ; attempt++ {
		var cmd, wc *redis.Cmd
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = lua.EvalSha(ctx, p, keys, argv...)
			wc = p.Do(ctx, "wait", s.waitN, s.waitFor.Milliseconds())
			return nil
		})
		v, err := cmd.Result()
		if redis.HasErrorPrefix(err, codeNoScript) && attempt == 0 {
			if err := lua.Load(ctx, node).Err(); err != nil {
				return zero, false, fmt.Errorf("redisstore: %s: load: %w", name, err)
			}
			continue // WAIT must follow the script on its own connection: run both again
		}
		if err != nil {
			return zero, false, s.mapErr(name, l, err)
		}
		n, err := wc.Int64()
		if err != nil {
			return zero, false, fmt.Errorf("redisstore: %s: WAIT: %w", name, err)
		}
		r, err := sc.decode(v)
		return r, n >= int64(s.waitN), err
	}
}

// mapErr maps a script's LEASE_LOST error to *watukuytype.LeaseLostError for l, and names the script
// in any other.
func (s *Store) mapErr(name string, l *core.Lease, err error) error {
	if l != nil && redis.HasErrorPrefix(err, codeLeaseLost) {
		return &watukuytype.LeaseLostError{Key: l.Key, Epoch: l.Epoch, Reason: err.Error()}
	}
	return fmt.Errorf("redisstore: %s: %w", name, err)
}

// keysOf names key's structures, in the order given.
func (s *Store) keysOf(key watukuytype.Key, suffixes ...string) []string {
	keys := make([]string, len(suffixes))
	for i, suffix := range suffixes {
		keys[i] = s.k(key, suffix)
	}
	return keys
}

// replyError reports a script reply of an unexpected shape.
type replyError struct {
	Script string // the script's file name without .lua
	On     string // the key (or due sets) the script ran on
	Field  string // the field of the reply, e.g. "epoch" or "entries[2].envelope"
	Got    any
	Want   string
}

func (e *replyError) Error() string {
	got := fmt.Sprintf("%T %v", e.Got, e.Got)
	if e.Got == nil {
		got = "missing"
	}
	return fmt.Sprintf("redisstore: %s.lua on %s: reply field %s is %s, want %s", e.Script, e.On, e.Field, got, e.Want)
}

// reply reads one script reply. The first shape error sticks (err); reads after it return
// zero values, so a decoder reads every field and checks err once at the end.
type reply struct {
	script string
	on     string          // what the call was on, when not one key
	key    watukuytype.Key // the key it was on (on ""): described only for an error
	err    error
}

func (r *reply) fail(field string, got any, want string) {
	if r.err == nil {
		on := r.on
		if on == "" {
			on = r.key.Describe()
		}
		r.err = &replyError{Script: r.script, On: on, Field: field, Got: got, Want: want}
	}
}

// list reads an array of any length.
func (r *reply) list(v any, field string) []any {
	a, ok := v.([]any)
	if !ok {
		r.fail(field, v, "an array")
	}
	return a
}

// tuple reads an array of exactly n elements (n nils when it is not one).
func (r *reply) tuple(v any, field string, n int) []any {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		r.fail(field, v, fmt.Sprintf("an array of %d", n))
		return make([]any, n)
	}
	return a
}

func (r *reply) int(v any, field string) int64 {
	n, ok := v.(int64)
	if !ok {
		r.fail(field, v, "an integer")
	}
	return n
}

func (r *reply) str(v any, field string) string {
	str, ok := v.(string)
	if !ok {
		r.fail(field, v, "a string")
	}
	return str
}

// flag reads a 0 or 1.
func (r *reply) flag(v any, field string) bool {
	if v != int64(0) && v != int64(1) {
		r.fail(field, v, "0 or 1")
	}
	return v == int64(1)
}

func (r *reply) time(v any, field string) time.Time { return time.UnixMilli(r.int(v, field)) }

// strings reads an array of strings.
func (r *reply) strings(v any, field string) []string {
	a := r.list(v, field)
	out := make([]string, len(a))
	for i, x := range a {
		out[i] = r.str(x, fmt.Sprintf("%s[%d]", field, i))
	}
	return out
}

// members reads an array of due-set members as keys.
func (r *reply) members(v any, field string) []watukuytype.Key {
	a := r.list(v, field)
	var keys []watukuytype.Key
	for i, m := range a {
		f := fmt.Sprintf("%s[%d]", field, i)
		k, err := watukuytype.ParseKey(r.str(m, f))
		if err != nil && r.err == nil {
			r.fail(f, m, "a member poller|partition")
		}
		keys = append(keys, k)
	}
	if r.err != nil {
		return nil
	}
	return keys
}

// fence is ARGV[1..3] of every fenced script: the lease's epoch and token (the check that runs
// first) and the clock override.
type fence struct {
	Epoch int64
	Token string
	Now   string
}

func (f fence) argv(extra int) []any {
	return append(make([]any, 0, 3+extra), f.Epoch, f.Token, f.Now)
}

// writeFence is fence plus ARGV[4], the write id of a script whose effect must not happen
// twice when the client re-sends it.
type writeFence struct {
	fence
	Write string
}

func (f writeFence) argv(extra int) []any { return append(f.fence.argv(1+extra), f.Write) }

// fenceOf is l's fence.
func (s *Store) fenceOf(l core.Lease) fence {
	return fence{Epoch: l.Epoch, Token: l.Token, Now: s.nowArg()}
}

// writeFenceOf is l's fence with a fresh write id. Ids grow with every write of this store, so
// a late copy of an earlier write is recognised too (the scripts compare them as numbers).
func (s *Store) writeFenceOf(l core.Lease) writeFence {
	return writeFence{fence: s.fenceOf(l), Write: strconv.FormatUint(s.writes.Add(1), 10)}
}

// appendPairs appends a script section: the pair count, then field, value, ...
func appendPairs(args []any, m map[string]string) []any {
	args = append(args, len(m))
	for f, v := range m {
		args = append(args, f, v)
	}
	return args
}

// appendList appends a script section: the count, then the values.
func appendList(args []any, vs []string) []any {
	args = append(args, len(vs))
	for _, v := range vs {
		args = append(args, v)
	}
	return args
}

// appendEntries appends ack.lua's ids: the count of stream ids, the stream ids, then the held
// members.
func appendEntries(args []any, es []core.Entry) []any {
	var members []any
	n := 0
	for _, e := range es {
		if e.Member == "" {
			n++
		}
	}
	args = append(args, n)
	for _, e := range es {
		if e.Member == "" {
			args = append(args, e.StreamID)
		} else {
			members = append(members, e.Member)
		}
	}
	return append(args, members...)
}

// ackArgs call ack.lua.
type ackArgs struct {
	Key watukuytype.Key
	fence
	Entries []core.Entry
}

// ackReply is ack.lua's reply.
type ackReply struct {
	Acked  int64
	Paused bool
}

func (ackArgs) name() string { return "ack" }

func (a ackArgs) encode(s *Store) ([]string, []any) {
	return s.keysOf(a.Key, "state", "outbox", "held", "released"), appendEntries(a.fence.argv(1+len(a.Entries)), a.Entries)
}

func (a ackArgs) decode(v any) (ackReply, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 2)
	out := ackReply{Acked: r.int(t[0], "acked"), Paused: r.flag(t[1], "paused")}
	return out, r.err
}

// addKeyArgs call add_key.lua.
type addKeyArgs struct {
	Now   string
	Key   watukuytype.Key
	Entry string // the entry of an added key, a<ms>
}

func (addKeyArgs) name() string { return "add_key" }

func (a addKeyArgs) encode(s *Store) ([]string, []any) {
	return []string{s.keysKey(a.Key.Poller), s.dueKey(a.Key.Poller)}, []any{a.Now, a.Key.Poller, a.Key.Partition, a.Entry}
}

// decode reads the entry the key had ("" when none).
func (a addKeyArgs) decode(v any) (string, error) {
	r := reply{script: a.name(), key: a.Key}
	prev := r.str(v, "entry")
	return prev, r.err
}

// budgetPauseArgs call budget_pause.lua.
type budgetPauseArgs struct {
	Now    string
	Bucket string
	Pause  time.Duration
}

func (budgetPauseArgs) name() string { return "budget_pause" }

func (a budgetPauseArgs) encode(s *Store) ([]string, []any) {
	return []string{s.bucketKey(a.Bucket)}, []any{a.Now, a.Pause.Milliseconds()}
}

// decode reads the end of the pause in force.
func (a budgetPauseArgs) decode(v any) (time.Time, error) {
	r := reply{script: a.name(), on: "budget " + a.Bucket}
	until := r.time(v, "pausedUntil")
	return until, r.err
}

// budgetTakeArgs call budget_take.lua.
type budgetTakeArgs struct {
	Now string
	core.BudgetTake
}

func (budgetTakeArgs) name() string { return "budget_take" }

func (a budgetTakeArgs) encode(s *Store) ([]string, []any) {
	member := ""
	if a.Hold > 0 {
		member = a.Key.String()
	}
	return []string{s.bucketKey(a.Bucket), s.heldKey(a.Bucket)}, []any{a.Now, strconv.FormatFloat(float64(a.Interval)/1e3, 'f', 3, 64),
		a.Burst, a.Reserve, a.SitOut.Microseconds(), a.Hold.Microseconds(), member}
}

func (a budgetTakeArgs) decode(v any) (core.BudgetGrant, error) {
	r := reply{script: a.name(), on: "budget " + a.Bucket}
	t := r.tuple(v, "reply", 5)
	g := core.BudgetGrant{Taken: r.flag(t[0], "taken"), Wait: time.Duration(r.int(t[1], "wait")) * time.Microsecond,
		At: time.UnixMicro(r.int(t[3], "now")), Held: r.flag(t[4], "held")}
	if ms := r.int(t[2], "pausedUntil"); ms > 0 {
		g.PausedUntil = time.UnixMilli(ms)
	}
	return g, r.err
}

// beginArgs call begin.lua.
type beginArgs struct {
	Key   watukuytype.Key
	Owner string
	TTL   time.Duration
	Now   string
	Mode  core.BeginMode
	Token string
	// Seed is "" or, for a key without an epoch, "epoch floor at maxAge" (its poller's
	// high-water marks, read after the key's clock said at) or "gone" (no live key); or
	// "registry" on one server, where the script reads the seed itself.
	Seed string
}

// beginReply is begin.lua's reply: Fresh when the key has no epoch and needs a seed.
type beginReply struct {
	core.BeginResult
	Fresh bool
}

func (beginArgs) name() string { return "begin" }

var beginModes = map[core.BeginMode]string{core.BeginForCycle: "cycle", core.BeginForOp: "op", core.BeginForDelete: "delete", core.BeginForAdd: "add"}

func (a beginArgs) encode(s *Store) ([]string, []any) {
	keys := s.keysOf(a.Key, "state", "outbox", "released", "items", "invalid")
	argv := []any{a.Owner, a.TTL.Milliseconds(), a.Now, beginModes[a.Mode], a.Token, a.Seed}
	if a.Seed == seedFromRegistry {
		keys = append(keys, s.keysKey(a.Key.Poller), s.retiredKey())
		argv = append(argv, a.Key.Poller, a.Key.Partition)
	}
	return keys, argv
}

// seedFromRegistry is the seed of a Begin on one server: a key without an epoch is seeded
// from the registry in the same script, with no reply "fresh" and no second Begin.
const seedFromRegistry = "registry"

func (a beginArgs) decode(v any) (beginReply, error) {
	r := reply{script: a.name(), key: a.Key}
	var res beginReply
	status := ""
	if l := r.list(v, "reply"); len(l) > 0 {
		status = r.str(l[0], "status")
	} else {
		r.fail("status", nil, "a string")
	}
	switch status {
	case "fresh":
		t := r.tuple(v, "reply", 2)
		res.Fresh, res.Now = true, r.time(t[1], "now")
	case "deleted":
		r.tuple(v, "reply", 1)
		res.Status = core.BeginDeleted
	case "paused":
		r.tuple(v, "reply", 1)
		res.Status = core.BeginPaused
	case "notDue":
		t := r.tuple(v, "reply", 3)
		res.Status = core.BeginNotDue
		res.NextDue, res.Now = r.time(t[1], "nextDue"), r.time(t[2], "now")
	case "leased":
		t := r.tuple(v, "reply", 3)
		res.Status = core.BeginLeased
		res.LeaseExpires, res.Now = r.time(t[1], "expiresAt"), r.time(t[2], "now")
	case "ok":
		t := r.tuple(v, "reply", 8)
		res.Status = core.BeginOK
		res.Lease = core.Lease{Key: a.Key, Owner: a.Owner, Epoch: r.int(t[1], "epoch"), Token: a.Token, TTL: a.TTL}
		res.Now = r.time(t[2], "now")
		res.OutboxLen = r.int(t[3], "outboxLen")
		flat := r.list(t[4], "state")
		if len(flat)%2 != 0 {
			r.fail("state", t[4], "field, value pairs")
		}
		res.State = make(map[string]string, len(flat)/2)
		for i := 0; i+1 < len(flat); i += 2 {
			f, fok := flat[i].(string)
			v, vok := flat[i+1].(string)
			if !fok || !vok { // the field named only then: a name per field costs every Begin
				r.str(flat[i], fmt.Sprintf("state[%d]", i))
				r.str(flat[i+1], fmt.Sprintf("state[%d]", i+1))
			}
			res.State[f] = v
		}
		res.Released = r.int(t[5], "released")
		res.Items, res.InvalidIndexed = r.int(t[6], "items"), r.int(t[7], "invalidIndexed")
	default:
		r.fail("status", status, "fresh, deleted, paused, notDue, leased or ok")
	}
	if r.err != nil {
		return beginReply{}, r.err
	}
	return res, nil
}

// claimDueArgs call claim_due.lua.
type claimDueArgs struct {
	Now          string
	Limit        int
	ClaimTimeout time.Duration // a fixed claim for every key when not 0
	Grace        time.Duration // added to a poller's lease TTL
	// DefaultClaim is the claim of a poller whose entry records no lease TTL.
	DefaultClaim time.Duration
	// Mark, when not 0, marks the claimed scores for a confirmation (confirm_claims.lua):
	// Mark/1024 of a millisecond, 1..1023.
	Mark    int
	Pollers []string
}

// claimDueReply is claim_due.lua's reply: the claim's server time and the claimed keys.
type claimDueReply struct {
	At   int64
	Keys []watukuytype.Key
}

func (claimDueArgs) name() string { return "claim_due" }

func (a claimDueArgs) encode(s *Store) ([]string, []any) {
	keys := make([]string, 0, len(a.Pollers)+1)
	keys = append(keys, s.pollersKey())
	argv := make([]any, 0, 6+len(a.Pollers))
	argv = append(argv, a.Now, a.Limit, a.ClaimTimeout.Milliseconds(), a.Grace.Milliseconds(), a.DefaultClaim.Milliseconds(), a.Mark)
	for _, p := range a.Pollers {
		keys = append(keys, s.dueKey(p))
		argv = append(argv, p)
	}
	return keys, argv
}

func (a claimDueArgs) decode(v any) (claimDueReply, error) {
	r := reply{script: a.name(), on: "the due sets of " + strings.Join(a.Pollers, ", ")}
	t := r.list(v, "reply")
	if r.err != nil {
		return claimDueReply{}, r.err
	}
	if len(t) == 0 {
		r.fail("reply", v, "the claim's time, then the claimed members")
		return claimDueReply{}, r.err
	}
	out := claimDueReply{At: r.int(t[0], "at"), Keys: r.members(t[1:], "claimed")}
	return out, r.err
}

// confirmClaimsArgs call confirm_claims.lua.
type confirmClaimsArgs struct {
	Now          string
	Claim        core.Claim    // the claim being confirmed
	ClaimTimeout time.Duration // a fixed claim for every key when not 0
	Grace        time.Duration // added to a poller's lease TTL
	// DefaultClaim is the claim of a poller whose entry records no lease TTL.
	DefaultClaim time.Duration
	Keys         []watukuytype.Key
}

func (confirmClaimsArgs) name() string { return "confirm_claims" }

func (a confirmClaimsArgs) encode(s *Store) ([]string, []any) {
	keys, slots, pollers := s.dueSlots([]string{s.pollersKey()}, a.Keys)
	argv := []any{a.Now, a.ClaimTimeout.Milliseconds(), a.Grace.Milliseconds(), a.DefaultClaim.Milliseconds(),
		a.Claim.At, a.Claim.Window.Milliseconds(), a.Claim.Mark, len(pollers)}
	for _, p := range pollers {
		argv = append(argv, p)
	}
	for i, k := range a.Keys {
		argv = append(argv, k.String(), slots[i])
	}
	return keys, argv
}

// dueSlots appends the due set of each key's poller to keys, once per poller, and returns
// them with each key's due set's index in keys (1-based, as Lua counts KEYS) and the pollers
// in the order of their sets.
func (s *Store) dueSlots(keys []string, ks []watukuytype.Key) ([]string, []int, []string) {
	slot := map[string]int{}
	slots := make([]int, len(ks))
	var pollers []string
	for i, k := range ks {
		at, ok := slot[k.Poller]
		if !ok {
			keys = append(keys, s.dueKey(k.Poller))
			at = len(keys)
			slot[k.Poller] = at
			pollers = append(pollers, k.Poller)
		}
		slots[i] = at
	}
	return keys, slots, pollers
}

// decode reads the number of keys held on.
func (a confirmClaimsArgs) decode(v any) (int64, error) {
	r := reply{script: a.name(), on: fmt.Sprintf("%d claimed keys", len(a.Keys))}
	held := r.int(v, "held")
	return held, r.err
}

// commitPollArgs call commit_poll.lua.
type commitPollArgs struct {
	Key watukuytype.Key
	writeFence
	TTL    time.Duration
	Commit core.Commit
}

func (commitPollArgs) name() string { return "commit_poll" }

func (a commitPollArgs) encode(s *Store) ([]string, []any) {
	c := a.Commit
	argv := a.writeFence.argv(20 + 2*len(c.State) + 2*len(c.Count) + 2*len(c.Upserts) + len(c.Deletes) + 2*len(c.Tombstones) +
		len(c.Revived) + 3*len(c.Events) + 4*len(c.Invalid) + 2*len(c.Unpark) + len(c.Touched) + 2*len(c.Listed) +
		2*len(c.Payloads) + len(c.DropPayloads))
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	argv = append(argv, a.TTL.Milliseconds(), c.LogRetention.Milliseconds(), c.TombstoneRetention.Milliseconds(), flag(c.ClearTouched), flag(c.ClearListed))
	argv = appendPairs(argv, c.State)
	argv = append(argv, len(c.Count))
	for f, n := range c.Count {
		argv = append(argv, f, n)
	}
	argv = append(argv, len(c.Upserts))
	for _, u := range c.Upserts {
		argv = append(argv, u.Identity, u.Row)
	}
	argv = appendList(argv, c.Deletes)
	argv = append(argv, len(c.Tombstones))
	for _, t := range c.Tombstones {
		argv = append(argv, t.Identity, t.Gen)
	}
	argv = appendList(argv, c.Revived)
	argv = append(argv, len(c.Events))
	for _, e := range c.Events {
		argv = append(argv, e.ID, e.OrderingKey, e.Envelope)
	}
	argv = append(argv, len(c.Invalid))
	for _, p := range c.Invalid {
		argv = append(argv, p.ID, p.Identity, p.Version, p.Row)
	}
	argv = append(argv, len(c.Unpark))
	for _, p := range c.Unpark {
		argv = append(argv, p.ID, p.Identity)
	}
	argv = appendList(argv, c.Touched)
	argv = append(argv, len(c.Listed))
	for _, l := range c.Listed {
		argv = append(argv, l.Identity, flag(l.Valid))
	}
	argv = append(argv, len(c.Payloads))
	for _, p := range c.Payloads {
		argv = append(argv, p.Identity, p.Item)
	}
	argv = appendList(argv, c.DropPayloads)
	lane := c.ListedLane
	if lane == "" {
		lane = watukuytype.LaneLive // no listing in this commit: the key is named, not touched
	}
	keys := s.keysOf(a.Key, "state", "items", "outbox", "parked", "parked-ids", "log", "gone", "invalid", "touched", "holds", "held", "released")
	return append(keys, s.listedKey(a.Key, lane), s.k(a.Key, "payloads")), argv
}

// decode reads {expiresAt, paused, firstId, duplicate, diverted}; the events' stream ids
// follow from the first (Unreplicated is the caller's).
func (a commitPollArgs) decode(v any) (core.CommitResult, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 5)
	res := core.CommitResult{LeaseExpires: r.time(t[0], "expiresAt"), Paused: r.flag(t[1], "paused"), Duplicate: r.flag(t[3], "duplicate")}
	first := r.str(t[2], "firstId")
	for i, d := range r.list(t[4], "diverted") {
		n := r.int(d, fmt.Sprintf("diverted[%d]", i))
		if r.err == nil && (n < 0 || int(n) >= len(a.Commit.Events)) {
			r.fail(fmt.Sprintf("diverted[%d]", i), d, fmt.Sprintf("an event index below %d", len(a.Commit.Events)))
		}
		res.Diverted = append(res.Diverted, int(n))
	}
	if r.err != nil {
		return core.CommitResult{}, r.err
	}
	ids, err := streamIDs(first, len(a.Commit.Events))
	if err != nil {
		r.fail("firstId", first, "a stream id ms-seq")
		return core.CommitResult{}, r.err
	}
	res.StreamIDs = ids
	return res, nil
}

// streamIDs lists the n outbox ids commit_poll gave its events: first, then the same
// milliseconds with the sequence counted up.
func streamIDs(first string, n int) ([]string, error) {
	if n == 0 {
		return nil, nil
	}
	msPart, seqPart, ok := strings.Cut(first, "-")
	seq, err := strconv.ParseUint(seqPart, 10, 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("first stream id %q is malformed", first)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = msPart + "-" + strconv.FormatUint(seq+uint64(i), 10)
	}
	return ids, nil
}

// keyData are the structures of a key that delete_key.lua drops, in its KEYS order.
var keyData = []string{"state", "items", "outbox", "parked", "parked-ids", "holds", "held", "released", "log", "gone", "invalid", "touched",
	"listed:" + string(watukuytype.LaneLive), "listed:" + string(watukuytype.LaneReconcile), "payloads"}

// deleteKeyArgs call delete_key.lua.
type deleteKeyArgs struct {
	Key watukuytype.Key
	writeFence
	Revive bool // partitions add of a deleted key (else partitions delete)
}

// deleteKeyReply is delete_key.lua's reply: the marks the key reached.
type deleteKeyReply struct{ Epoch, Floor int64 }

func (deleteKeyArgs) name() string { return "delete_key" }

func (a deleteKeyArgs) encode(s *Store) ([]string, []any) {
	mode := "delete"
	if a.Revive {
		mode = "revive"
	}
	return s.keysOf(a.Key, keyData...), append(a.writeFence.argv(1), mode)
}

func (a deleteKeyArgs) decode(v any) (deleteKeyReply, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 2)
	out := deleteKeyReply{Epoch: r.int(t[0], "epoch"), Floor: r.int(t[1], "floor")}
	return out, r.err
}

// endArgs call end.lua.
type endArgs struct {
	Key watukuytype.Key
	writeFence
	State   map[string]string
	Delete  []string
	Trigger string // the trigger generation the cycle saw at Begin
	// Due, when set (one server only: the due set lives in another slot), is the next due
	// time (ms) the script writes into the poller's due set, as set_due.lua would.
	Due string
}

// endReply is end.lua's reply.
type endReply struct {
	// Triggered: a trigger landed during the cycle and the key stays due now.
	Triggered bool
	// Duplicate: the first attempt of this write was applied.
	Duplicate bool
}

func (endArgs) name() string { return "end" }

func (a endArgs) encode(s *Store) ([]string, []any) {
	argv := appendList(appendPairs(a.writeFence.argv(5+2*len(a.State)+len(a.Delete)), a.State), a.Delete)
	argv = append(argv, a.Trigger)
	if a.Due == "" {
		return s.keysOf(a.Key, "state"), argv
	}
	return []string{s.k(a.Key, "state"), s.dueKey(a.Key.Poller)}, append(argv, a.Key.String(), a.Due)
}

func (a endArgs) decode(v any) (endReply, error) {
	r := reply{script: a.name(), key: a.Key}
	switch v {
	case int64(1):
		return endReply{}, nil
	case int64(2):
		return endReply{Triggered: true}, nil
	case duplicate:
		return endReply{Duplicate: true}, nil
	}
	r.fail("reply", v, "1, 2 or "+duplicate)
	return endReply{}, r.err
}

// endDeleteArgs call end_delete.lua.
type endDeleteArgs struct {
	Key watukuytype.Key
	writeFence
	TTL time.Duration // the deletion mark's life
}

func (endDeleteArgs) name() string { return "end_delete" }

func (a endDeleteArgs) encode(s *Store) ([]string, []any) {
	return s.keysOf(a.Key, "state"), append(a.writeFence.argv(1), a.TTL.Milliseconds())
}

// decode reports whether the script ran (false: DUPLICATE, the first attempt did).
func (a endDeleteArgs) decode(v any) (bool, error) {
	r := reply{script: a.name(), key: a.Key}
	switch v {
	case int64(1):
		return true, nil
	case duplicate:
		return false, nil
	}
	r.fail("reply", v, "1 or "+duplicate)
	return false, r.err
}

// holdClaimArgs call hold_claim.lua.
type holdClaimArgs struct {
	Now   string
	Key   watukuytype.Key
	Until time.Time
}

func (holdClaimArgs) name() string { return "hold_claim" }

func (a holdClaimArgs) encode(s *Store) ([]string, []any) {
	return []string{s.dueKey(a.Key.Poller)}, []any{a.Now, a.Key.String(), ms(a.Until)}
}

// decode reports whether the claim was pushed forward.
func (a holdClaimArgs) decode(v any) (bool, error) {
	r := reply{script: a.name(), key: a.Key}
	held := r.flag(v, "reply")
	return held, r.err
}

// listParkedArgs call list_parked.lua.
type listParkedArgs struct {
	Key    watukuytype.Key
	Prefix string // of the ids listed ("" every row)
	After  string
	Limit  int
}

func (listParkedArgs) name() string { return "list_parked" }

func (a listParkedArgs) encode(s *Store) ([]string, []any) {
	return s.keysOf(a.Key, "parked", "parked-ids"), []any{a.After, a.Limit, a.Prefix}
}

func (a listParkedArgs) decode(v any) ([]core.ParkedJSON, error) {
	r := reply{script: a.name(), key: a.Key}
	flat := r.strings(v, "rows")
	if len(flat)%2 != 0 {
		r.fail("rows", v, "id, row pairs")
	}
	var out []core.ParkedJSON
	for i := 0; r.err == nil && i+1 < len(flat); i += 2 {
		out = append(out, core.ParkedJSON{ID: flat[i], Row: []byte(flat[i+1])})
	}
	return out, r.err
}

// pageRegistryArgs call page_registry.lua.
type pageRegistryArgs struct {
	Poller string
	After  *string // nil: from the first key
	Limit  int
}

func (pageRegistryArgs) name() string { return "page_registry" }

func (a pageRegistryArgs) encode(s *Store) ([]string, []any) {
	from, after := "0", ""
	if a.After != nil {
		from, after = "1", *a.After
	}
	return []string{s.keysKey(a.Poller)}, []any{from, after, a.Limit}
}

// decode reads {partition, entry, ...}.
func (a pageRegistryArgs) decode(v any) ([]string, error) {
	r := reply{script: a.name(), on: "the registry of poller " + a.Poller}
	flat := r.strings(v, "entries")
	if len(flat)%2 != 0 {
		r.fail("entries", v, "partition, entry pairs")
	}
	return flat, r.err
}

// parkArgs call park.lua.
type parkArgs struct {
	Key watukuytype.Key
	fence
	core.Parking
}

func (parkArgs) name() string { return "park" }

func (a parkArgs) encode(s *Store) ([]string, []any) {
	argv := append(a.fence.argv(3+5*len(a.Poison)+6*len(a.Wait)+4*len(a.Held)), len(a.Poison))
	for _, p := range a.Poison {
		argv = append(argv, p.Entry.StreamID, p.Entry.Member, p.ParkedID, p.Entry.OrderingKey, p.Row)
	}
	argv = append(argv, len(a.Wait))
	for _, w := range a.Wait {
		argv = append(argv, w.Entry.StreamID, w.Entry.Member, w.Entry.OrderingKey, w.Entry.Seq, ms(w.Until), w.JSON)
	}
	argv = append(argv, len(a.Held))
	for _, h := range a.Held {
		argv = append(argv, h.Entry.StreamID, h.Entry.OrderingKey, h.Entry.Seq, h.JSON)
	}
	return s.keysOf(a.Key, "state", "outbox", "parked", "parked-ids", "holds", "held", "released"), argv
}

// decode reads the number of entries moved out of the outbox.
func (a parkArgs) decode(v any) (int64, error) {
	r := reply{script: a.name(), key: a.Key}
	moved := r.int(v, "moved")
	return moved, r.err
}

// pauseArgs call pause.lua.
type pauseArgs struct{ Key watukuytype.Key }

func (pauseArgs) name() string { return "pause" }

func (a pauseArgs) encode(s *Store) ([]string, []any) { return []string{s.k(a.Key, "state")}, nil }

// decode reports whether the key was paused (false: it is deleted, nothing was written).
func (a pauseArgs) decode(v any) (bool, error) {
	r := reply{script: a.name(), key: a.Key}
	paused := r.flag(v, "reply")
	return paused, r.err
}

// triggerArgs call trigger.lua.
type triggerArgs struct {
	Key    watukuytype.Key
	Resume bool
}

func (triggerArgs) name() string { return "trigger" }

func (a triggerArgs) encode(s *Store) ([]string, []any) {
	mode := "trigger"
	if a.Resume {
		mode = "resume"
	}
	return []string{s.k(a.Key, "state")}, []any{mode}
}

// decode reports whether the trigger was written (false: the key is deleted, nothing was).
func (a triggerArgs) decode(v any) (bool, error) {
	r := reply{script: a.name(), key: a.Key}
	written := r.flag(v, "reply")
	return written, r.err
}

// triggerDueArgs call trigger_due.lua.
type triggerDueArgs struct {
	Now string
	Key watukuytype.Key
}

func (triggerDueArgs) name() string { return "trigger_due" }

func (a triggerDueArgs) encode(s *Store) ([]string, []any) {
	return []string{s.keysKey(a.Key.Poller), s.dueKey(a.Key.Poller)}, []any{a.Now, a.Key.Poller, a.Key.Partition}
}

// decode reports whether the due entry was written (false: the registry holds no live key).
func (a triggerDueArgs) decode(v any) (bool, error) {
	r := reply{script: a.name(), key: a.Key}
	written := r.flag(v, "reply")
	return written, r.err
}

// readOutboxArgs call read_outbox.lua.
type readOutboxArgs struct {
	Key watukuytype.Key
	fence
	Count int
}

func (readOutboxArgs) name() string { return "read_outbox" }

func (a readOutboxArgs) encode(s *Store) ([]string, []any) {
	return s.keysOf(a.Key, "state", "outbox", "holds", "held", "released"), append(a.fence.argv(1), a.Count)
}

// decode reads {read, paused, entries} (Unreplicated is the caller's).
func (a readOutboxArgs) decode(v any) (core.Batch, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 3)
	b := core.Batch{Read: int(r.int(t[0], "read")), Paused: r.flag(t[1], "paused")}
	rows := r.list(t[2], "entries")
	b.Entries = make([]core.Entry, len(rows))
	for i, x := range rows {
		f := func(name string) string { return fmt.Sprintf("entries[%d].%s", i, name) }
		e := r.tuple(x, fmt.Sprintf("entries[%d]", i), 7)
		b.Entries[i] = core.Entry{StreamID: r.str(e[0], f("streamId")), ID: r.str(e[1], f("id")), OrderingKey: r.str(e[2], f("orderingKey")),
			Envelope: []byte(r.str(e[3], f("envelope"))), Seq: r.str(e[4], f("seq")), Member: r.str(e[5], f("member"))}
		if rec := r.str(e[6], f("retry")); rec != "" && r.err == nil {
			b.Entries[i].Retry = new(core.RetryRecord)
			if err := json.Unmarshal([]byte(rec), b.Entries[i].Retry); err != nil || len(b.Entries[i].Retry.Errors) == 0 {
				r.fail(f("retry"), rec, "a retry record")
			}
		}
		if r.err == nil && (b.Entries[i].StreamID == "") == (b.Entries[i].Member == "") {
			r.fail(f("streamId"), e[0], "a stream id, or a held member, not both")
		}
	}
	if r.err != nil {
		return core.Batch{}, r.err
	}
	return b, nil
}

// readRegistryArgs call read_registry.lua.
type readRegistryArgs struct{ Key watukuytype.Key }

// readRegistryReply is read_registry.lua's reply.
type readRegistryReply struct {
	Poller       []byte // the poller's description, nil when it has none
	Entry        string // the key's registry entry, "" when it has none
	Epoch, Floor int64  // the poller's high-water marks
}

func (readRegistryArgs) name() string { return "read_registry" }

func (a readRegistryArgs) encode(s *Store) ([]string, []any) {
	return []string{s.keysKey(a.Key.Poller), s.retiredKey(), s.pollersKey()}, []any{a.Key.Poller, a.Key.Partition}
}

func (a readRegistryArgs) decode(v any) (readRegistryReply, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 4)
	out := readRegistryReply{Entry: r.str(t[1], "entry"), Epoch: r.int(t[2], "epoch"), Floor: r.int(t[3], "floor")}
	if p := r.str(t[0], "poller"); p != "" {
		out.Poller = []byte(p)
	}
	return out, r.err
}

// registerKeysArgs call register_keys.lua.
type registerKeysArgs struct {
	Now        string
	Poller     string
	Partitions []string
}

func (registerKeysArgs) name() string { return "register_keys" }

func (a registerKeysArgs) encode(s *Store) ([]string, []any) {
	argv := make([]any, 0, 2+len(a.Partitions))
	argv = append(argv, a.Now, a.Poller)
	for _, p := range a.Partitions {
		argv = append(argv, p)
	}
	return []string{s.keysKey(a.Poller), s.dueKey(a.Poller)}, argv
}

// decode reads how many keys were new to the registry.
func (a registerKeysArgs) decode(v any) (int64, error) {
	r := reply{script: a.name(), on: "the registry of poller " + a.Poller}
	n := r.int(v, "added")
	return n, r.err
}

// releaseParkedArgs call release_parked.lua.
type releaseParkedArgs struct {
	Key watukuytype.Key
	writeFence
	Retry bool // retry, else discard
	IDs   []string
}

// releaseParkedReply is release_parked.lua's reply.
type releaseParkedReply struct{ Released, Returned int64 }

func (releaseParkedArgs) name() string { return "release_parked" }

func (a releaseParkedArgs) encode(s *Store) ([]string, []any) {
	mode := "discard"
	if a.Retry {
		mode = "retry"
	}
	argv := append(a.writeFence.argv(1+len(a.IDs)), mode)
	for _, id := range a.IDs {
		argv = append(argv, id)
	}
	return s.keysOf(a.Key, "state", "parked", "parked-ids", "holds", "held", "released", "invalid"), argv
}

func (a releaseParkedArgs) decode(v any) (releaseParkedReply, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 2)
	out := releaseParkedReply{Released: r.int(t[0], "released"), Returned: r.int(t[1], "returned")}
	return out, r.err
}

// renewArgs call renew.lua.
type renewArgs struct {
	Key watukuytype.Key
	fence
	TTL time.Duration
}

func (renewArgs) name() string { return "renew" }

func (a renewArgs) encode(s *Store) ([]string, []any) {
	return s.keysOf(a.Key, "state"), append(a.fence.argv(1), a.TTL.Milliseconds())
}

func (a renewArgs) decode(v any) (core.Confirm, error) {
	r := reply{script: a.name(), key: a.Key}
	t := r.tuple(v, "reply", 2)
	c := core.Confirm{Expires: r.time(t[0], "expiresAt"), Paused: r.flag(t[1], "paused")}
	return c, r.err
}

// repairDueArgs call repair_due.lua.
type repairDueArgs struct {
	Now     string
	Poller  string
	Entries []repairEntry
}

// repairEntry is a key of the poller to give a due entry, due at Due (ms; 0: now).
type repairEntry struct {
	Partition string
	Due       int64
}

func (repairDueArgs) name() string { return "repair_due" }

func (a repairDueArgs) encode(s *Store) ([]string, []any) {
	argv := make([]any, 0, 2+2*len(a.Entries))
	argv = append(argv, a.Now, a.Poller)
	for _, e := range a.Entries {
		argv = append(argv, e.Partition, e.Due)
	}
	return []string{s.keysKey(a.Poller), s.dueKey(a.Poller)}, argv
}

func (a repairDueArgs) decode(v any) ([]watukuytype.Key, error) {
	r := reply{script: a.name(), on: fmt.Sprintf("%d keys of poller %s", len(a.Entries), a.Poller)}
	keys := r.members(v, "repaired")
	return keys, r.err
}

// retireKeyArgs call retire_key.lua.
type retireKeyArgs struct {
	Key          watukuytype.Key
	Epoch, Floor int64 // the marks the deleted key reached
}

func (retireKeyArgs) name() string { return "retire_key" }

func (a retireKeyArgs) encode(s *Store) ([]string, []any) {
	return []string{s.keysKey(a.Key.Poller), s.dueKey(a.Key.Poller), s.retiredKey()}, []any{a.Key.Poller, a.Key.Partition, a.Epoch, a.Floor}
}

// decode reads the entry the key had ("" when none).
func (a retireKeyArgs) decode(v any) (string, error) {
	r := reply{script: a.name(), key: a.Key}
	prev := r.str(v, "entry")
	return prev, r.err
}

// setDueArgs call set_due.lua.
type setDueArgs struct {
	Now string
	Key watukuytype.Key
	Due string // a time in ms, or "remove"
}

func (setDueArgs) name() string { return "set_due" }

func (a setDueArgs) encode(s *Store) ([]string, []any) {
	return []string{s.dueKey(a.Key.Poller)}, []any{a.Now, a.Key.String(), a.Due}
}

// decode reports whether the entry was written (false: a due-now entry was kept).
func (a setDueArgs) decode(v any) (bool, error) {
	r := reply{script: a.name(), key: a.Key}
	written := r.flag(v, "reply")
	return written, r.err
}
