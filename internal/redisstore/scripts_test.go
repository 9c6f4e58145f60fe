package redisstore

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// encoder is the half of script[R] that does not depend on the reply type.
type encoder interface {
	name() string
	encode(s *Store) (keys []string, argv []any)
}

// sampleNow is the clock override the sample calls carry, to find it in ARGV.
const sampleNow = "1800000000123"

// samples is one call of every script (the fenced ones under l), for the tests that read the
// contract: the order of KEYS, where the fence and the clock override go.
func samples(l core.Lease) []encoder {
	k := l.Key
	f := fence{Epoch: l.Epoch, Token: l.Token, Now: sampleNow}
	wf := writeFence{fence: f, Write: "77"}
	other := watukuytype.Key{Poller: "invoices", Partition: "t2"}
	after := "t0"
	return []encoder{
		ackArgs{Key: k, fence: f, Entries: []core.Entry{{StreamID: "1-1"}, {Member: "m"}}},
		addKeyArgs{Now: sampleNow, Key: k, Entry: "a1"},
		beginArgs{Key: k, Owner: "a", TTL: time.Second, Now: sampleNow, Token: "tok"},
		budgetPauseArgs{Now: sampleNow, Bucket: "shop", Pause: time.Second},
		budgetTakeArgs{Now: sampleNow, BudgetTake: core.BudgetTake{Bucket: "shop", Key: k, Interval: time.Second, Burst: 2, Hold: time.Minute}},
		claimDueArgs{Now: sampleNow, Limit: 10, Pollers: []string{"orders", "invoices", "refunds"}},
		confirmClaimsArgs{Now: sampleNow, Keys: []watukuytype.Key{k, other, {Poller: k.Poller, Partition: "t3"}}},
		commitPollArgs{Key: k, writeFence: wf, TTL: time.Second},
		deleteKeyArgs{Key: k, writeFence: wf},
		endArgs{Key: k, writeFence: wf, State: map[string]string{statehash.NextDue: "1"}, Due: "1"},
		endDeleteArgs{Key: k, writeFence: wf, TTL: time.Second},
		holdClaimArgs{Now: sampleNow, Key: k, Until: time.UnixMilli(5)},
		listParkedArgs{Key: k, Limit: 10},
		pageRegistryArgs{Poller: k.Poller, After: &after, Limit: 10},
		parkArgs{Key: k, fence: f},
		pauseArgs{Key: k},
		readOutboxArgs{Key: k, fence: f, Count: 10},
		readRegistryArgs{Key: k},
		registerKeysArgs{Now: sampleNow, Poller: k.Poller, Partitions: []string{"t1", "t2"}},
		releaseParkedArgs{Key: k, writeFence: wf, IDs: []string{"inv1"}},
		renewArgs{Key: k, fence: f, TTL: time.Second},
		repairDueArgs{Now: sampleNow, Poller: k.Poller, Entries: []repairEntry{{Partition: "t1"}, {Partition: "t2"}}},
		retireKeyArgs{Key: k, Epoch: 3, Floor: 4},
		setDueArgs{Now: sampleNow, Key: k, Due: "remove"},
		triggerArgs{Key: k, Resume: true},
		triggerDueArgs{Now: sampleNow, Key: k},
	}
}

// source splits a script into its header (the leading comment lines, without their dashes)
// and its code.
func source(t *testing.T, name string) (header []string, code string) {
	t.Helper()
	src, err := os.ReadFile("../luascripts/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(src), "\n")
	n := 0
	var h []string
	for ; n < len(lines) && strings.HasPrefix(lines[n], "--"); n++ {
		h = append(h, strings.TrimSpace(strings.TrimPrefix(lines[n], "--")))
	}
	return h, strings.Join(lines[n:], "")
}

// structureOf is the structure a key names: its suffix, or for a global key its kind.
func structureOf(s *Store, key string) string {
	switch {
	case strings.HasPrefix(key, s.keysKey("")):
		return "registry"
	case key == s.retiredKey():
		return "retired"
	case key == s.pollersKey():
		return "pollers"
	case strings.HasPrefix(key, s.dueKey("")):
		return "due"
	case strings.Contains(key, ":listed:"):
		return "listed"
	}
	return key[strings.LastIndex(key, ":")+1:]
}

var keysRE = regexp.MustCompile(`KEYS\[(\d+)(\.\.\.)?\]`)

// keyDescription is one "KEYS[n] what" of a header.
type keyDescription struct {
	n        int
	what     string
	variadic bool // KEYS[n...], or "KEYS[n], ... what": n and every later index
}

// keySection is the part of a header that declares KEYS: from the line that starts with
// KEYS[1] to the line that starts with ARGV[1] (later lines may mention keys in passing).
func keySection(header []string) string {
	from := slices.IndexFunc(header, func(l string) bool { return strings.HasPrefix(l, "KEYS[1]") })
	to := slices.IndexFunc(header, func(l string) bool { return strings.HasPrefix(l, "ARGV[1]") })
	if from < 0 || to < from {
		return ""
	}
	return strings.Join(header[from:to], " ")
}

// keyDescriptions reads the KEYS entries of a key section. An entry without words of its own
// ("KEYS[2], KEYS[3], ... the due sets") shares the next one's.
func keyDescriptions(h string) []keyDescription {
	var ds []keyDescription
	locs := keysRE.FindAllStringSubmatchIndex(h, -1)
	for i, loc := range locs {
		end := len(h)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		n, _ := strconv.Atoi(h[loc[2]:loc[3]])
		what := strings.Trim(h[loc[1]:end], " ,")
		ds = append(ds, keyDescription{n: n, what: what, variadic: loc[4] >= 0 || strings.HasPrefix(what, "...")})
	}
	for i := len(ds) - 2; i >= 0; i-- {
		if ds[i].what == "" {
			ds[i].what, ds[i].variadic = ds[i+1].what, ds[i+1].variadic
		}
	}
	return ds
}

// describe is what the header says KEYS[n] is ("" when it does not say).
func describe(ds []keyDescription, n int) string {
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].n == n || ds[i].n < n && ds[i].variadic {
			return ds[i].what
		}
	}
	return ""
}

