package redisstore

// Trigger and Resume (trigger.lua, then trigger_due.lua) racing partitions delete and
// partitions add, each split into its scripts, and a running cycle.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// triggerSplit runs the trigger's two halves separately, as a process paused between them
// (or a cluster whose {global} node answers later) does, and reports what Store.trigger would
// have returned: written (nil) or refused (ErrKeyDeleted).
type triggerSplit struct {
	t       *testing.T
	s       *Store
	key     watukuytype.Key
	resume  bool
	stateOK bool
	dueOK   bool
	ranDue  bool
}

func (ts *triggerSplit) state() {
	ts.t.Helper()
	w, err := run(context.Background(), ts.s, nil, triggerArgs{Key: ts.key, Resume: ts.resume})
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.stateOK = w
}

func (ts *triggerSplit) due() {
	ts.t.Helper()
	ts.ranDue = true
	if !ts.stateOK {
		return
	}
	w, err := run(context.Background(), ts.s, nil, triggerDueArgs{Now: ts.s.nowArg(), Key: ts.key})
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.dueOK = w
}

func (ts *triggerSplit) ok() bool { return ts.stateOK && ts.dueOK }

// markFields are the fields a deletion mark may hold.
var markFields = map[string]bool{"deleted": true, "floor": true, "epoch": true, "token": true, "owner": true,
	"expiresAt": true, "write": true, "reply": true}

// A trigger (or resume) split into its two scripts, each landing before any step of a
// partitions delete (begin, delete_key, retire_key, end_delete, or after it): it reports
// success only when both halves landed before the step that refuses them, and never leaves a
// field in the mark, a due entry of the deleted key, or a pause that comes back with the add.
func TestTriggerSplitAroundEveryDeleteStep(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "c00") // the poller exists
		for _, kind := range []string{"cfg", "add"} {
			for _, resume := range []bool{false, true} {
				for i := 0; i <= 4; i++ {
					for j := i; j <= 4; j++ {
						key := watukuytype.Key{Poller: "orders", Partition: fmt.Sprintf("%s-%d%d-%v", kind, i, j, resume)}
						if kind == "cfg" {
							registerListing(t, s, key.Partition)
						} else {
							addKey(t, s, key)
						}
						r := beginOK(t, s, key, core.BeginForCycle)
						if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Hour), Trigger: r.State["trig"]}); err != nil {
							t.Fatal(err)
						}
						if resume {
							if err := s.Pause(ctx, key); err != nil {
								t.Fatal(err)
							}
						}
						ts := &triggerSplit{t: t, s: s, key: key, resume: resume}
						var lease core.Lease
						var marks deleteKeyReply
						steps := []func(){
							func() { lease = beginOK(t, s, key, core.BeginForDelete).Lease },
							func() {
								var err error
								if marks, err = run(ctx, s, &lease, deleteKeyArgs{Key: key, writeFence: s.writeFenceOf(lease)}); err != nil {
									t.Fatal(err)
								}
							},
							func() {
								if _, err := run(ctx, s, nil, retireKeyArgs{Key: key, Epoch: marks.Epoch, Floor: marks.Floor}); err != nil {
									t.Fatal(err)
								}
							},
							func() {
								if _, err := run(ctx, s, &lease, endDeleteArgs{Key: key, writeFence: s.writeFenceOf(lease), TTL: time.Minute}); err != nil {
									t.Fatal(err)
								}
							},
						}
						for n := 0; n <= len(steps); n++ {
							if n == i {
								ts.state()
							}
							if n == j {
								ts.due()
							}
							if n < len(steps) {
								steps[n]()
							}
						}
						wantOK := i == 0 && j <= 2
						if ts.ok() != wantOK {
							t.Errorf("%s: trigger.lua before step %d, trigger_due before step %d: reported ok=%v, want %v", key.Partition, i, j, ts.ok(), wantOK)
						}
						st := b.Client.HGetAll(ctx, s.Key(key, "state")).Val()
						for f := range st {
							if !markFields[f] {
								t.Errorf("%s: field %q written into the deletion mark: %v", key.Partition, f, st)
							}
						}
						if err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Err(); !errors.Is(err, redis.Nil) {
							t.Errorf("%s: the deleted key has a due entry (%v)", key.Partition, err)
						}
						addKey(t, s, key)
						if r, err := s.Begin(ctx, key, "w", time.Minute, core.BeginForCycle); err != nil || r.Status != core.BeginOK {
							t.Errorf("%s: after the add, a cycle: %s %v", key.Partition, statusName(r.Status), err)
						}
					}
				}
			}
		}
	})
}

