package watukuy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/redistest"
)

// Adversarial review of layout 1 (held/released events in sorted sets, the registry's
// leaves, deletion marks). Each test names the guarantee it attacks.

// G4: a death in delivery, then a retry of the poison event (a2) before any cycle ran since.
// Had the park come before the acks, the event delivered before the poison one (a1) would be
// left in the outbox, and the released key's held events, read first (read_outbox.lua serves
// :released before the outbox), would put a2 before a1: the handler would see a1, a2, a1.
// The acks come first, so nothing delivered waits behind a parked event.
func TestAdvL1G4RetryBeforeAnyCycleAfterDeathBetweenParkAndAck(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		sameKey := func(p *Poller) {
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev Event) string { return "A" }
		}
		e.rec.setFail(func(ev Event) error {
			if ev.Identity == "a2" {
				return errors.New("poison")
			}
			return nil
		})
		e.api.Put("a1", nil)
		e.api.Put("a2", nil)
		parked := false
		h := &hookStore{afterPark: func() { parked = true }, beforeAck: func(core.Lease, []core.Entry) error {
			if parked {
				return errKilled // the process dies between park and ack
			}
			return nil
		}}
		e.tick(e.engine(e.poller(sameKey), hooked(h)))
		if !parked {
			t.Fatal("a2 was not parked")
		}
		eng := e.engine(e.poller(sameKey), nil)
		e.clock.Advance(3 * time.Minute) // the dead process's lease lapses; no cycle runs
		e.rec.setFail(nil)
		rows, err := eng.Parked().List(t.Context(), "orders", "", "poison")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		if _, err := eng.Parked().Retry(t.Context(), "orders", "", rows[0].ID); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		var got []string
		for _, ev := range e.rec.events() {
			got = append(got, ev.Identity)
		}
		if i := slices.Index(got, "a2"); i < 0 || slices.Contains(got[i:], "a1") {
			t.Fatalf("handler successes %v: a1 (committed first) after a2", got)
		}
	})
}

// G1/G9: a held event's member is "<8-hex len><orderingKey><seq>\n<json>"; an ordering key
// with a newline (the default ordering key is the identity, which the API controls:
// {"id":"x\ny"}) must not end the name early: read_outbox.lua would fail to decode the entry
// once that key is released, every drain of the partition would fail, and G9 would hold every
// later change of the partition behind it. The newline is searched after the ordering key.
func TestAdvL1G1NewlineInAnOrderingKeyWedgesTheDrain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		once := func(p *Poller) { p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 }
		const nl = "x\ny"
		e.rec.setFail(func(ev Event) error {
			if ev.Identity == nl {
				return errors.New("poison")
			}
			return nil
		})
		e.api.Put(nl, map[string]any{"n": 1})
		eng := e.engine(e.poller(once), nil)
		e.tick(eng) // created x\ny is parked: its ordering key is held
		e.api.Put(nl, map[string]any{"n": 2})
		e.clock.Advance(3 * time.Minute)
		e.tick(eng) // updated x\ny is committed into :held
		e.rec.setFail(nil)
		rows, err := eng.Parked().List(t.Context(), "orders", "", "poison")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		if _, err := eng.Parked().Retry(t.Context(), "orders", "", rows[0].ID); err != nil {
			t.Fatal(err)
		}
		e.api.Put("z", nil) // an unrelated change
		var errs []string
		for range 5 {
			e.clock.Advance(3 * time.Minute)
			rep := e.tick(eng)
			for _, ce := range rep.Errors {
				errs = append(errs, ce.Error())
			}
		}
		got := map[string]int{}
		for _, ev := range e.rec.events() {
			got[ev.Identity]++
		}
		if got[nl] != 2 || got["z"] != 1 {
			t.Fatalf("delivered %v, want x\\ny twice and z once; cycle errors: %.300q", got, errs)
		}
	})
}

// costCall is what one call cost Redis: round trips, commands the server ran (SLOWLOG at 0 µs),
// bytes it sent (INFO total_net_output_bytes), the script/command time it reported.
type costCall struct {
	name         string
	trips, cmds  int64
	bytes        int64
	sumUs, maxUs int64
	maxCmd       string
	wall         time.Duration
}