// offlineStore is a store whose client never connects: for tests that only need key names.
func offlineStore(t *testing.T) *Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every script has a wrapper, and each header says what the wrapper sends: the structure of
// every KEYS entry in order, the fence arguments first (and the write id fourth) in fenced
// scripts, and where the clock override goes.
func TestHeadersMatchTheWrappers(t *testing.T) {
	// keyPhrases names, per structure, the words a header uses for it.
	keyPhrases := map[string]string{
		"state": "state hash", "outbox": "outbox stream", "holds": "holds hash", "held": "held events sorted set",
		"released": "released ordering keys sorted set", "items": "items hash", "parked": "parked hash",
		"parked-ids": "parked ids sorted set", "log": "replay log stream", "gone": "tombstones sorted set",
		"invalid": "invalid observations hash", "touched": "set of identities", "registry": "registry index",
		"retired": "high-water marks hash", "listed": "listed identities hash", "payloads": "payloads hash", "bucket": "the bucket (a hash", "held-slots": "held set", "pollers": "pollers hash", "due": "due set",
	}
	s := offlineStore(t)
	l := core.Lease{Key: watukuytype.Key{Poller: "orders", Partition: "t1"}, Epoch: 42, Token: "the-token"}
	var wrapped []string
	for _, sc := range samples(l) {
		name := sc.name()
		wrapped = append(wrapped, name)
		lines, code := source(t, name)
		h := strings.Join(lines, " ")
		keys, argv := sc.encode(s)
		ds := keyDescriptions(keySection(lines))
		for i, key := range keys {
			want := keyPhrases[structureOf(s, key)]
			if what := describe(ds, i+1); want == "" || !strings.Contains(what, want) {
				t.Errorf("%s.lua: the wrapper sends %s as KEYS[%d]; the header says %q, want it to say %q", name, key, i+1, what, want)
			}
		}
		if len(ds) == 0 {
			t.Errorf("%s.lua: the header describes no KEYS", name)
		} else if last := ds[len(ds)-1]; last.n > len(keys) {
			t.Errorf("%s.lua: the header describes KEYS[%d]; the wrapper sends %d keys", name, last.n, len(keys))
		}
		if strings.Contains(code, "fence(") {
			if !slices.Equal(argv[:3], []any{l.Epoch, l.Token, sampleNow}) || !strings.Contains(h, "ARGV[1] epoch, ARGV[2] token, ARGV[3] now override") {
				t.Errorf("%s.lua is fenced: the wrapper's ARGV starts %v; header %q", name, argv[:3], h)
			}
			if sends, says := argv[3] == any("77"), strings.Contains(h, "ARGV[4] write id"); sends != says {
				t.Errorf("%s.lua: the wrapper sends a write id as ARGV[4]: %v; the header says so: %v", name, sends, says)
			}
		}
		at := slices.Index(argv, any(sampleNow))
		if says := strings.Contains(h, "now override"); says != (at >= 0) || at >= 0 && !strings.Contains(h, "ARGV["+strconv.Itoa(at+1)+"] now override") {
			t.Errorf("%s.lua: the wrapper sends the clock override as ARGV[%d] (0: not at all); header %q", name, at+1, h)
		}
	}
	slices.Sort(wrapped)
	if names := luascripts.Names(); !slices.Equal(wrapped, names) {
		t.Errorf("wrappers %v, scripts %v", wrapped, names)
	}
}