// A trigger (or resume) split into its two scripts around every step of a partitions add of a
// deleted key (its mark alive or expired): what it reports, the key ends live, unpaused and
// due now, and a trigger reported as written landed on a live key.
func TestTriggerSplitAroundEveryAddStep(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		registerListing(t, s, "c00")
		for _, expired := range []bool{false, true} {
			for _, resume := range []bool{false, true} {
				for i := 0; i <= 4; i++ {
					for j := i; j <= 4; j++ {
						key := watukuytype.Key{Poller: "orders", Partition: fmt.Sprintf("add-%d%d-%v-%v", i, j, resume, expired)}
						addKey(t, s, key)
						deleteKey(t, s, key)
						if expired {
							// What the mark's expiry does, without waiting for it.
							if err := b.Client.Del(ctx, s.Key(key, "state")).Err(); err != nil {
								t.Fatal(err)
							}
						}
						ts := &triggerSplit{t: t, s: s, key: key, resume: resume}
						var r core.BeginResult
						steps := []func(){
							func() { r = beginOK(t, s, key, core.BeginForAdd) },
							func() {
								if _, err := run(ctx, s, nil, addKeyArgs{Now: s.nowArg(), Key: key, Entry: "a1"}); err != nil {
									t.Fatal(err)
								}
							},
							func() {
								if r.State["deleted"] == "1" {
									if _, err := run(ctx, s, &r.Lease, deleteKeyArgs{Key: key, writeFence: s.writeFenceOf(r.Lease), Revive: true}); err != nil {
										t.Fatal(err)
									}
								}
							},
							func() {
								if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: r.State["trig"]}); err != nil {
									t.Fatal(err)
								}
							},
						}
						for n := 0; n <= len(steps); n++ {
							if n == i {
								ts.state()
							}
							if n == j {
								ts.due()
							}
							if n < len(steps) {
								steps[n]()
							}
						}
						if e, found := entryOf(t, s, key); !found || e.Deleted {
							t.Fatalf("%s: not live after the add: %+v %v", key.Partition, e, found)
						}
						sc, err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Result()
						if err != nil || sc > float64(clk.Now().UnixMilli()) {
							t.Errorf("%s: after the add (trigger ok=%v): due %v %v, want due now", key.Partition, ts.ok(), sc, err)
						}
						if br, err := s.Begin(ctx, key, "w", time.Minute, core.BeginForCycle); err != nil || br.Status != core.BeginOK {
							t.Errorf("%s: after the add (trigger ok=%v), a cycle: %s %v", key.Partition, ts.ok(), statusName(br.Status), err)
						}
						t.Logf("%s: trigger ok=%v", key.Partition, ts.ok())
					}
				}
			}
		}
	})
}

