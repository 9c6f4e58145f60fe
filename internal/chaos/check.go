package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/changeset"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/jcs"
	"github.com/watukuy/watukuy/watukuytype"
)

// Truth is the fake API's ground truth for one key.
type Truth struct {
	// Changes is every mutation, in order.
	Changes []fakeapi.Change
	// Final maps each live identity to its version at the end.
	Final map[string]int
	// Project, when set, is what a poller without a version sees of an item (its
	// fingerprint's fields), and Content each live identity's final content as Project sees
	// it: the final state is then compared by content, since an update that leaves the
	// content as it was emits nothing.
	Project func(item json.RawMessage) string
	Content map[string]string
	// OrderingKey, when set, is the ordering key of the key's events where no commit told it
	// (processes observed from outside); G4 then checks order per ordering key, not identity.
	OrderingKey func(ev watukuytype.Event) string
}

// TruthOf reads an API's ground truth.
func TruthOf(a *fakeapi.API) Truth { return Truth{Changes: a.Changes(), Final: a.Final()} }

// TruthByContent reads an API's ground truth for a poller without a version: project is what
// the poller's fingerprint sees of an item.
func TruthByContent(ctx context.Context, a *fakeapi.API, project func(item json.RawMessage) string) (Truth, error) {
	t := TruthOf(a)
	t.Project, t.Content = project, map[string]string{}
	detail := a.Detail()
	for id := range t.Final {
		item, ok, err := detail(ctx, id)
		if err != nil {
			return t, err
		}
		if ok {
			t.Content[id] = project(item)
		}
	}
	return t, nil
}

// want is what the final state should hold for identity id (version or content) and whether
// the identity is live.
func (t Truth) want(id string) (string, bool) {
	v, live := t.Final[id]
	if t.Project != nil {
		return t.Content[id], live
	}
	return strconv.Itoa(v), live
}

// ExpectedStates is what the final state should hold per key of truth: identity → version (or
// content) of every live identity.
func ExpectedStates(truth map[watukuytype.Key]Truth) map[watukuytype.Key]map[string]string {
	want := make(map[watukuytype.Key]map[string]string, len(truth))
	for k, t := range truth {
		want[k] = make(map[string]string, len(t.Final))
		for id := range t.Final {
			want[k][id], _ = t.want(id)
		}
	}
	return want
}

// Violation is one broken guarantee, with what shows it.
type Violation struct {
	Key    watukuytype.Key
	Detail string
}

// Guarantees in report order, with their one-line names. R1 is a bound rather than a
// guarantee: a key whose worker was SIGKILLed mid-request is polled again (by any instance)
// within the lease TTL + 5 s of the kill; only process runs measure it.
var guarantees = [][2]string{
	{"G1", "no loss (committed events delivered)"},
	{"G2", "deterministic ids"},
	{"G3", "no skipped change (final state reproduced)"},
	{"G4", "per-key order"},
	{"G5", "fencing (no stale-epoch write accepted)"},
	{"G6", "no false deletes"},
	{"G7", "suppression (no duplicate emission)"},
	{"G8", "politeness (no request in a Retry-After window)"},
	{"G9", "drain before fetch"},
	{"B1", "budget bound and a token per request"},
	{"P1", "every delivered patch applies"},
	{"R1", "recovery (next request ≤ lease TTL + 5 s)"},
}

// Report is what a run did and what it broke.
type Report struct {
	Deliveries     int
	UniqueEvents   int
	DuplicateRatio float64
	Commits        int
	// Patches counts the updated events whose patch P1 applied to the consumer's copy, and
	// Previous the deleted events whose previous item it compared with that copy.
	Patches, Previous int
	// Violations maps a guarantee (G1…G9, B1, P1, R1) to its violations; NotMeasured lists the
	// ones the recorder had no data for.
	Violations  map[string][]Violation
	NotMeasured map[string]bool
}

// Failed reports whether any guarantee was violated.
func (r Report) Failed() bool {
	for _, v := range r.Violations {
		if len(v) > 0 {
			return true
		}
	}
	return false
}