// Every fenced script checks its fence before anything else: the fence call is its first
// command and its error is returned at once.
func TestFenceComesFirst(t *testing.T) {
	first := regexp.MustCompile(`(?s)^local now = now_ms\(ARGV\[3\]\)\nlocal err(, dup(, l)?)? = fence\(KEYS\[\d+\], ARGV\[1\], ARGV\[2\], now(, ARGV\[4\](, '\w+')*)?\)\nif err then return err end\n`)
	n := 0
	for _, name := range luascripts.Names() {
		h, b := source(t, name)
		if !strings.Contains(b, "fence(") {
			continue
		}
		n++
		if !first.MatchString(b) {
			t.Errorf("%s.lua does not start with the fence check:\n%s", name, b[:min(len(b), 200)])
		}
		if !strings.Contains(strings.Join(h, " "), "Fence check first") {
			t.Errorf("%s.lua: the header does not say the fence check runs first", name)
		}
	}
	if n != 9 {
		t.Errorf("%d fenced scripts, want 9 (ack, commit_poll, delete_key, end, end_delete, park, read_outbox, release_parked, renew)", n)
	}
}

// decoderOf erases a script's reply type, for one table over every script.
func decoderOf[R any](sc script[R]) func(any) (any, error) {
	return func(v any) (any, error) { return sc.decode(v) }
}

