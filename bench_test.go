package watukuy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// benchItems builds n order items of about 320 bytes with 10-character identities; gen
// changes every item's version and content.
func benchItems(n, gen int) []json.RawMessage {
	items := make([]json.RawMessage, n)
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprintf(`{"status":"paid","id":"ord-%06d","currency":"EUR","total":%d.95,`+
			`"customer":{"name":"Zoë Müller","email":"zoe%d@example.com","tier":"gold"},`+
			`"lines":[{"sku":"SKU-1","qty":2,"price":19.99},{"sku":"SKU-2","qty":1,"price":%d.5}],`+
			`"updated_at":"2026-11-29T10:%02d:00Z","version":%d,"tags":["b2c","eu"]}`, i, i+gen, i, gen, i%60, gen))
	}
	return items
}

// listingOf serves items as a snapshot listing, pageSize per page.
func listingOf(items *[]json.RawMessage, pageSize int) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		off := 0
		fmt.Sscan(req.Cursor, &off)
		all := *items
		end := min(off+pageSize, len(all))
		return watukuytype.Page{Items: all[off:end], Next: fmt.Sprint(end), HasMore: end < len(all)}, nil
	}
}

type benchEnv struct {
	rdb   redis.UniversalClient
	eng   *Engine
	key   watukuytype.Key
	count redistest.Counter
}