// A trigger that reaches a key whose deletion mark expired and which the registry forgot (an
// added key), or marked deleted (a config key), is refused (ErrKeyDeleted) and must leave
// nothing of the key in Redis: trigger_due.lua writes no due entry for it, so no claim and no
// Begin ever visits it again to drop what trigger.lua wrote (the old Trigger wrote a due
// entry too, whose claim's Begin found the key gone and dropped its state). A replay,
// reset-cursor, backfill or parked retry whose process paused past the mark after its
// operation's lease ended lands exactly here (Engine.dueNow).
func TestTriggerOfAForgottenKeyLeavesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		registerListing(t, s, "cfg")
		added := watukuytype.Key{Poller: "orders", Partition: "x"}
		cfg := watukuytype.Key{Poller: "orders", Partition: "cfg"}
		addKey(t, s, added)
		for _, key := range []watukuytype.Key{added, cfg} {
			for _, resume := range []bool{false, true} {
				deleteKey(t, s, key)
				expire(t, b, s.Key(key, "state"), s.markTTL)
				if n := b.Client.Exists(ctx, s.Key(key, "state")).Val(); n != 0 {
					t.Fatal("the mark did not expire")
				}
				var err error
				if resume {
					err = s.Resume(ctx, key)
				} else {
					err = s.Trigger(ctx, key)
				}
				if !errors.Is(err, core.ErrKeyDeleted) {
					t.Fatalf("%s (resume %v) of a forgotten key: %v, want ErrKeyDeleted", key.Partition, resume, err)
				}
				due := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Err() == nil
				if left := b.Client.HGetAll(ctx, s.Key(key, "state")).Val(); len(left) != 0 {
					t.Errorf("%s (resume %v): refused as deleted, yet it left a state hash %v (due entry: %v; no TTL, nothing visits it)",
						key.Partition, resume, left, due)
				}
				_ = b.Client.Del(ctx, s.Key(key, "state")).Err()
				addKey(t, s, key) // back, for the next round
			}
		}
	})
}

// A registered key that was never begun (no state), or only paused (a state without an
// epoch), is resumed and triggered: due now, unpaused, begun by the next cycle.
func TestTriggerOfAKeyWithoutState(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "n1", "n2")
		k1 := watukuytype.Key{Poller: "orders", Partition: "n1"}
		k2 := watukuytype.Key{Poller: "orders", Partition: "n2"}
		// Push both due entries into the future: only the trigger makes them due now.
		zadd(t, b, s.DueKey("orders"), map[string]time.Time{k1.String(): clk.Now().Add(time.Hour), k2.String(): clk.Now().Add(time.Hour)})
		if err := s.Trigger(ctx, k1); err != nil {
			t.Fatal(err)
		}
		if err := s.Pause(ctx, k2); err != nil {
			t.Fatal(err)
		}
		if err := s.Resume(ctx, k2); err != nil {
			t.Fatal(err)
		}
		for _, k := range []watukuytype.Key{k1, k2} {
			sc, err := b.Client.ZScore(ctx, s.DueKey("orders"), k.String()).Result()
			if err != nil || sc > float64(clk.Now().UnixMilli()) {
				t.Errorf("%s: due %v %v, want now", k.Partition, sc, err)
			}
			if r, err := s.Begin(ctx, k, "w", time.Minute, core.BeginForCycle); err != nil || r.Status != core.BeginOK {
				t.Errorf("%s: a cycle after the trigger: %s %v", k.Partition, statusName(r.Status), err)
			}
		}
	})
}

// The trigger generation (end.lua): a trigger whose state half lands during a cycle and whose
// due half lands only after the cycle's End (a pause between them) still leaves the key due
// now; so does one whose state half lands after the End.
func TestTriggerSplitAroundACycleEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "g")
		key := watukuytype.Key{Poller: "orders", Partition: "g"}
		for _, during := range []bool{true, false} {
			r := beginOK(t, s, key, core.BeginForCycle)
			ts := &triggerSplit{t: t, s: s, key: key}
			if during {
				ts.state()
			}
			if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Hour), Trigger: r.State["trig"]}); err != nil {
				t.Fatal(err)
			}
			if during {
				sc, err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Result()
				if err != nil || sc > float64(clk.Now().UnixMilli()) {
					t.Errorf("triggered during the cycle, before its due half: due %v %v, want now (end.lua's generation)", sc, err)
				}
			} else {
				ts.state()
			}
			ts.due()
			if !ts.ok() {
				t.Fatalf("trigger of a live key refused (during %v)", during)
			}
			sc, err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Result()
			if err != nil || sc > float64(clk.Now().UnixMilli()) {
				t.Errorf("during %v: due %v %v, want now", during, sc, err)
			}
			if nd := b.Client.HGet(ctx, s.Key(key, "state"), "nextDue").Val(); nd != "0" {
				t.Errorf("during %v: nextDue %q, want 0", during, nd)
			}
		}
	})
}