// Each script's reply decoder reads the replies the script gives, and a reply of another
// shape is an error that names the script, the key and the field.
func TestScriptRepliesDecode(t *testing.T) {
	key := watukuytype.Key{Poller: "orders", Partition: "t1"}
	two := []core.OutboxEvent{{ID: "ev1"}, {ID: "ev2"}}
	decoders := map[string]func(any) (any, error){
		"ack":            decoderOf(ackArgs{Key: key}),
		"add_key":        decoderOf(addKeyArgs{Key: key}),
		"begin":          decoderOf(beginArgs{Key: key, Owner: "a", TTL: time.Second, Token: "tok"}),
		"budget_pause":   decoderOf(budgetPauseArgs{Bucket: "shop"}),
		"budget_take":    decoderOf(budgetTakeArgs{BudgetTake: core.BudgetTake{Bucket: "shop"}}),
		"claim_due":      decoderOf(claimDueArgs{Pollers: []string{"orders"}}),
		"confirm_claims": decoderOf(confirmClaimsArgs{Keys: []watukuytype.Key{key}}),
		"commit_poll":    decoderOf(commitPollArgs{Key: key, Commit: core.Commit{Events: two}}),
		"delete_key":     decoderOf(deleteKeyArgs{Key: key}),
		"end":            decoderOf(endArgs{Key: key}),
		"end_delete":     decoderOf(endDeleteArgs{Key: key}),
		"list_parked":    decoderOf(listParkedArgs{Key: key}),
		"page_registry":  decoderOf(pageRegistryArgs{Poller: "orders"}),
		"pause":          decoderOf(pauseArgs{Key: key}),
		"hold_claim":     decoderOf(holdClaimArgs{Key: key}),
		"park":           decoderOf(parkArgs{Key: key}),
		"read_outbox":    decoderOf(readOutboxArgs{Key: key}),
		"read_registry":  decoderOf(readRegistryArgs{Key: key}),
		"register_keys":  decoderOf(registerKeysArgs{Poller: "orders"}),
		"release_parked": decoderOf(releaseParkedArgs{Key: key}),
		"renew":          decoderOf(renewArgs{Key: key}),
		"repair_due":     decoderOf(repairDueArgs{Poller: "orders", Entries: []repairEntry{{Partition: "t1"}}}),
		"retire_key":     decoderOf(retireKeyArgs{Key: key}),
		"set_due":        decoderOf(setDueArgs{Key: key}),
		"trigger":        decoderOf(triggerArgs{Key: key}),
		"trigger_due":    decoderOf(triggerDueArgs{Key: key}),
	}
	type list = []any
	at := time.UnixMilli
	cases := []struct {
		script string
		reply  any
		want   any    // the decoded reply, when field is ""
		field  string // the field the error names
	}{
		{script: "ack", reply: list{int64(2), int64(1)}, want: ackReply{Acked: 2, Paused: true}},
		{script: "ack", reply: list{int64(2)}, field: "reply"},
		{script: "ack", reply: list{int64(2), "1"}, field: "paused"},
		{script: "ack", reply: list{int64(2), int64(3)}, field: "paused"},
		{script: "ack", reply: "OK", field: "reply"},

		{script: "begin", reply: list{"fresh", int64(4)}, want: beginReply{Fresh: true, BeginResult: core.BeginResult{Now: at(4)}}},
		{script: "begin", reply: list{"deleted"}, want: beginReply{BeginResult: core.BeginResult{Status: core.BeginDeleted}}},
		{script: "begin", reply: list{"paused"}, want: beginReply{BeginResult: core.BeginResult{Status: core.BeginPaused}}},
		{script: "begin", reply: list{"notDue", int64(5), int64(6)}, want: beginReply{BeginResult: core.BeginResult{Status: core.BeginNotDue, NextDue: at(5), Now: at(6)}}},
		{script: "begin", reply: list{"leased", int64(7), int64(8)}, want: beginReply{BeginResult: core.BeginResult{Status: core.BeginLeased, LeaseExpires: at(7), Now: at(8)}}},
		{script: "begin", reply: list{"ok", int64(9), int64(10), int64(1), list{"nextDue", "0"}, int64(4), int64(3), int64(2)},
			want: beginReply{BeginResult: core.BeginResult{Status: core.BeginOK, Lease: core.Lease{Key: key, Owner: "a", Epoch: 9, Token: "tok", TTL: time.Second},
				Now: at(10), OutboxLen: 1, State: map[string]string{"nextDue": "0"}, Released: 4, Items: 3, InvalidIndexed: 2}}},
		{script: "begin", reply: list{"fresh"}, field: "reply"},
		{script: "begin", reply: list{}, field: "status"},
		{script: "begin", reply: list{int64(1)}, field: "status"},
		{script: "begin", reply: list{"later"}, field: "status"},
		{script: "begin", reply: list{"deleted", int64(1)}, field: "reply"},
		{script: "begin", reply: list{"notDue", int64(5)}, field: "reply"},
		{script: "begin", reply: list{"leased", "7", int64(8)}, field: "expiresAt"},
		{script: "begin", reply: list{"ok", "9", int64(10), int64(1), list{}, int64(0), int64(3), int64(0)}, field: "epoch"},
		{script: "begin", reply: list{"ok", int64(9), int64(10), int64(1), list{"nextDue"}, int64(0), int64(3), int64(0)}, field: "state"},
		{script: "begin", reply: list{"ok", int64(9), int64(10), int64(1), list{"nextDue", int64(0)}, int64(0), int64(3), int64(0)}, field: "state[1]"},
		{script: "begin", reply: list{"ok", int64(9), int64(10), int64(1), list{}, list{}, int64(3), int64(0)}, field: "released"},
		{script: "begin", reply: list{"ok", int64(9), int64(10), int64(1), list{}, int64(0), int64(3)}, field: "reply"},

		{script: "add_key", reply: "a5", want: "a5"},
		{script: "add_key", reply: "", want: ""},
		{script: "add_key", reply: int64(1), field: "entry"},

		{script: "budget_pause", reply: int64(5), want: at(5)},
		{script: "budget_pause", reply: "5", field: "pausedUntil"},

		{script: "budget_take", reply: list{int64(1), int64(2500), int64(0), int64(9000), int64(0)}, want: core.BudgetGrant{Taken: true, Wait: 2500 * time.Microsecond, At: at(9)}},
		{script: "budget_take", reply: list{int64(1), int64(0), int64(0), int64(9000), int64(1)}, want: core.BudgetGrant{Taken: true, At: at(9), Held: true}},
		{script: "budget_take", reply: list{int64(0), int64(3000), int64(7), int64(9000), int64(0)}, want: core.BudgetGrant{Wait: 3 * time.Millisecond, PausedUntil: at(7), At: at(9)}},
		{script: "budget_take", reply: list{int64(2), int64(0), int64(0), int64(9), int64(0)}, field: "taken"},
		{script: "budget_take", reply: list{int64(1), "0", int64(0), int64(9), int64(0)}, field: "wait"},
		{script: "budget_take", reply: list{int64(1), int64(0), int64(0), "9", int64(0)}, field: "now"},
		{script: "budget_take", reply: list{int64(1), int64(0), int64(0), int64(9), "1"}, field: "held"},
		{script: "budget_take", reply: list{int64(1), int64(0), int64(0)}, field: "reply"},

		{script: "claim_due", reply: list{int64(7), "orders|1", "orders|2"}, want: claimDueReply{At: 7, Keys: []watukuytype.Key{{Poller: "orders", Partition: "1"}, {Poller: "orders", Partition: "2"}}}},
		{script: "claim_due", reply: list{int64(7)}, want: claimDueReply{At: 7}},
		{script: "claim_due", reply: list{int64(7), "orders|1", int64(2)}, field: "claimed[1]"},
		{script: "claim_due", reply: list{int64(7), "orders"}, field: "claimed[0]"},
		{script: "claim_due", reply: list{"orders|1"}, field: "at"},
		{script: "claim_due", reply: list{}, field: "reply"},
		{script: "claim_due", reply: int64(0), field: "reply"},

		{script: "confirm_claims", reply: int64(2), want: int64(2)},
		{script: "confirm_claims", reply: "2", field: "held"},

		{script: "commit_poll", reply: list{int64(100), int64(0), "5-1", int64(0), list{}}, want: core.CommitResult{LeaseExpires: at(100), StreamIDs: []string{"5-1", "5-2"}}},
		{script: "commit_poll", reply: list{int64(100), int64(1), "5-1", int64(1), list{int64(1)}}, want: core.CommitResult{LeaseExpires: at(100), Paused: true, Duplicate: true, StreamIDs: []string{"5-1", "5-2"}, Diverted: []int{1}}},
		{script: "commit_poll", reply: list{int64(100), int64(0), "", int64(0), list{}}, field: "firstId"},
		{script: "commit_poll", reply: list{int64(100), int64(0), int64(5), int64(0), list{}}, field: "firstId"},
		{script: "commit_poll", reply: list{int64(100), int64(2), "5-1", int64(0), list{}}, field: "paused"},
		{script: "commit_poll", reply: list{int64(100), int64(0), "5-1", int64(0), list{int64(2)}}, field: "diverted[0]"},
		{script: "commit_poll", reply: list{int64(100), int64(0), "5-1", int64(0), list{"1"}}, field: "diverted[0]"},
		{script: "commit_poll", reply: list{int64(100), int64(0), "5-1", int64(0)}, field: "reply"},

		{script: "delete_key", reply: list{int64(3), int64(1700)}, want: deleteKeyReply{Epoch: 3, Floor: 1700}},
		{script: "delete_key", reply: list{int64(3)}, field: "reply"},
		{script: "delete_key", reply: list{int64(3), "1700"}, field: "floor"},
		{script: "end_delete", reply: int64(1), want: true},
		{script: "end_delete", reply: "DUPLICATE", want: false},
		{script: "end_delete", reply: int64(2), field: "reply"},

		{script: "end", reply: int64(1), want: endReply{}},
		{script: "end", reply: int64(2), want: endReply{Triggered: true}},
		{script: "end", reply: "DUPLICATE", want: endReply{Duplicate: true}},
		{script: "end", reply: int64(3), field: "reply"},
		{script: "end", reply: list{int64(1)}, field: "reply"},

		{script: "pause", reply: int64(1), want: true},
		{script: "pause", reply: int64(0), want: false},
		{script: "pause", reply: "OK", field: "reply"},

		{script: "trigger", reply: int64(1), want: true},
		{script: "trigger", reply: int64(0), want: false},
		{script: "trigger", reply: "OK", field: "reply"},
		{script: "trigger_due", reply: int64(1), want: true},
		{script: "trigger_due", reply: int64(0), want: false},
		{script: "trigger_due", reply: list{}, field: "reply"},
		{script: "list_parked", reply: list{"ev_1", "{}"}, want: []core.ParkedJSON{{ID: "ev_1", Row: []byte("{}")}}},
		{script: "list_parked", reply: list{"ev_1"}, field: "rows"},
		{script: "list_parked", reply: list{"ev_1", int64(1)}, field: "rows[1]"},
		{script: "page_registry", reply: list{"t1", "c"}, want: []string{"t1", "c"}},
		{script: "page_registry", reply: list{"t1"}, field: "entries"},
		{script: "read_registry", reply: list{`{"poller":"orders"}`, "c", int64(2), int64(3)},
			want: readRegistryReply{Poller: []byte(`{"poller":"orders"}`), Entry: "c", Epoch: 2, Floor: 3}},
		{script: "read_registry", reply: list{"", "", int64(0), int64(0)}, want: readRegistryReply{}},
		{script: "read_registry", reply: list{"", "", int64(0)}, field: "reply"},
		{script: "register_keys", reply: int64(2), want: int64(2)},
		{script: "register_keys", reply: "2", field: "added"},
		{script: "retire_key", reply: "c", want: "c"},
		{script: "retire_key", reply: int64(0), field: "entry"},

		{script: "hold_claim", reply: int64(1), want: true},
		{script: "hold_claim", reply: int64(0), want: false},
		{script: "hold_claim", reply: nil, field: "reply"},

		{script: "park", reply: int64(2), want: int64(2)},
		{script: "park", reply: "2", field: "moved"},

		{script: "read_outbox", reply: list{int64(2), int64(0), list{list{"1-1", "ev1", "x", "{}", "1-0", "", ""}}},
			want: core.Batch{Read: 2, Entries: []core.Entry{{StreamID: "1-1", ID: "ev1", OrderingKey: "x", Envelope: []byte("{}"), Seq: "1-0"}}}},
		{script: "read_outbox", reply: list{int64(1), int64(1), list{}}, want: core.Batch{Read: 1, Paused: true, Entries: []core.Entry{}}},
		{script: "read_outbox", reply: list{int64(1), int64(0), list{list{"", "ev1", "x", "{}", "1-0", "m", ""}}},
			want: core.Batch{Read: 1, Entries: []core.Entry{{ID: "ev1", OrderingKey: "x", Envelope: []byte("{}"), Seq: "1-0", Member: "m"}}}},
		{script: "read_outbox", reply: list{int64(2), int64(0), list{list{"1-1", "ev1", "x", int64(5), "1-0", "", ""}}}, field: "entries[0].envelope"},
		{script: "read_outbox", reply: list{int64(2), int64(0), list{list{"1-1", "ev1", "x", "{}", "1-0", "m", ""}}}, field: "entries[0].streamId"},
		{script: "read_outbox", reply: list{int64(2), int64(0), list{list{"", "ev1", "x", "{}", "1-0", "", ""}}}, field: "entries[0].streamId"},
		{script: "read_outbox", reply: list{int64(2), int64(0), list{list{"1-1", "ev1"}}}, field: "entries[0]"},
		{script: "read_outbox", reply: list{int64(1), int64(0), list{list{"", "ev1", "x", "{}", "1-0", "m", `{"n":2,"a":10,"f":1800000000000,"e":["HTTP 500"]}`}}},
			want: core.Batch{Read: 1, Entries: []core.Entry{{ID: "ev1", OrderingKey: "x", Envelope: []byte("{}"), Seq: "1-0", Member: "m",
				Retry: &core.RetryRecord{Tries: 2, Attempts: 10, First: 1_800_000_000_000, Errors: []string{"HTTP 500"}}}}}},
		{script: "read_outbox", reply: list{int64(1), int64(0), list{list{"", "ev1", "x", "{}", "1-0", "m", `{"n":2,"e":{}}`}}}, field: "entries[0].retry"},
		{script: "read_outbox", reply: list{int64(2), int64(0), "none"}, field: "entries"},
		{script: "read_outbox", reply: list{"2", int64(0), list{}}, field: "read"},

		{script: "release_parked", reply: list{int64(1), int64(3)}, want: releaseParkedReply{Released: 1, Returned: 3}},
		{script: "release_parked", reply: list{int64(1)}, field: "reply"},
		{script: "release_parked", reply: list{int64(1), "3"}, field: "returned"},

		{script: "renew", reply: list{int64(100), int64(1)}, want: core.Confirm{Expires: at(100), Paused: true}},
		{script: "renew", reply: list{int64(100)}, field: "reply"},
		{script: "renew", reply: list{"100", int64(0)}, field: "expiresAt"},

		{script: "repair_due", reply: list{"orders|t1"}, want: []watukuytype.Key{key}},
		{script: "repair_due", reply: list{int64(1)}, field: "repaired[0]"},

		{script: "set_due", reply: int64(1), want: true},
		{script: "set_due", reply: int64(0), want: false},
		{script: "set_due", reply: int64(2), field: "reply"},
	}
	good, bad := map[string]bool{}, map[string]bool{}
	for _, c := range cases {
		got, err := decoders[c.script](c.reply)
		if c.field == "" {
			good[c.script] = true
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s: decode %#v = %#v, %v; want %#v", c.script, c.reply, got, err, c.want)
			}
			continue
		}
		bad[c.script] = true
		var re *replyError
		if !errors.As(err, &re) || re.Script != c.script || re.Field != c.field {
			t.Errorf("%s: decode %#v: error %v, want a reply error on field %s", c.script, c.reply, err, c.field)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.script+".lua") || !strings.Contains(msg, c.field) || re.On == "" || !strings.Contains(msg, re.On) {
			t.Errorf("%s: the error %q does not name the script, what it ran on and the field", c.script, msg)
		}
	}
	for _, name := range luascripts.Names() {
		if !good[name] || !bad[name] {
			t.Errorf("%s.lua: the table lacks a good or a malformed reply", name)
		}
	}
}