// TestAdvL1BigCosts is a one-off measurement (WATUKUY_ADV_BIG=1; WATUKUY_ADV_N partitions,
// default 100,000): what one call costs at N partitions, a key with 1M identities, a key with
// a 100,000-event outbox and a parked event holding 100,000 events, on a private redis-server.
func TestAdvL1BigCosts(t *testing.T) {
	if os.Getenv("WATUKUY_ADV_BIG") == "" {
		t.Skip("a one-off measurement: WATUKUY_ADV_BIG=1")
	}
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("WATUKUY_ADV_N")); err == nil && v > 0 {
		n = v
	}
	big := n // items, outbox events, held events
	if v, err := strconv.Atoi(os.Getenv("WATUKUY_ADV_BIGN")); err == nil && v > 0 {
		big = v
	}
	ctx := context.Background()
	b := redistest.Real(t)
	rdb := b.Client
	api := fakeapi.New()
	rec := &recorder{}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("p%06d", i)
	}
	p := Poller{Name: "orders", Fetch: api.ChangeFeed(10), Version: Field("version"), Handler: rec.handle,
		Schedule: Schedule{Min: time.Hour, Max: time.Hour}, Partitions: parts,
		Delivery: Delivery{Attempts: 1, RetryHorizon: -1, Backoff: Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	eng, err := New(Options{Redis: rdb, InstanceID: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(p); err != nil {
		t.Fatal(err)
	}
	// SHA -> script name, for the slow log.
	shas := map[string]string{}
	for _, name := range luascripts.Names() {
		src, _ := luascripts.Source(name)
		shas[redis.NewScript(src).Hash()] = name
	}
	counter := &redistest.Counter{}
	counter.Attach(rdb)
	outBytes := func() int64 {
		s := rdb.Info(ctx, "stats").Val()
		for _, line := range strings.Split(s, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	var calls []costCall
	measure := func(name string, fn func()) {
		t.Helper()
		rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0")
		rdb.ConfigSet(ctx, "slowlog-max-len", "2000000")
		rdb.SlowLogReset(ctx)
		b0 := outBytes()
		b1 := outBytes() // the INFO reply's own size
		infoSize := b1 - b0
		c0 := counter.Count()
		start := time.Now()
		fn()
		wall := time.Since(start)
		c1 := counter.Count()
		b2 := outBytes()
		logs := rdb.Do(ctx, "SLOWLOG", "GET", "-1").Val()
		cc := costCall{name: name, trips: c1 - c0, bytes: b2 - b1 - infoSize, wall: wall}
		for _, l := range logs.([]any) {
			e := l.([]any)
			us := e[2].(int64)
			args := e[3].([]any)
			cmd := strings.ToLower(fmt.Sprint(args[0]))
			if cmd == "info" || cmd == "slowlog" || cmd == "config" {
				continue
			}
			if (cmd == "evalsha" || cmd == "eval") && len(args) > 1 {
				name, ok := shas[fmt.Sprint(args[1])]
				if !ok {
					name = "(eval)"
				}
				cmd = "script " + name
			}
			if os.Getenv("WATUKUY_ADV_DEBUG") != "" {
				t.Logf("  %v %d", args, us)
			}
			cc.cmds++
			if strings.HasPrefix(cmd, "script") {
				cc.sumUs += us
			}
			if us > cc.maxUs {
				cc.maxUs, cc.maxCmd = us, cmd
			}
		}
		rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
		rdb.SlowLogReset(ctx)
		calls = append(calls, cc)
		t.Logf("%-44s trips %7d cmds %8d out %12d B  scripts %9d µs (max %7d µs %s) wall %v", name, cc.trips, cc.cmds, cc.bytes, cc.sumUs, cc.maxUs, cc.maxCmd, wall.Round(time.Millisecond))
	}

	measure(fmt.Sprintf("worker start: register %d config keys", n), func() {
		if err := eng.Setup(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// One real cycle makes an idle key's state; every other key gets a copy.
	api.Put("a1", nil)
	if rep := eng.RunCycle(ctx, Key{Poller: "orders", Partition: parts[3]}); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	idle := rdb.HGetAll(ctx, "wk:{orders|"+parts[3]+"}:state").Val()
	t.Logf("idle state: %v", idle)
	pipeN := func(total int, fn func(p redis.Pipeliner, i int)) {
		for from := 0; from < total; from += 5000 {
			if _, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for i := from; i < min(from+5000, total); i++ {
					fn(pl, i)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pipeN(n, func(pl redis.Pipeliner, i int) {
		if i != 3 && i != 2 {
			pl.HSet(ctx, "wk:{orders|"+parts[i]+"}:state", idle)
		}
	})
	// Key 0: a million identities (big).
	pipeN(10*big, func(pl redis.Pipeliner, i int) {
		pl.HSet(ctx, "wk:{orders|"+parts[0]+"}:items", fmt.Sprintf("identity-%07d", i), "0123456789abcdefghij")
	})
	// Key 1: an outbox of big events.
	ob := "wk:{orders|" + parts[1] + "}:outbox"
	rdb.XGroupCreateMkStream(ctx, ob, "dispatch", "0")
	env := `{"id":"ev_x","poller":"orders","partition":"p000001","type":"updated","lane":"live","identity":"i","version":"2026-01-01T00:00:00Z","item":{"id":"i","version":"2026-01-01T00:00:00Z","total":1234,"note":"` + strings.Repeat("x", 150) + `"}}`
	pipeN(big, func(pl redis.Pipeliner, i int) {
		pl.XAdd(ctx, &redis.XAddArgs{Stream: ob, Values: []any{"id", fmt.Sprintf("ev_%07d", i), "ok", fmt.Sprintf("i%d", i%1000), "ev", env}})
	})
	// Key 2: a poison event (a real park), holding big events of its ordering key.
	rec.setFail(func(ev Event) error {
		if ev.Partition == parts[2] {
			return errors.New("poison")
		}
		return nil
	})
	if rep := eng.RunCycle(ctx, Key{Poller: "orders", Partition: parts[2]}); rep.Err != nil || rep.Parked != 1 {
		t.Fatalf("%+v", rep)
	}
	rec.setFail(nil)
	rows, err := eng.Parked().List(ctx, "orders", parts[2], "poison")
	if err != nil || len(rows) != 1 {
		t.Fatalf("parked: %v %v", rows, err)
	}
	ok := rows[0].OrderingKey
	held := "wk:{orders|" + parts[2] + "}:held"
	pipeN(big, func(pl redis.Pipeliner, i int) {
		seq := fmt.Sprintf("%d-%d", 1900000000000+int64(i), 0)
		js := fmt.Sprintf(`{"id":"ev_h%07d","ok":%q,"ev":%q,"seq":%q}`, i, ok, env, seq)
		m := fmt.Sprintf("%08x%s%015d-%020d\n%s", len(ok), ok, 1900000000000+int64(i), 0, js)
		pl.ZAdd(ctx, held, redis.Z{Score: 0, Member: m})
	})
	t.Logf("dbsize %d, used_memory %s", rdb.DBSize(ctx).Val(), func() string {
		for _, l := range strings.Split(rdb.Info(ctx, "memory").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory_human:"); ok {
				return v
			}
		}
		return "?"
	}())

	for _, name := range luascripts.Names() { // no first-time EVAL in the figures
		src, _ := luascripts.Source(name)
		rdb.ScriptLoad(ctx, src)
	}
	claimer := eng.Claimer()
	measure("noop (the measure's own overhead)", func() {})
	measure("inspect the key with 1M identities", func() { _, _ = eng.Inspect(ctx, "orders", parts[0]) })
	measure("inspect the key with the 100k outbox", func() { _, _ = eng.Inspect(ctx, "orders", parts[1]) })
	measure("inspect the key with 100k held", func() { _, _ = eng.Inspect(ctx, "orders", parts[2]) })
	measure("inspect an idle key", func() { _, _ = eng.Inspect(ctx, "orders", parts[n-1]) })
	measure("claim 10 due keys", func() { _, _ = claimer.ClaimDue(ctx, 10, 0, []string{"orders"}) })
	measure("claim 10 due keys, no poller named", func() { _, _ = claimer.ClaimDue(ctx, 10, 0, nil) })
	measure("GET /api/keys (InspectPage 100)", func() { _, _, _ = eng.InspectPage(ctx, "", "", 100) })
	measure("GET /api/keys?limit=1000 (InspectPage 1000)", func() { _, _, _ = eng.InspectPage(ctx, "", "", 1000) })
	measure("GET /api/keys page in the middle", func() { _, _, _ = eng.InspectPage(ctx, "orders", "orders|"+parts[n/2], 100) })
	measure("GET /api/pollers (PollerKeys)", func() { _, _ = eng.PollerKeys(ctx) })
	measure("parked page of the key (Parked.Page 100)", func() { _, _, _ = eng.Parked().Page(ctx, "orders", parts[2], "", "", 100) })
	measure("GET /api/parked, one request (emulated: 10 pages of 1,000 keys + ZCARDs, MaxScan)", func() {
		after := ""
		for range 10 {
			keys, next, err := eng.KeysPage(ctx, "", after, 1000)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := eng.Parked().Counts(ctx, keys); err != nil {
				t.Error(err)
			}
			if after = next; next == "" {
				return
			}
		}
	})
	measure("metrics scrape (InspectAll orders)", func() {
		kis, err := eng.InspectAll(ctx, "orders")
		if err != nil || len(kis) != n {
			t.Errorf("inspect all: %d %v", len(kis), err)
		}
	})
	measure("Keys(orders) (CLI listing)", func() { _, _ = eng.Keys(ctx, "orders") })
	measure("repair sweep (RepairDue)", func() { _, _ = eng.RepairDue(ctx) })
	measure("parked retry (1 row, 100k held)", func() {
		if _, err := eng.Parked().Retry(ctx, "orders", parts[2], rows[0].ID); err != nil {
			t.Error(err)
		}
	})
	measure("cycle draining the 100k held released", func() { eng.RunCycle(ctx, Key{Poller: "orders", Partition: parts[2]}) })
	measure("cycle draining the 100k outbox", func() { eng.RunCycle(ctx, Key{Poller: "orders", Partition: parts[1]}) })
	measure("partitions delete of the 1M-identity key", func() {
		if err := eng.Partitions().Delete(ctx, "orders", parts[0]); err != nil {
			t.Error(err)
		}
	})
	measure("pause one key (Engine.Pause)", func() { _ = eng.Pause(ctx, "orders", parts[5]) })
	measure(fmt.Sprintf("poller-wide pause (%d keys)", n), func() {
		if err := eng.EachActiveKey(ctx, "orders", func(k Key) error { return eng.Pause(ctx, k.Poller, k.Partition) }); err != nil {
			t.Error(err)
		}
	})
	t.Logf("dbsize after %d", rdb.DBSize(ctx).Val())
}

// pauseRace runs before the store's Pause: the delete that lands between keyOp's checks and
// pause.lua.
type pauseRace struct {
	core.Store
	before func()
}

func (p *pauseRace) Pause(ctx context.Context, key Key) error {
	if p.before != nil {
		p.before()
		p.before = nil
	}
	return p.Store.Pause(ctx, key)
}

// A pause racing a delete, through the engine: Engine.Pause checks the registry and the state,
// then runs pause.lua. A partitions delete completing in between and its 15 s mark expiring (a
// stalled operator's process) leave pause.lua a key without state: it writes paused=1 there;
// partitions add must not bring the partition back paused (Begin in mode add starts from
// nothing). On miniredis only: its clock expires the mark at once.
func TestAdvL1PauseRacingADeleteDoesNotComeBackWithTheAdd(t *testing.T) {
	b := redistest.Miniredis(t)
	e := newEnv(t, b)
	ops := e.engine(e.poller(), nil)
	ctx := t.Context()
	if err := ops.Partitions().Add(ctx, "orders", "t1"); err != nil {
		t.Fatal(err)
	}
	race := &pauseRace{before: func() {
		if err := ops.Partitions().Delete(ctx, "orders", "t1"); err != nil {
			t.Fatal(err)
		}
		b.Mini.FastForward(16 * time.Second) // the deletion mark expires
	}}
	slow := e.engine(e.poller(), func(s core.Store) core.Store { race.Store = s; return race })
	perr := slow.Pause(ctx, "orders", "t1")
	if err := ops.Partitions().Add(ctx, "orders", "t1"); err != nil {
		t.Fatal(err)
	}
	ki, err := ops.Inspect(ctx, "orders", "t1")
	if err != nil || ki.Paused {
		t.Fatalf("the partition deleted and added back: paused=%v status %s %v (the pause racing the delete answered %v)", ki.Paused, ki.Status, err, perr)
	}
}

// Held (G4, G9): one hot ordering key, a poison event holding 700 later events (more than one
// read batch) committed in chunks of 4, a second poison among the released ones, new events
// of the key committed while it is released: after the retries the handler's successes follow
// commit order, none missing.
func TestAdvL1HeldHotKeyReleasedTwiceWithNewEvents(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		hot := func(p *Poller) {
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev Event) string { return "A" }
			p.CommitMaxItems = 4
		}
		poison := map[string]bool{"i000": true}
		e.rec.setFail(func(ev Event) error {
			if poison[ev.Identity] {
				return errors.New("poison")
			}
			return nil
		})
		for i := range 700 {
			e.api.Put(fmt.Sprintf("i%03d", i), nil)
		}
		eng := e.engine(e.poller(hot), nil)
		e.settle(eng)
		retry := func() {
			rows, err := eng.Parked().List(t.Context(), "orders", "", "poison")
			if err != nil || len(rows) != 1 {
				t.Fatalf("parked: %v %v", rows, err)
			}
			if _, err := eng.Parked().Retry(t.Context(), "orders", "", rows[0].ID); err != nil {
				t.Fatal(err)
			}
		}
		e.rec.setFail(func(ev Event) error {
			if ev.Identity == "i300" {
				return errors.New("poison again")
			}
			return nil
		})
		retry()
		for i := 700; i < 720; i++ {
			e.api.Put(fmt.Sprintf("i%03d", i), nil)
		}
		e.settle(eng)
		e.rec.setFail(nil)
		retry()
		e.settle(eng)
		var got []string
		for _, ev := range e.rec.events() {
			got = append(got, ev.Identity)
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != 720 {
			t.Fatalf("%d successes, %d distinct, sorted %v", len(got), len(slices.Compact(slices.Clone(got))), slices.IsSorted(got))
		}
	})
}