// newBenchEnv registers the benchmark's poller over items on a redis-server of its own; opts
// change the poller's definition.
func newBenchEnv(b *testing.B, items *[]json.RawMessage, version string, opts ...func(p *watukuytype.Poller)) *benchEnv {
	be := &benchEnv{key: watukuytype.Key{Poller: "bench"}}
	rb := redistest.Real(b)
	be.rdb = rb.Client
	be.count.Attach(rb.Client)
	eng, err := New(Options{Redis: rb.Client, InstanceID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	p := watukuytype.Poller{Name: "bench", Strategy: watukuytype.SnapshotDiff, Fetch: listingOf(items, 1000),
		Version: watukuytype.Field(version), Handler: func(context.Context, watukuytype.Event) error { return nil },
		Delivery: watukuytype.Delivery{Concurrency: 8}, MaxPagesPerCycle: 1000}
	for _, o := range opts {
		o(&p)
	}
	if err = eng.Register(p); err != nil {
		b.Fatal(err)
	}
	be.eng = eng
	return be
}

// cycle makes the key due (untimed) and runs one timed cycle.
func (be *benchEnv) cycle(b *testing.B) watukuytype.CycleReport {
	b.StopTimer()
	if err := be.eng.core.Trigger(b.Context(), be.key); err != nil {
		b.Fatal(err)
	}
	be.count.Reset()
	b.StartTimer()
	rep := be.eng.core.RunCycle(b.Context(), be.key)
	if rep.Err != nil || rep.Outcome != watukuytype.Ran {
		b.Fatalf("cycle: %+v", rep)
	}
	return rep
}

// BenchmarkDiffUnchanged: full cycles over a listing of 10,000 unchanged items in pages of
// 1,000 against a real redis-server. Goal: >= 150,000 items/s.
func BenchmarkDiffUnchanged(b *testing.B) {
	items := benchItems(10_000, 0)
	be := newBenchEnv(b, &items, "version")
	be.cycle(b) // baseline: creates every row
	var trips int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep := be.cycle(b)
		if rep.Events != 0 {
			b.Fatalf("unchanged listing emitted %d events", rep.Events)
		}
		trips += be.count.Count()
	}
	b.StopTimer()
	b.ReportMetric(float64(len(items)*b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/cycle")
}

// BenchmarkCommitDeliver: every item of a 10,000-item listing changed, committed page by page
// and delivered to a no-op handler, against a real redis-server. Goal: >= 50,000 events/s.
func BenchmarkCommitDeliver(b *testing.B) {
	gens := [2][]json.RawMessage{benchItems(10_000, 1), benchItems(10_000, 2)}
	items := gens[0]
	be := newBenchEnv(b, &items, "version")
	be.cycle(b)
	var events int
	var trips int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		items = gens[(i+1)%2]
		rep := be.cycle(b)
		if rep.Events != len(items) || rep.Delivered != len(items) {
			b.Fatalf("cycle emitted %d and delivered %d of %d", rep.Events, rep.Delivered, len(items))
		}
		events += rep.Delivered
		trips += be.count.Count()
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/cycle")
}

// BenchmarkBytesPerItem: Redis memory of the items hash per tracked identity (10-character
// identities) after the engine created 100,000 of them (MEMORY USAGE, all samples), with a
// one-character version and with a 20-character timestamp version. Goal: <= 100 bytes.
func BenchmarkBytesPerItem(b *testing.B) {
	for _, version := range []string{"version", "updated_at"} {
		b.Run("version="+version, func(b *testing.B) {
			const n = 100_000
			var perItem float64
			for i := 0; i < b.N; i++ {
				items := benchItems(n, 0)
				be := newBenchEnv(b, &items, version)
				be.cycle(b)
				bytes, err := be.rdb.MemoryUsage(b.Context(), be.eng.store.Key(be.key, "items"), 0).Result()
				if err != nil {
					b.Fatal(err)
				}
				if got := be.rdb.HLen(b.Context(), be.eng.store.Key(be.key, "items")).Val(); got != n {
					b.Fatalf("tracked %d items, want %d", got, n)
				}
				perItem = float64(bytes) / n
			}
			b.ReportMetric(perItem, "bytes/item")
		})
	}
}

// benchItemsKB builds n order items of about 1 KB (a customer with an address, five or six
// order lines with their tax, shipping, tags); gen changes what an order's update changes: its
// version and time, status, total, one line's quantity, one line more or less, a tag.
func benchItemsKB(n, gen int) []json.RawMessage {
	items := make([]json.RawMessage, n)
	for i := range items {
		var lines strings.Builder
		for l := range 5 + gen%2 {
			qty := 1 + l
			if l == gen%5 {
				qty += gen
			}
			if l > 0 {
				lines.WriteByte(',')
			}
			fmt.Fprintf(&lines, `{"sku":"SKU-%04d","name":"Product %d, blue, size M","qty":%d,"price":%d.90,"tax":{"rate":19,"amount":%d.61}}`, l*97+i%50, l, qty, 10+l, 2+l)
		}
		status := [...]string{"paid", "packed", "shipped"}[gen%3]
		items[i] = json.RawMessage(fmt.Sprintf(`{"id":"ord-%06d","status":%q,"currency":"EUR","total":%d.95,`+
			`"customer":{"name":"Zoë Müller","email":"zoe%d@example.com","tier":"gold","address":{"street":"Hauptstraße 12","city":"Berlin","zip":"10115","country":"DE"}},`+
			`"lines":[%s],"shipping":{"method":"express","carrier":"DHL","tracking":"JD%012d","eta":"2026-12-%02d"},`+
			`"updated_at":"2026-11-29T10:%02d:%02dZ","version":%d,"tags":["b2c","eu","gen%d"]}`,
			i, status, 100+i%900+gen, i, lines.String(), i, 1+gen%28, i%60, gen%60, gen, gen%3))
	}
	return items
}

// timedCycle makes the key due (untimed) and runs one timed cycle; it returns the cycle's
// report and its wall time.
func (be *benchEnv) timedCycle(b *testing.B) (watukuytype.CycleReport, time.Duration) {
	b.StopTimer()
	if err := be.eng.core.Trigger(b.Context(), be.key); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	t := time.Now()
	rep := be.eng.core.RunCycle(b.Context(), be.key)
	took := time.Since(t)
	if rep.Err != nil || rep.Outcome != watukuytype.Ran {
		b.Fatalf("cycle: %+v", rep)
	}
	return rep, took
}

// BenchmarkCommitDeliverPatches: a page of 1,000 items of about 1 KB, every one changed,
// committed and delivered to a no-op handler, by a poller without Changes.Patch and by one with
// it (on redis-servers of their own), one cycle of each in turn so the machine's load weighs on
// both alike. With Patch the commit also reads the items as last emitted (one HMGET), diffs
// each against its new item and writes it. Reported: items/s of each and the ratio of their
// times. Goal: with Patch <= 2x the time without.
func BenchmarkCommitDeliverPatches(b *testing.B) {
	const n = 1000
	gens := [2][]json.RawMessage{benchItemsKB(n, 1), benchItemsKB(n, 2)}
	plainItems, patchItems := gens[0], gens[0]
	var patches atomic.Int64
	plain := newBenchEnv(b, &plainItems, "version")
	patched := newBenchEnv(b, &patchItems, "version", func(p *watukuytype.Poller) {
		p.Changes.Patch = true
		p.Handler = func(_ context.Context, ev watukuytype.Event) error {
			if len(ev.Changes) > 0 && string(ev.Changes) != "null" {
				patches.Add(1)
			}
			return nil
		}
	})
	plain.cycle(b) // creates every row (and with Patch, every payload)
	patched.cycle(b)
	var off, on time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plainItems, patchItems = gens[(i+1)%2], gens[(i+1)%2]
		for _, be := range []*benchEnv{plain, patched} {
			rep, took := be.timedCycle(b)
			if rep.Events != n || rep.Delivered != n {
				b.Fatalf("cycle emitted %d and delivered %d of %d", rep.Events, rep.Delivered, n)
			}
			if be == plain {
				off += took
			} else {
				on += took
			}
		}
	}
	b.StopTimer()
	if got := patches.Load(); got != int64(n*b.N) {
		b.Fatalf("%d updated events carried a patch, want %d", got, n*b.N)
	}
	b.ReportMetric(float64(n*b.N)/off.Seconds(), "items/s-plain")
	b.ReportMetric(float64(n*b.N)/on.Seconds(), "items/s-patch")
	b.ReportMetric(on.Seconds()/off.Seconds(), "patch/plain-time")
}

// BenchmarkBytesPerItemPayloads: Redis memory per tracked identity with Changes.Patch after the
// engine created 100,000 items of about 1 KB (MEMORY USAGE, all samples): the items hash (what
// BenchmarkBytesPerItem measures), the payloads hash (each item as last emitted) and both;
// besides, the items' own JSON length and what the payloads hash adds to it.
func BenchmarkBytesPerItemPayloads(b *testing.B) {
	const n = 100_000
	var rows, payloads, jsonLen float64
	for i := 0; i < b.N; i++ {
		items := benchItemsKB(n, 1)
		be := newBenchEnv(b, &items, "version", func(p *watukuytype.Poller) { p.Changes.Patch = true })
		be.cycle(b)
		b.StopTimer()
		usage := func(kind string) float64 {
			k := be.eng.store.Key(be.key, kind)
			if got := be.rdb.HLen(b.Context(), k).Val(); got != n {
				b.Fatalf("%s holds %d identities, want %d", kind, got, n)
			}
			bytes, err := be.rdb.MemoryUsage(b.Context(), k, 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			return float64(bytes) / n
		}
		rows, payloads = usage("items"), usage("payloads")
		jsonLen = 0
		for _, it := range items {
			jsonLen += float64(len(it)) / n
		}
		b.StartTimer()
	}
	b.ReportMetric(rows, "items-bytes/item")
	b.ReportMetric(payloads, "payload-bytes/item")
	b.ReportMetric(rows+payloads, "bytes/item")
	b.ReportMetric(jsonLen, "json-bytes/item")
	b.ReportMetric(payloads-jsonLen, "payload-overhead-bytes/item")
}

// BenchmarkHTTPPoll: a full poll of a 10,000-item listing served by the fake API over real
// HTTP (pages of 1,000) into a real redis-server, unchanged and with every item changed.
// The fake API's own JSON encoding runs on the same two cores and is part of the figure.
func BenchmarkHTTPPoll(b *testing.B) {
	for _, changed := range []bool{false, true} {
		b.Run(map[bool]string{false: "unchanged", true: "changed"}[changed], func(b *testing.B) {
			const n = 10_000
			api := fakeapi.New()
			for i := 0; i < n; i++ {
				api.Put(fmt.Sprintf("ord-%06d", i), map[string]any{"status": "paid", "total": i})
			}
			srv := fakeapi.NewServer(api, fakeapi.ServerOptions{MaxPageSize: 1000})
			defer srv.Close()
			rb := redistest.Real(b)
			eng, err := New(Options{Redis: rb.Client, InstanceID: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			list := &httppoll.PageCursor{Source: httppoll.Source{URL: srv.URL + "/list", Items: "data"}, Param: "page",
				SizeParam: "per_page", Size: 1000, HasMore: "has_more"}
			if err := eng.Register(watukuytype.Poller{Name: "http", Strategy: watukuytype.SnapshotDiff, Fetch: list.Fetch, Version: watukuytype.Field("version"),
				Handler: func(context.Context, watukuytype.Event) error { return nil }, Delivery: watukuytype.Delivery{Concurrency: 8}}); err != nil {
				b.Fatal(err)
			}
			key := watukuytype.Key{Poller: "http"}
			cycle := func() watukuytype.CycleReport {
				if err := eng.core.Trigger(b.Context(), key); err != nil {
					b.Fatal(err)
				}
				rep := eng.core.RunCycle(b.Context(), key)
				if rep.Err != nil || rep.Items != n {
					b.Fatalf("cycle: %+v", rep)
				}
				return rep
			}
			cycle()
			var items int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if changed {
					b.StopTimer()
					for j := 0; j < n; j++ {
						api.Put(fmt.Sprintf("ord-%06d", j), map[string]any{"status": "paid", "total": j + i})
					}
					b.StartTimer()
				}
				rep := cycle()
				if changed && rep.Delivered != n || !changed && rep.Events != 0 {
					b.Fatalf("cycle: %+v", rep)
				}
				items += rep.Items
			}
			b.ReportMetric(float64(items)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

// BenchmarkLargePageCommit: one key's 100,000-item page, every item changed, committed and
// delivered to a no-op handler on a real redis-server, while another key runs cycles of its
// own. Reported: the longest script call Redis ran (SLOWLOG, every command logged) and the
// p99 of the other key's cycles while the large page commits. Goals: no script over 50 ms, the
// other key's p99 under 100 ms.
func BenchmarkLargePageCommit(b *testing.B) {
	const n = 100_000
	rb := redistest.Real(b, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1000000")
	eng, err := New(Options{Redis: rb.Client, InstanceID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	items := benchItems(n, 0)
	noop := func(context.Context, watukuytype.Event) error { return nil }
	if err := eng.Register(watukuytype.Poller{Name: "big", Fetch: func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		return watukuytype.Page{Items: items, Next: "1"}, nil
	}, Version: watukuytype.Field("version"), Handler: noop, Delivery: watukuytype.Delivery{Concurrency: 8}}); err != nil {
		b.Fatal(err)
	}
	small := fakeapi.New()
	if err := eng.Register(watukuytype.Poller{Name: "small", Fetch: small.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: noop}); err != nil {
		b.Fatal(err)
	}
	big, other := watukuytype.Key{Poller: "big"}, watukuytype.Key{Poller: "small"}
	run := func(k watukuytype.Key) watukuytype.CycleReport {
		if err := eng.core.Trigger(b.Context(), k); err != nil {
			b.Fatal(err)
		}
		return eng.core.RunCycle(b.Context(), k)
	}
	run(big)
	var lat []time.Duration
	var longest time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		items = benchItems(n, i+1)
		rb.Client.SlowLogReset(b.Context())
		done := make(chan watukuytype.CycleReport)
		b.StartTimer()
		go func() { done <- run(big) }()
	loop:
		for j := 0; ; j++ {
			select {
			case rep := <-done:
				if rep.Err != nil || rep.Delivered != n {
					b.Fatalf("large page: %+v", rep)
				}
				break loop
			default:
			}
			small.Put(fmt.Sprintf("s%d", j%10), nil)
			start := time.Now()
			if rep := run(other); rep.Err != nil {
				b.Fatalf("other key: %+v", rep)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		log, err := rb.Client.SlowLogGet(b.Context(), -1).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range log {
			if len(l.Args) > 0 && (strings.EqualFold(l.Args[0], "evalsha") || strings.EqualFold(l.Args[0], "eval")) {
				longest = max(longest, l.Duration)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(longest.Microseconds())/1000, "max-script-ms")
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "other-p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "other-max-ms")
		b.ReportMetric(float64(len(lat))/float64(b.N), "other-cycles/op")
	}
}

// BenchmarkReleaseHeldHotKey: a parked retry of an ordering key that holds 10,000 events
// behind its poison event, on a real redis-server: the release marks the key released and
// moves nothing, so its script's time does not grow with the held events. Reported: the
// longest script of the retry (SLOWLOG) and that time per held event.
func BenchmarkReleaseHeldHotKey(b *testing.B) {
	const n = 10_000
	rb := redistest.Real(b)
	ctx := b.Context()
	api := fakeapi.New()
	fail := true
	eng, err := New(Options{Redis: rb.Client, InstanceID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Register(watukuytype.Poller{Name: "orders", Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"),
		Delivery: watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, OrderingKey: func(watukuytype.Event) string { return "X" }},
		Handler: func(context.Context, watukuytype.Event) error {
			if fail {
				return fmt.Errorf("poison")
			}
			return nil
		}}); err != nil {
		b.Fatal(err)
	}
	key := watukuytype.Key{Poller: "orders"}
	env := []byte(fmt.Sprintf(`{"type":"updated","item":{"pad":%q}}`, make([]byte, 300)))
	var longest time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		fail = true
		api.Put(fmt.Sprintf("x%d", i), nil)
		if err := eng.core.Trigger(ctx, key); err != nil {
			b.Fatal(err)
		}
		eng.core.RunCycle(ctx, key) // parked: X is held
		rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
		if err != nil || len(rows) != 1 {
			b.Fatalf("parked: %v %v", rows, err)
		}
		// n events of X committed behind its poison event: they join its held events.
		r, err := eng.store.Begin(ctx, key, "bench-fill", time.Minute, core.BeginForAdd)
		if err != nil || r.Status != core.BeginOK {
			b.Fatalf("begin: %+v %v", r, err)
		}
		for from := 0; from < n; from += 1000 {
			evs := make([]core.OutboxEvent, 1000)
			for j := range evs {
				evs[j] = core.OutboxEvent{ID: fmt.Sprintf("ev_%d_%06d", i, from+j), OrderingKey: "X", Envelope: env}
			}
			if res, err := eng.store.CommitPoll(ctx, r.Lease, core.Commit{Events: evs}); err != nil || len(res.Diverted) != len(evs) {
				b.Fatalf("commit of held events: %d of %d held, %v", len(res.Diverted), len(evs), err)
			}
		}
		if err := eng.store.End(ctx, r.Lease, core.EndRequest{NextDue: time.Now(), Trigger: r.State["trig"]}); err != nil {
			b.Fatal(err)
		}
		rb.Client.ConfigSet(ctx, "slowlog-log-slower-than", "0")
		rb.Client.SlowLogReset(ctx)
		fail = false
		b.StartTimer()
		if _, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: "orders", Partition: ""}, rows[0].ID); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		log, _ := rb.Client.SlowLogGet(ctx, -1).Result()
		for _, l := range log {
			longest = max(longest, l.Duration)
		}
		rb.Client.Del(ctx, eng.store.Key(key, "held"), eng.store.Key(key, "released"))
	}
	b.ReportMetric(float64(longest.Microseconds())/1000, "max-script-ms")
	b.ReportMetric(float64(longest.Microseconds())/n, "µs/held-event")
}

// BenchmarkIdleCycle: one idle cycle (Begin, a fetch that finds nothing new, End) of one key
// on miniredis, whose clock the benchmark moves past the key's interval between cycles so the
// key is always due: the per-cycle cost of the engine itself, the figure tracing must not
// raise when it is off (docs/deployment.md, "Traces (OpenTelemetry)"). fetch=go is a Go Fetch returning an
// empty page; fetch=http asks a local HTTP server through the token cursor (httppoll), which
// answers an empty page; traced/ runs them with tracing on. Compare with benchstat.
func BenchmarkIdleCycle(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":[],"next":"t1"}`))
	}))
	defer srv.Close()
	token := &httppoll.TokenCursor{Source: httppoll.Source{URL: srv.URL + "/changes", Items: "data"}, Param: "token", Next: "next"}
	fetches := []struct {
		name  string
		fetch watukuytype.FetchFunc
	}{
		{"go", func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Next: req.Cursor}, nil
		}},
		{"http", token.Fetch},
	}
	for _, f := range fetches {
		b.Run("fetch="+f.name, func(b *testing.B) {
			benchIdleCycles(b, f.fetch, Options{Redis: redistest.Miniredis(b).Client})
		})
	}
	// On a redis-server of its own: the engine's CPU per idle cycle with real round trips
	// (processCpuUs/cycle, this process's), the figure the no-op throughput rests on.
	b.Run("redis-server/fetch=go", func(b *testing.B) {
		benchIdleCycles(b, fetches[0].fetch, Options{Redis: redistest.Real(b).Client})
	})
	// The same cycles traced, every span recorded and dropped at its end: what tracing on
	// costs, exporter aside.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropSpans{}))
	for _, f := range fetches {
		b.Run("traced/fetch="+f.name, func(b *testing.B) {
			benchIdleCycles(b, f.fetch, Options{Redis: redistest.Miniredis(b).Client, TracerProvider: tp})
		})
	}
}

// dropSpans is a span processor that keeps nothing.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }

// benchIdleCycles runs b.N idle cycles of one key whose Fetch is fetch, on an engine built
// with opts (InstanceID and the clock are set here).
func benchIdleCycles(b *testing.B, fetch watukuytype.FetchFunc, opts Options) {
	clock := newClock()
	opts.InstanceID = "bench"
	eng, err := newEngine(opts, seams{clock: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Register(watukuytype.Poller{Name: "idle", Fetch: fetch, Handler: func(context.Context, watukuytype.Event) error { return nil },
		Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Second, Fixed: true}}); err != nil {
		b.Fatal(err)
	}
	key := watukuytype.Key{Poller: "idle"}
	run := func() {
		clock.Advance(2 * time.Second) // past the interval: the key is due again
		if rep := eng.core.RunCycle(b.Context(), key); rep.Err != nil || rep.Outcome != watukuytype.Ran || rep.Events != 0 {
			b.Fatalf("idle cycle: %+v", rep)
		}
	}
	run() // the key's first cycle writes its state
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "processCpuUs/cycle")
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// TestRedisCostsAtScale is a one-off measurement (WATUKUY_ADV_BIG=1; WATUKUY_ADV_N partitions,
// default 100,000): what one call costs at N partitions, a key with 1M identities, a key with a
// 100,000-event outbox and a parked event holding 100,000 events, on a private redis-server.
func TestRedisCostsAtScale(t *testing.T) {
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
	p := watukuytype.Poller{Name: "orders", Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: rec.handle,
		Schedule: watukuytype.Schedule{Min: time.Hour, Max: time.Hour}, Partitions: parts,
		Delivery: watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
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
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: parts[3]}); rep.Err != nil {
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
	rec.setFail(func(ev watukuytype.Event) error {
		if ev.Partition == parts[2] {
			return errors.New("poison")
		}
		return nil
	})
	if rep := eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: parts[2]}); rep.Err != nil || rep.Parked != 1 {
		t.Fatalf("%+v", rep)
	}
	rec.setFail(nil)
	rows, err := eng.Parked().List(ctx, watukuytype.Key{Poller: "orders", Partition: parts[2]}, "poison")
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
	claimer := eng.store
	measure("noop (the measure's own overhead)", func() {})
	measure("inspect the key with 1M identities", func() { _, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: parts[0]}) })
	measure("inspect the key with the 100k outbox", func() { _, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: parts[1]}) })
	measure("inspect the key with 100k held", func() { _, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: parts[2]}) })
	measure("inspect an idle key", func() { _, _ = eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: parts[n-1]}) })
	measure("claim 10 due keys", func() { _, _ = claimer.ClaimDue(ctx, 10, 0, []string{"orders"}) })
	measure("claim 10 due keys, no poller named", func() { _, _ = claimer.ClaimDue(ctx, 10, 0, nil) })
	measure("GET /api/keys (InspectPage 100)", func() { _, _, _ = eng.InspectPage(ctx, "", "", 100) })
	measure("GET /api/keys?limit=1000 (InspectPage 1000)", func() { _, _, _ = eng.InspectPage(ctx, "", "", 1000) })
	measure("GET /api/keys page in the middle", func() { _, _, _ = eng.InspectPage(ctx, "orders", "orders|"+parts[n/2], 100) })
	measure("GET /api/pollers (PollerKeys)", func() { _, _ = eng.PollerKeys(ctx) })
	measure("parked page of the key (Parked.Page 100)", func() {
		_, _, _ = eng.Parked().Page(ctx, watukuytype.Key{Poller: "orders", Partition: parts[2]}, "", "", 100)
	})
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
	measure("every key of orders (the registry, a page at a time)", func() { _, _ = eng.core.Keys(ctx, "orders") })
	measure("repair sweep (RepairDue)", func() { _, _ = eng.RepairDue(ctx) })
	measure("parked retry (1 row, 100k held)", func() {
		if _, err := eng.Parked().Retry(ctx, watukuytype.Key{Poller: "orders", Partition: parts[2]}, rows[0].ID); err != nil {
			t.Error(err)
		}
	})
	measure("cycle draining the 100k held released", func() { eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: parts[2]}) })
	measure("cycle draining the 100k outbox", func() { eng.RunCycle(ctx, watukuytype.Key{Poller: "orders", Partition: parts[1]}) })
	measure("partitions delete of the 1M-identity key", func() {
		if err := eng.Partitions().Delete(ctx, watukuytype.Key{Poller: "orders", Partition: parts[0]}); err != nil {
			t.Error(err)
		}
	})
	measure("pause one key (Engine.Pause)", func() { _ = eng.Pause(ctx, watukuytype.Key{Poller: "orders", Partition: parts[5]}) })
	measure(fmt.Sprintf("poller-wide pause (%d keys)", n), func() {
		if _, err := eng.Each(ctx, "orders", nil, func(k watukuytype.Key) error { return eng.Pause(ctx, k) }); err != nil {
			t.Error(err)
		}
	})
	t.Logf("dbsize after %d", rdb.DBSize(ctx).Val())
}