// Every fenced script, called with another grant's epoch or token, fails with LEASE_LOST
// (recognised as *watukuytype.LeaseLostError) and writes nothing; the same call under the live lease
// writes, so the nothing is the fence's doing.
func TestFencedScriptsCheckTheFenceFirst(t *testing.T) {
	var fenced []string
	for _, name := range luascripts.Names() {
		if _, code := source(t, name); strings.Contains(code, "fence(") {
			fenced = append(fenced, name)
		}
	}
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "t1"}
		// setup leaves key leased, with state, an item, two undelivered events and a parked
		// invalid row: something for every fenced script to write to.
		setup := func(t *testing.T) (core.Lease, []string) {
			t.Helper()
			if err := flushAll(ctx, b.Client); err != nil {
				t.Fatal(err)
			}
			r, err := s.Begin(ctx, key, "a", time.Minute, core.BeginForAdd)
			if err != nil || r.Status != core.BeginOK {
				t.Fatalf("begin: %+v %v", r, err)
			}
			res, err := s.CommitPoll(ctx, r.Lease, core.Commit{State: map[string]string{"cursor.live": "c1"},
				Upserts: []core.Upsert{{Identity: "x", Row: []byte("123456781")}},
				Events:  []core.OutboxEvent{{ID: "ev1", OrderingKey: "x", Envelope: []byte(`{}`)}, {ID: "ev2", OrderingKey: "y", Envelope: []byte(`{}`)}},
				Invalid: []core.ParkedRow{{ID: "inv1", Row: []byte(`{"kind":"invalid"}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			return r.Lease, res.StreamIDs
		}
		// call runs the named fenced script under l; ids are the outbox's stream ids.
		call := func(name string, l core.Lease, ids []string) error {
			var err error
			switch name {
			case "ack":
				_, err = run(ctx, s, &l, ackArgs{Key: key, fence: s.fenceOf(l), Entries: outboxEntries(ids[:1]...)})
			case "commit_poll":
				_, err = run(ctx, s, &l, commitPollArgs{Key: key, writeFence: s.writeFenceOf(l), TTL: l.TTL, Commit: core.Commit{
					State: map[string]string{"cursor.live": "c2"}, Upserts: []core.Upsert{{Identity: "z", Row: []byte("999999999")}}, Deletes: []string{"x"},
					Events: []core.OutboxEvent{{ID: "ev9", OrderingKey: "z", Envelope: []byte(`{}`)}}, Unpark: []core.ParkedRow{{ID: "inv1"}}}})
			case "delete_key":
				_, err = run(ctx, s, &l, deleteKeyArgs{Key: key, writeFence: s.writeFenceOf(l)})
			case "end":
				_, err = run(ctx, s, &l, endArgs{Key: key, writeFence: s.writeFenceOf(l), State: map[string]string{statehash.NextDue: "1"}})
			case "end_delete":
				_, err = run(ctx, s, &l, endDeleteArgs{Key: key, writeFence: s.writeFenceOf(l), TTL: time.Minute})
			case "park":
				_, err = run(ctx, s, &l, parkArgs{Key: key, fence: s.fenceOf(l),
					Parking: core.Parking{Poison: []core.Poison{{Entry: core.Entry{StreamID: ids[0], OrderingKey: "x"}, ParkedID: "ev1", Row: []byte(`{}`)}},
						Held: []core.Held{{Entry: core.Entry{StreamID: ids[1], OrderingKey: "x", Seq: ids[1]}, JSON: []byte(`{}`)}}}})
			case "read_outbox":
				_, err = run(ctx, s, &l, readOutboxArgs{Key: key, fence: s.fenceOf(l), Count: 10})
			case "release_parked":
				_, err = run(ctx, s, &l, releaseParkedArgs{Key: key, writeFence: s.writeFenceOf(l), IDs: []string{"inv1"}})
			case "renew":
				_, err = run(ctx, s, &l, renewArgs{Key: key, fence: s.fenceOf(l), TTL: l.TTL})
			default:
				t.Fatalf("%s.lua is fenced and this test has no call of it", name)
			}
			return err
		}
		for _, name := range fenced {
			t.Run(name, func(t *testing.T) {
				l, ids := setup(t)
				otherEpoch, otherToken := l, l
				otherEpoch.Epoch++
				otherToken.Token = "another-grant"
				for _, forged := range []core.Lease{otherEpoch, otherToken} {
					before := b.Dump(t)
					err := call(name, forged, ids)
					var ll *watukuytype.LeaseLostError
					if !errors.As(err, &ll) || ll.Key != key || ll.Epoch != forged.Epoch || !strings.HasPrefix(ll.Reason, codeLeaseLost) {
						t.Errorf("epoch %d, token %s: %v, want LEASE_LOST", forged.Epoch, forged.Token, err)
					}
					if after := b.Dump(t); !reflect.DeepEqual(before, after) {
						t.Errorf("epoch %d, token %s: Redis changed:\nbefore %v\nafter  %v", forged.Epoch, forged.Token, before, after)
					}
				}
				clk.Advance(time.Millisecond) // so that a renewal moves the lease's end
				before := b.Dump(t)
				if err := call(name, l, ids); err != nil {
					t.Fatalf("under the live lease: %v", err)
				}
				if after := b.Dump(t); reflect.DeepEqual(before, after) {
					t.Error("under the live lease the call wrote nothing either: the test proves nothing")
				}
			})
		}
	})
}

// module is this module's import path, to find a package's directory from its import.
const module = "github.com/watukuy/watukuy/"

// stringConsts parses the string constants declared in the non-test Go files of dir.
func stringConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	out := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range constSpecs(f) {
			for i, n := range spec.Names {
				if i < len(spec.Values) {
					if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[n.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}

func constSpecs(f *ast.File) []*ast.ValueSpec {
	var specs []*ast.ValueSpec
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				specs = append(specs, s.(*ast.ValueSpec))
			}
		}
	}
	return specs
}

// callArgs lists the top-level arguments of every redis.call in code (quotes and nested
// calls kept whole).
func callArgs(code string) [][]string {
	var calls [][]string
	for _, after := range strings.Split(code, "redis.call(")[1:] {
		var args []string
		depth, quote, start := 0, byte(0), 0
	scan:
		for j := 0; j < len(after); j++ {
			switch c := after[j]; {
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
			case c == '(':
				depth++
			case c == ')' && depth > 0:
				depth--
			case c == ',' && depth == 0, c == ')':
				args = append(args, strings.TrimSpace(after[start:j]))
				start = j + 1
				if c == ')' {
					break scan
				}
			}
		}
		calls = append(calls, args)
	}
	return calls
}

func firstArg(args []string) []string { return args[:min(1, len(args))] }
func allArgs(args []string) []string  { return args }
func noArgs([]string) []string        { return nil }
func pairArgs(args []string) []string {
	var fs []string
	for i := 0; i < len(args); i += 2 {
		fs = append(fs, args[i])
	}
	return fs
}

var luaString = regexp.MustCompile(`^'([^']*)'$|^"([^"]*)"$`)

// The state-hash field names live in one list (package statehash): every field a script reads
// or writes on the state hash by name is in it, and every field in it is named by a script or
// by the engine's or the store's Go code. A field renamed on one side only fails here.
func TestStateFieldsAreOneList(t *testing.T) {
	fields := stringConsts(t, filepath.Join("..", "statehash"))
	listed := map[string]bool{}
	for _, v := range fields {
		listed[v] = true
	}

	// The state hash is KEYS[n] where the wrapper sends the state key there, and state_key in
	// the prelude's helpers.
	s := offlineStore(t)
	stateExpr := map[string]map[string]bool{"prelude": {"state_key": true}}
	for _, sc := range samples(core.Lease{Key: watukuytype.Key{Poller: "orders", Partition: "t1"}}) {
		keys, _ := sc.encode(s)
		stateExpr[sc.name()] = map[string]bool{}
		for i, k := range keys {
			if structureOf(s, k) == "state" {
				stateExpr[sc.name()]["KEYS["+strconv.Itoa(i+1)+"]"] = true
			}
		}
	}
	// fieldArgs is, per hash command, which of its arguments after the key are field names.
	fieldArgs := map[string]func(args []string) []string{
		"HGET": firstArg, "HEXISTS": firstArg, "HINCRBY": firstArg, "HINCRBYFLOAT": firstArg, "HSTRLEN": firstArg,
		"HMGET": allArgs, "HDEL": allArgs,
		"HSET": pairArgs, "HSETNX": pairArgs, "HMSET": pairArgs,
		"HGETALL": noArgs, "HKEYS": noArgs, "HVALS": noArgs, "HLEN": noArgs, "UNLINK": noArgs, "DEL": noArgs, "EXISTS": noArgs, "PEXPIRE": noArgs, "PERSIST": noArgs,
	}
	pausedOf := regexp.MustCompile(`paused\(([^)]*)\)`)
	inLua := map[string]bool{}
	for name, exprs := range stateExpr {
		_, code := source(t, name)
		for _, m := range pausedOf.FindAllStringSubmatch(code, -1) {
			if name != "prelude" && !exprs[m[1]] {
				t.Errorf("%s.lua: paused(%s) reads the pause flag off a key that is not the state hash", name, m[1])
			}
		}
		for _, args := range callArgs(code) {
			if len(args) < 2 || !exprs[args[1]] {
				continue
			}
			cmd := strings.ToUpper(strings.Trim(args[0], `'"`))
			pick, ok := fieldArgs[cmd]
			if !ok {
				t.Errorf("%s.lua: %s on the state hash: teach this test which of its arguments are fields", name, cmd)
				continue
			}
			for _, a := range pick(args[2:]) {
				m := luaString.FindStringSubmatch(a)
				if m == nil {
					continue // a field the Go side sends: one of core's
				}
				field := m[1] + m[2]
				inLua[field] = true
				if !listed[field] {
					t.Errorf("%s.lua: %s names state field %q, which package statehash does not list", name, cmd, field)
				}
			}
		}
	}
	if len(inLua) == 0 {
		t.Fatal("found no state field in the scripts: the parser is broken")
	}

	// Field constants the Go code names (statehash.X in the engine and the store).
	inGo := map[string]bool{}
	for _, dir := range []string{".", filepath.Join("..", "core")} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "statehash" {
						inGo[sel.Sel.Name] = true
					}
				}
				return true
			})
		}
	}
	if len(inGo) == 0 {
		t.Fatal("found no statehash constant in the Go code: the parser is broken")
	}
	for name, v := range fields {
		if !inLua[v] && !inGo[name] {
			t.Errorf("statehash.%s (%q) is named by no script and no Go code of the engine or the store", name, v)
		}
	}
}