// Trigger and Resume with every script sent twice (go-redis after a read timeout): the same
// outcome as once, for a live key and for a deleted one.
func TestTriggerResent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "r1", "r2")
		live := watukuytype.Key{Poller: "orders", Partition: "r1"}
		gone := watukuytype.Key{Poller: "orders", Partition: "r2"}
		deleteKey(t, s, gone)
		zadd(t, b, s.DueKey("orders"), map[string]time.Time{live.String(): clk.Now().Add(time.Hour)})
		if err := s.Pause(ctx, live); err != nil {
			t.Fatal(err)
		}
		b.Client.AddHook(resend{})
		if err := s.Resume(ctx, live); err != nil {
			t.Fatal(err)
		}
		if err := s.Trigger(ctx, live); err != nil {
			t.Fatal(err)
		}
		if sc, err := b.Client.ZScore(ctx, s.DueKey("orders"), live.String()).Result(); err != nil || sc > float64(clk.Now().UnixMilli()) {
			t.Errorf("resent trigger: due %v %v", sc, err)
		}
		if r, err := s.Begin(ctx, live, "w", time.Minute, core.BeginForCycle); err != nil || r.Status != core.BeginOK {
			t.Errorf("after a resent resume: %s %v", statusName(r.Status), err)
		}
		for _, resume := range []bool{false, true} {
			var err error
			if resume {
				err = s.Resume(ctx, gone)
			} else {
				err = s.Trigger(ctx, gone)
			}
			if !errors.Is(err, core.ErrKeyDeleted) {
				t.Errorf("resent (resume %v) of a deleted key: %v", resume, err)
			}
		}
		if err := b.Client.ZScore(ctx, s.DueKey("orders"), gone.String()).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("a deleted key got a due entry (%v)", err)
		}
	})
}

// A trigger's due entry is written only while the registry holds the key live: partitions
// delete drops the entry and the due entry in one script, so a trigger that reaches the due
// set after it writes nothing there, and Trigger says the key is deleted.
func TestTriggerWritesNoDueEntryForAKeyTheRegistryDropped(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		registerListing(t, s, "cfg")
		addKey(t, s, key)
		if err := s.Trigger(ctx, key); err != nil {
			t.Fatalf("trigger of a live key: %v", err)
		}
		if err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Err(); err != nil {
			t.Fatalf("a triggered live key has no due entry: %v", err)
		}
		r := beginOK(t, s, key, core.BeginForDelete)
		marks, err := run(ctx, s, &r.Lease, deleteKeyArgs{Key: key, writeFence: s.writeFenceOf(r.Lease)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run(ctx, s, nil, retireKeyArgs{Key: key, Epoch: marks.Epoch, Floor: marks.Floor}); err != nil {
			t.Fatal(err)
		}
		// The state's half of the trigger landed before the delete; its due entry comes after.
		written, err := run(ctx, s, nil, triggerDueArgs{Now: s.nowArg(), Key: key})
		if err != nil || written {
			t.Fatalf("due entry of a key the registry dropped: written %v, %v", written, err)
		}
		if err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("a deleted key has a due entry (%v)", err)
		}
		if err := s.Trigger(ctx, key); !errors.Is(err, core.ErrKeyDeleted) {
			t.Fatalf("trigger of a deleted key: %v, want ErrKeyDeleted", err)
		}
	})
}