// Lines renders one line per guarantee: its violations (must be 0) and the first example.
func (r Report) Lines() []string {
	var out []string
	for _, g := range guarantees {
		switch vs := r.Violations[g[0]]; {
		case r.NotMeasured[g[0]]:
			out = append(out, fmt.Sprintf("%s %-48s not measured in this mode", g[0], g[1]))
		case len(vs) == 0:
			out = append(out, fmt.Sprintf("%s %-48s 0 violations", g[0], g[1]))
		default:
			out = append(out, fmt.Sprintf("%s %-48s %d violations, e.g. %s: %s", g[0], g[1], len(vs), vs[0].Key, vs[0].Detail))
		}
	}
	return out
}

// Check compares what the recorder saw with the ground truth of every key; a nil truth leaves
// G3 and G6 unmeasured.
func Check(truth map[watukuytype.Key]Truth, rec *Recorder) Report {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := Report{Violations: map[string][]Violation{}, NotMeasured: map[string]bool{}, Deliveries: len(rec.deliveries), Commits: len(rec.commits)}
	add := func(g string, k watukuytype.Key, format string, a ...any) {
		r.Violations[g] = append(r.Violations[g], Violation{Key: k, Detail: fmt.Sprintf(format, a...)})
	}
	need := func(g string, kinds ...string) bool {
		for _, k := range kinds {
			if !rec.measured[k] {
				r.NotMeasured[g] = true
				return false
			}
		}
		return true
	}
	keyOf := func(ev watukuytype.Event) watukuytype.Key {
		return watukuytype.Key{Poller: ev.Poller, Partition: ev.Partition}
	}

	delivered := map[string]int64{} // event id -> logical time of its first delivery
	for _, d := range rec.deliveries {
		if _, ok := delivered[d.Event.ID]; !ok {
			delivered[d.Event.ID] = d.N
		}
	}
	r.UniqueEvents = len(delivered)
	if r.UniqueEvents > 0 {
		r.DuplicateRatio = float64(r.Deliveries-r.UniqueEvents) / float64(r.UniqueEvents)
	}

	// The order that counts is the acks' (G4: "acked in commit order"): a frozen instance may
	// finish a handler call after it lost its lease, but its ack is fenced off. Without acks
	// (processes observed from outside) the handler's order stands in for them.
	byID := map[string]watukuytype.Event{}
	for _, c := range rec.commits {
		for _, ev := range c.Events {
			byID[ev.ID] = ev
		}
	}
	var order []seen
	if rec.measured["acks"] && rec.measured["commits"] {
		for _, a := range rec.acks {
			if ev, ok := byID[a.EventID]; ok {
				order = append(order, seen{a.Key, ev})
			}
		}
	} else {
		for _, d := range rec.deliveries {
			order = append(order, seen{keyOf(d.Event), d.Event})
		}
	}
	acked := map[string]bool{}
	for _, o := range order {
		acked[o.ev.ID] = true
	}

	// Identities with an event an operator discarded end where the operator left them: their
	// final state is not the API's by decision.
	dropped := map[watukuytype.Key]map[string]bool{}
	for _, c := range rec.commits {
		for _, ev := range c.Events {
			if rec.discarded[ev.ID] {
				if dropped[c.Key] == nil {
					dropped[c.Key] = map[string]bool{}
				}
				dropped[c.Key][ev.Identity] = true
			}
		}
	}

	// G1: every committed event is delivered and acked, unless parked.
	if need("G1", "deliveries", "commits", "acks") {
		for _, c := range rec.commits {
			for _, ev := range c.Events {
				if _, ok := delivered[ev.ID]; (!ok || !acked[ev.ID]) && !rec.parked[ev.ID] {
					add("G1", c.Key, "event %s (%s %s v%s) committed by %s, never delivered and acked", ev.ID, ev.Type, ev.Identity, ev.Version, c.Instance)
				}
			}
		}
	}

	// G2: one change, one id; one id, one change.
	if need("G2", "deliveries") {
		idsOf := map[string]map[string]bool{}
		whatOf := map[string]string{}
		for _, d := range rec.deliveries {
			ev := d.Event
			h := sha256.Sum256(canonical(ev.Item))
			if versionOf(ev) == "" {
				continue // a deletion without a version: nothing tells two of them apart but their ids
			}
			what := fmt.Sprintf("%s %s %s v%s %x", keyOf(ev), ev.Type, ev.Identity, versionOf(ev), h[:6])
			if idsOf[what] == nil {
				idsOf[what] = map[string]bool{}
			}
			idsOf[what][ev.ID] = true
			if w, ok := whatOf[ev.ID]; ok && w != what {
				add("G2", keyOf(ev), "id %s names two changes: %s and %s", ev.ID, w, what)
			}
			whatOf[ev.ID] = what
		}
		for what, ids := range idsOf {
			if len(ids) > 1 {
				add("G2", watukuytype.Key{}, "%s delivered with %d ids", what, len(ids))
			}
		}
		// An id names one change: a consumer that applies the acked events in order and drops
		// ids it has seen ends in the API's final state (content that comes back, A→B→A, or
		// an identity created again must not reuse an earlier change's id).
		if truth != nil {
			deduped, plain := finalStates(order, true, truth), finalStates(order, false, truth)
			for k, t := range truth {
				for id := range t.Final {
					if dropped[k][id] {
						continue
					}
					want, _ := t.want(id)
					// Only where applying every event gets it right, so G3's findings stay G3's.
					if got, ok := deduped[k][id]; ok && got != want && plain[k][id] == want {
						add("G2", k, "%s: a consumer that dedupes by id ends at %q, the API has %q: an id was reused", id, got, want)
					}
				}
			}
		}
	}

	if truth == nil {
		r.NotMeasured["G3"], r.NotMeasured["G6"] = true, true
	}
	// G3: the last delivered state per identity is the API's final state.
	if truth != nil && need("G3", "deliveries") {
		last := finalStates(order, false, truth)
		for k, t := range truth {
			for id := range t.Final {
				if dropped[k][id] {
					continue
				}
				if want, _ := t.want(id); last[k][id] != want {
					add("G3", k, "%s: API has %q, last delivered %q", id, want, last[k][id])
				}
			}
			for id, v := range last[k] {
				if _, live := t.Final[id]; !live && !dropped[k][id] {
					add("G3", k, "%s: deleted in the API, last delivered v%s", id, v)
				}
			}
		}
	}

	// G4: per ordering key (the identity unless the commit said otherwise), events are first
	// acked in commit order.
	if need("G4", "deliveries") {
		okOf := map[string]string{}
		for _, c := range rec.commits {
			for i, ev := range c.Events {
				if i < len(c.OrderingKeys) {
					okOf[ev.ID] = c.OrderingKeys[i]
				}
			}
		}
		lastSeq := map[string]string{}
		first := map[string]bool{}
		for _, o := range order {
			ev := o.ev
			if first[ev.ID] {
				continue
			}
			first[ev.ID] = true
			key := ev.Identity
			if k, ok := okOf[ev.ID]; ok {
				key = k
			} else if f := truth[o.key].OrderingKey; f != nil {
				key = f(ev)
			}
			ok := o.key.String() + "/" + key
			if prev, has := lastSeq[ok]; has && SeqLess(ev.Seq, prev) {
				add("G4", o.key, "%s (ordering key %s): seq %s acked after seq %s", ev.Identity, key, ev.Seq, prev)
			}
			if prev, has := lastSeq[ok]; !has || SeqLess(prev, ev.Seq) {
				lastSeq[ok] = ev.Seq
			}
		}
	}

	// G5: no write accepted that was sent after another grant of the key (a newer epoch, or
	// the same epoch granted again after a failover lost the first grant: another token). Per
	// key, a sweep in logical time keeps the latest grant.
	if need("G5", "writes", "grants") {
		type item struct {
			n     int64
			grant *Grant
			write *Write
		}
		byKey := map[watukuytype.Key][]item{}
		for i := range rec.grants {
			g := &rec.grants[i]
			byKey[g.Key] = append(byKey[g.Key], item{n: g.N, grant: g})
		}
		for i := range rec.writes {
			w := &rec.writes[i]
			byKey[w.Key] = append(byKey[w.Key], item{n: w.N, write: w})
		}
		for k, items := range byKey {
			sort.Slice(items, func(i, j int) bool { return items[i].n < items[j].n })
			var latest *Grant
			for _, it := range items {
				switch {
				case it.grant != nil:
					latest = it.grant
				case latest != nil && (it.write.Epoch != latest.Epoch || it.write.Token != latest.Token):
					w := it.write
					add("G5", k, "%s by %s with epoch %d (token %.6s) accepted after epoch %d (token %.6s) was granted", w.Op, w.Instance, w.Epoch, w.Token, latest.Epoch, latest.Token)
				}
			}
		}
	}

	// G5: at most one instance acts on a key: no handler call starts while the engine holds
	// for valid a lease that expired on the server (its grant or last renewal, by the server
	// clock), when another instance may hold the key. The engine's belief is read at the same
	// instant as the time, so a freeze between the engine's check and the call (which no
	// engine can rule out) is not counted. Per instance and key, a sweep in time.
	if need("G5", "grants", "writes", "deliveries") {
		type span struct {
			at, until time.Time
		}
		leases := map[string][]span{} // instance/key -> grant and renewal expiries in time order
		for _, g := range rec.grants {
			k := g.Instance + "/" + g.Key.String()
			leases[k] = append(leases[k], span{g.At, g.Expires})
		}
		for _, w := range rec.writes {
			if !w.Expires.IsZero() {
				k := w.Instance + "/" + w.Key.String()
				leases[k] = append(leases[k], span{w.Start, w.Expires})
			}
		}
		for k := range leases {
			sort.Slice(leases[k], func(i, j int) bool { return leases[k][i].at.Before(leases[k][j].at) })
		}
		for _, d := range rec.deliveries {
			if d.Start.IsZero() || !d.Believed {
				continue
			}
			var until time.Time
			for _, sp := range leases[d.Instance+"/"+keyOf(d.Event).String()] {
				if sp.at.After(d.Start) {
					break
				}
				until = sp.until
			}
			if !until.IsZero() && !d.Start.Before(until) {
				add("G5", keyOf(d.Event), "%s began delivering %s at %s holding its lease for valid, it expired at %s", d.Instance, d.Event.ID, d.Start.Format(time.TimeOnly+".000"), until.Format(time.TimeOnly+".000"))
			}
		}
	}

	// G6: every delete matches a deletion in the API of that version or a later one (the
	// item may have changed again before it was deleted).
	if truth != nil && need("G6", "deliveries") {
		lastDeleted := map[watukuytype.Key]map[string][]int{}
		for k, t := range truth {
			lastDeleted[k] = map[string][]int{}
			for _, c := range t.Changes {
				if c.Deleted {
					lastDeleted[k][c.ID] = append(lastDeleted[k][c.ID], c.Version)
				}
			}
		}
		for _, d := range rec.deliveries {
			ev := d.Event
			if ev.Type != watukuytype.Deleted {
				continue
			}
			if d.Early {
				add("G6", keyOf(ev), "%s deleted at v%s before the API deleted it", ev.Identity, versionOf(ev))
				continue
			}
			v, _ := strconv.Atoi(versionOf(ev))
			ok := false
			for _, dv := range lastDeleted[keyOf(ev)][ev.Identity] {
				ok = ok || dv >= v
			}
			if !ok {
				add("G6", keyOf(ev), "%s deleted at v%s, but the API never deleted it at or after that version", ev.Identity, ev.Version)
			}
		}
	}

	// G7: an event reaches the outbox once: two deliveries of one id with different commit
	// sequences mean it was written twice (a re-sent commit applied again). Replays copy
	// logged events on purpose.
	if need("G7", "deliveries") {
		seqOf := map[string]string{}
		for _, d := range rec.deliveries {
			ev := d.Event
			if ev.Lane == watukuytype.LaneReplay || ev.Seq == "" {
				continue
			}
			if s, ok := seqOf[ev.ID]; ok && s != ev.Seq {
				add("G7", keyOf(ev), "event %s (%s %s v%s) delivered from two outbox entries, seq %s and %s", ev.ID, ev.Type, ev.Identity, versionOf(ev), s, ev.Seq)
				continue
			}
			seqOf[ev.ID] = ev.Seq
		}
	}

	// G7: a change is committed once.
	if need("G7", "commits") {
		count := map[string]int{}
		for _, c := range rec.commits {
			for _, ev := range c.Events {
				if versionOf(ev) == "" {
					continue // see G2
				}
				count[fmt.Sprintf("%s %s %s v%s", c.Key, ev.Type, ev.Identity, versionOf(ev))]++
			}
		}
		for what, n := range count {
			if n > 1 {
				add("G7", watukuytype.Key{}, "%s emitted %d times", what, n)
			}
		}
	}

	// B1: the tokens a bucket gave keep to its budget in every window, and every request was
	// sent at or after the slot of a token its own key took: at any time, no key has sent more
	// requests than it has tokens whose slot has come.
	if need("B1", "fetches", "takes", "budgets") {
		slots, keySlots := map[string][]time.Time{}, map[watukuytype.Key][]time.Time{}
		for _, t := range rec.takes {
			slots[t.Bucket] = append(slots[t.Bucket], t.Slot)
			keySlots[t.Key] = append(keySlots[t.Key], t.Slot)
		}
		for bucket, b := range rec.budgets {
			if e, from, to := budget.Excess(b, slots[bucket], 0); e > 0 {
				add("B1", watukuytype.Key{}, "bucket %s gave %.1f tokens more than %s with a burst of %d allow in %s–%s",
					bucket, e, budget.FormatRate(b.Rate, b.Per), b.Burst, from.Format(time.StampMicro), to.Format(time.StampMicro))
			}
		}
		sent := map[watukuytype.Key][]time.Time{}
		for _, f := range rec.fetches {
			if _, ok := rec.bucketOf[f.Key]; ok {
				sent[f.Key] = append(sent[f.Key], f.At)
			}
		}
		for k, at := range sent {
			ss, fs := slices.SortedFunc(slices.Values(keySlots[k]), time.Time.Compare), slices.SortedFunc(slices.Values(at), time.Time.Compare)
			for i, a := range fs {
				if i >= len(ss) || ss[i].After(a) {
					add("B1", k, "request %d at %s came before the slot of a token of its own (%d tokens by then)",
						i+1, a.Format(time.StampMicro), sort.Search(len(ss), func(j int) bool { return ss[j].After(a) }))
					break
				}
			}
		}
	}

	// G8: no request inside a Retry-After window. Per key, a sweep in time keeps the latest
	// end of the windows opened so far.
	if need("G8", "fetches", "throttles") {
		windows := map[watukuytype.Key][]Throttle{}
		for _, t := range rec.throttles {
			windows[t.Key] = append(windows[t.Key], t)
		}
		fetches := map[watukuytype.Key][]Fetch{}
		for _, f := range rec.fetches {
			fetches[f.Key] = append(fetches[f.Key], f)
		}
		// In time order, and at one instant (a run's clock stands still between its steps) in
		// the order things happened.
		before := func(t1 time.Time, n1 int64, t2 time.Time, n2 int64) bool {
			return t1.Before(t2) || t1.Equal(t2) && n1 < n2
		}
		// An instance whose grant a failover lost (the next grant repeated its epoch) cannot
		// know it before its first fenced call: a request it sends meanwhile is the known limit
		// of a lossy failover (docs/design.md, Guarantees under chaos), not a politeness bug. Per key, a sweep in logical time.
		lost := map[int64]bool{} // fetch N -> sent under a lost grant
		for k, fs := range fetches {
			var gs []Grant
			for _, g := range rec.grants {
				if g.Key == k {
					gs = append(gs, g)
				}
			}
			sort.Slice(gs, func(i, j int) bool { return gs[i].N < gs[j].N })
			byN := slices.Clone(fs)
			sort.Slice(byN, func(i, j int) bool { return byN[i].N < byN[j].N })
			latest := map[string]string{}  // instance -> token of its latest grant
			firstOf := map[int64]string{}  // epoch -> token of its first grant
			lostToken := map[string]bool{} // tokens of grants a same-epoch grant superseded
			next := 0
			for _, f := range byN {
				for ; next < len(gs) && gs[next].N < f.N; next++ {
					g := gs[next]
					if t, ok := firstOf[g.Epoch]; ok && t != g.Token {
						lostToken[t] = true
					} else if !ok {
						firstOf[g.Epoch] = g.Token
					}
					latest[g.Instance] = g.Token
				}
				if t, ok := latest[f.Instance]; ok && lostToken[t] {
					lost[f.N] = true
				}
			}
		}
		for k, ws := range windows {
			sort.Slice(ws, func(i, j int) bool { return before(ws[i].From, ws[i].N, ws[j].From, ws[j].N) })
			fs := fetches[k]
			sort.SliceStable(fs, func(i, j int) bool { return before(fs[i].At, fs[i].N, fs[j].At, fs[j].N) })
			var until time.Time
			var open Throttle
			next := 0
			for _, f := range fs {
				for next < len(ws) && before(ws[next].From, ws[next].N, f.At, f.N) {
					if ws[next].To.After(until) {
						until, open = ws[next].To, ws[next]
					}
					next++
				}
				if f.At.Before(until) && !lost[f.N] {
					add("G8", k, "request by %s at %s inside the window %s–%s saved by %s", f.Instance, f.At.Format(time.RFC3339Nano), open.From.Format(time.TimeOnly), open.To.Format(time.TimeOnly), open.Instance)
				}
			}
		}
	}

	// G9: no request while an older deliverable event of the key waits.
	if need("G9", "fetches", "commits", "deliveries") {
		// A parked event holds its ordering key: the key's later events wait behind it by
		// design, so they are not "deliverable".
		okOf := func(c Commit, i int) string {
			if i < len(c.OrderingKeys) {
				return c.Key.String() + "/" + c.OrderingKeys[i]
			}
			return c.Key.String() + "/" + c.Events[i].Identity
		}
		held := map[string]bool{}
		for _, c := range rec.commits {
			for i, ev := range c.Events {
				if rec.parked[ev.ID] {
					held[okOf(c, i)] = true
				}
			}
		}
		// Per key, a sweep in logical time: the latest first delivery among the events
		// committed so far (never delivered counts as forever) must come before each request.
		const never = int64(1) << 62
		type item struct {
			n     int64
			fetch *Fetch
			grant *Grant
			done  int64 // a commit's event: when it was first delivered
			id    string
			// An outage's start (down) or end, or a delivery of the key.
			outage   *Outage
			down     bool
			delivery bool
		}
		byKey := map[watukuytype.Key][]item{}
		for _, c := range rec.commits {
			for i, ev := range c.Events {
				if held[okOf(c, i)] {
					continue
				}
				d, ok := delivered[ev.ID]
				if !ok {
					d = never
				}
				byKey[c.Key] = append(byKey[c.Key], item{n: c.N, done: d, id: ev.ID})
			}
		}
		for i := range rec.fetches {
			f := &rec.fetches[i]
			byKey[f.Key] = append(byKey[f.Key], item{n: f.N, fetch: f})
		}
		// A request by an instance whose grant was superseded meanwhile (frozen, or its grant
		// lost in a failover) is not a cycle of the key's holder: what it fetched is fenced off
		// when it tries to write, and the holder's cycle drains before its own requests.
		for i := range rec.grants {
			g := &rec.grants[i]
			byKey[g.Key] = append(byKey[g.Key], item{n: g.N, grant: g})
		}
		// While a key's sink is down its delivery is blocked and its cycles poll on purpose:
		// from the outage's start until the key's first delivery after it ends.
		for i := range rec.outages {
			o := &rec.outages[i]
			byKey[o.Key] = append(byKey[o.Key], item{n: o.Down, outage: o, down: true})
			if o.Up != 0 {
				byKey[o.Key] = append(byKey[o.Key], item{n: o.Up, outage: o})
			}
		}
		for _, d := range rec.deliveries {
			if len(rec.outages) == 0 {
				break
			}
			k := watukuytype.Key{Poller: d.Event.Poller, Partition: d.Event.Partition}
			byKey[k] = append(byKey[k], item{n: d.N, delivery: true})
		}
		for k, items := range byKey {
			sort.SliceStable(items, func(i, j int) bool { return items[i].n < items[j].n })
			var waiting int64
			var id, holder string
			blocked, ended := false, false
			for _, it := range items {
				switch {
				case it.outage != nil && it.down:
					blocked, ended = true, false
					continue
				case it.outage != nil:
					ended = true
					continue
				case it.delivery:
					if blocked && ended {
						blocked = false
					}
					continue
				case it.grant != nil:
					holder = it.grant.Instance
					continue
				case it.fetch == nil:
					if it.done > waiting {
						waiting, id = it.done, it.id
					}
					continue
				case holder != "" && it.fetch.Instance != holder, blocked:
					continue
				}
				if waiting > it.n {
					add("G9", k, "request by %s while event %s, committed earlier, waited", it.fetch.Instance, id)
				}
			}
		}
	}
	// P1: a consumer that applies the change sets ends with every event's item.
	if need("P1", "deliveries") {
		var sets bool
		r.Patches, r.Previous, sets = checkPatches(rec.deliveries, rec.commits, rec.discarded, func(k watukuytype.Key, format string, a ...any) { add("P1", k, format, a...) })
		if !sets {
			r.NotMeasured["P1"] = true // no poller with Changes.Patch delivered
		}
	}

	// R1: a key whose cycle's worker died mid-request is polled again within the goal.
	if need("R1", "recoveries") {
		for _, rc := range rec.recoveries {
			took, ok := rc.Took()
			switch {
			case !ok:
				add("R1", rc.Key, "no request within %v of the SIGKILL of %s mid-request (goal %v)", rc.Waited, rc.Instance, rc.Goal)
			case took > rc.Goal:
				add("R1", rc.Key, "next request %v after the SIGKILL of %s mid-request, goal %v", took.Round(time.Millisecond), rc.Instance, rc.Goal)
			}
		}
	}
	for g := range r.Violations {
		sort.SliceStable(r.Violations[g], func(i, j int) bool { return r.Violations[g][i].Key.String() < r.Violations[g][j].Key.String() })
	}
	return r
}

// seen is an event acked (or delivered) for a key.
type seen struct {
	key watukuytype.Key
	ev  watukuytype.Event
}

// SeqLess orders outbox sequences "ms-n".
func SeqLess(a, b string) bool {
	am, an, _ := strings.Cut(a, "-")
	bm, bn, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseUint(am, 10, 64)
	bi, _ := strconv.ParseUint(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	x, _ := strconv.ParseUint(an, 10, 64)
	y, _ := strconv.ParseUint(bn, 10, 64)
	return x < y
}

// canonical is the RFC 8785 form of an item ("" for none or invalid JSON).
func canonical(item []byte) []byte {
	if len(item) == 0 {
		return nil
	}
	c, err := jcs.Append(nil, item)
	if err != nil {
		return item
	}
	return c
}

// versionOf is an event's version, or, for a poller without one (fingerprint ids), the
// fake API's version inside the item.
func versionOf(ev watukuytype.Event) string {
	if ev.Version != "" || len(ev.Item) == 0 {
		return ev.Version
	}
	var it struct {
		Version json.Number `json:"version"`
	}
	_ = json.Unmarshal(ev.Item, &it)
	return it.Version.String()
}

// DeliveredState is the state per key of truth that the deliveries ds leave, applied in
// order by a consumer that does not dedupe: identity → version (or content, for keys whose
// truth compares content).
func DeliveredState(ds []Delivery, truth map[watukuytype.Key]Truth) map[watukuytype.Key]map[string]string {
	order := make([]seen, len(ds))
	for i, d := range ds {
		order[i] = seen{watukuytype.Key{Poller: d.Event.Poller, Partition: d.Event.Partition}, d.Event}
	}
	return finalStates(order, false, truth)
}

// finalStates applies the events in order, per key, to a state of identity → version (or
// content, for keys whose truth compares content); with dedupe, an id seen before is dropped,
// as a consumer that dedupes by id does.
func finalStates(order []seen, dedupe bool, truth map[watukuytype.Key]Truth) map[watukuytype.Key]map[string]string {
	out := map[watukuytype.Key]map[string]string{}
	seenID := map[string]bool{}
	for _, o := range order {
		if dedupe && seenID[o.ev.ID] {
			continue
		}
		seenID[o.ev.ID] = true
		if out[o.key] == nil {
			out[o.key] = map[string]string{}
		}
		switch project := truth[o.key].Project; {
		case o.ev.Type == watukuytype.Deleted:
			delete(out[o.key], o.ev.Identity)
		case project != nil:
			out[o.key][o.ev.Identity] = project(o.ev.Item)
		default:
			out[o.key][o.ev.Identity] = versionOf(o.ev)
		}
	}
	return out
}

// checkPatches replays the deliveries as a consumer that dedupes by event id and keeps a copy
// of each identity from its change sets (P1): created sets the copy to the item; updated applies
// its patch, which must give the event's item (compared as JSON values, numbers as written),
// or, with changes null, takes the item; deleted must carry the copy as its previous item, and
// drops it. An identity is not checked while its copy is unknown: before its first event, and
// after an event an operator discarded (the engine's next patch starts from that event's item,
// which the consumer never saw), until an event's item sets it again. It reports how many
// patches and previous items it checked, and whether any delivered event had a change set.
func checkPatches(ds []Delivery, commits []Commit, discarded map[string]bool, add func(k watukuytype.Key, format string, a ...any)) (patches, previous int, sets bool) {
	type copyOf struct {
		item  []byte // nil: deleted
		seq   string // the sequence of the event that set it
		known bool
	}
	type ident struct {
		key watukuytype.Key
		id  string
	}
	// The discarded events' sequences per identity: their commits know them.
	gaps := map[ident][]string{}
	for _, c := range commits {
		for _, ev := range c.Events {
			if discarded[ev.ID] {
				gaps[ident{c.Key, ev.Identity}] = append(gaps[ident{c.Key, ev.Identity}], ev.Seq)
			}
		}
	}
	opts := jsonpatch.NewApplyOptions()
	opts.SupportNegativeIndices = false // RFC 6902 has none
	copies := map[ident]copyOf{}
	seen := map[string]bool{}
	for _, d := range ds {
		ev := d.Event
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		k := watukuytype.Key{Poller: ev.Poller, Partition: ev.Partition}
		who := ident{k, ev.Identity}
		cp := copies[who]
		for _, g := range gaps[who] {
			// A discarded event between the copy's and this one: the copy is not the engine's.
			if SeqLess(cp.seq, g) && (ev.Seq == "" || SeqLess(g, ev.Seq)) {
				cp.known = false
			}
		}
		sets = sets || len(ev.Changes) > 0 || len(ev.Previous) > 0 || ev.ChangesOmitted != ""
		switch ev.Type {
		case watukuytype.Created:
			if len(ev.Changes) > 0 || len(ev.Previous) > 0 || ev.ChangesOmitted != "" {
				add(k, "%s: created event %s carries a change set: changes %s, previous %s, omitted %q", ev.Identity, ev.ID, ev.Changes, ev.Previous, ev.ChangesOmitted)
			}
			cp = copyOf{item: ev.Item, known: true}
		case watukuytype.Updated:
			switch {
			case len(ev.Changes) == 0 || string(ev.Changes) == "null":
				if string(ev.Changes) == "null" && ev.ChangesOmitted == "" {
					add(k, "%s: updated event %s has changes null and no reason", ev.Identity, ev.ID)
				}
			case !cp.known:
				// Not checked: the item sets the copy again.
			case cp.item == nil:
				add(k, "%s: updated event %s carries the patch %s, but its identity was deleted: there is nothing to apply it to", ev.Identity, ev.ID, ev.Changes)
			default:
				patches++
				p, err := jsonpatch.DecodePatch(ev.Changes)
				var got []byte
				if err == nil {
					got, err = p.ApplyWithOptions(cp.item, opts)
				}
				switch {
				case err != nil:
					add(k, "%s: updated event %s: the patch %s does not apply to the copy %s: %v", ev.Identity, ev.ID, ev.Changes, cp.item, err)
				case !changeset.Same(got, ev.Item):
					add(k, "%s: updated event %s: the patch %s turns the copy %s into %s, the item is %s", ev.Identity, ev.ID, ev.Changes, cp.item, got, ev.Item)
				}
			}
			cp = copyOf{item: ev.Item, known: true}
		case watukuytype.Deleted:
			if len(ev.Previous) > 0 && cp.known {
				previous++
				switch {
				case cp.item == nil:
					add(k, "%s: deleted event %s carries the previous item %s, but its identity was already deleted", ev.Identity, ev.ID, ev.Previous)
				case !changeset.Same(ev.Previous, cp.item):
					add(k, "%s: deleted event %s: the previous item %s is not the copy %s", ev.Identity, ev.ID, ev.Previous, cp.item)
				}
			}
			cp = copyOf{known: true}
		}
		cp.seq = ev.Seq
		copies[who] = cp
	}
	return patches, previous, sets
}
