package pgsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/brokertest"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/sinks/pgsink"
	"github.com/watukuy/watukuy/watukuytest"
	"github.com/watukuy/watukuy/watukuytype"
)

var _ sink.Broker = (*pgsink.Sink)(nil)

// db is a test's own schema on the real server, dropped with everything in it when the test
// ends.
type db struct {
	url    string
	schema string
	admin  *pgxpool.Pool
}

func newDB(t testing.TB) *db {
	t.Helper()
	raw := brokertest.Postgres(t)
	admin, err := pgxpool.New(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	d := &db{url: raw, schema: brokertest.Name(t), admin: admin}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", d.schema, err)
		}
		admin.Close()
	})
	return d
}

// table is the test's table, "<schema>.events".
func (d *db) table() string { return d.schema + ".events" }

// exec runs SQL with {schema} replaced by the quoted schema.
func (d *db) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	sql = strings.ReplaceAll(sql, "{schema}", pgx.Identifier{d.schema}.Sanitize())
	if _, err := d.admin.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// createTable creates the table with the package doc's DDL, as an operator would.
func (d *db) createTable(t *testing.T) {
	t.Helper()
	d.exec(t, "CREATE SCHEMA {schema}")
	d.exec(t, `CREATE TABLE {schema}.events (
		id          text PRIMARY KEY,
		poller      text NOT NULL,
		partition   text NOT NULL,
		type        text NOT NULL,
		identity    text NOT NULL,
		seq         text,
		observed_at timestamptz NOT NULL,
		envelope    jsonb NOT NULL,
		inserted_at timestamptz NOT NULL DEFAULT now()
	)`)
}

// sink is a Sink on the test's table, closed when the test ends.
func (d *db) sink(t *testing.T, mod ...func(*pgsink.Config)) *pgsink.Sink {
	t.Helper()
	cfg := pgsink.Config{URL: d.url, Table: d.table(), Timeout: 5 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := pgsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// row is one row of the table.
type row struct {
	ID, Poller, Partition, Type, Identity string
	Seq                                   *string
	ObservedAt                            time.Time
	Envelope                              []byte
}

// rows reads the table in the order the rows were committed (inserted_at, then the inserting
// transaction's id, which a later transaction of the same key always has greater).
func (d *db) rows(t *testing.T) []row {
	t.Helper()
	rs, err := d.admin.Query(t.Context(), "SELECT id, poller, partition, type, identity, seq, observed_at, envelope::text FROM "+
		pgx.Identifier{d.schema, "events"}.Sanitize()+" ORDER BY inserted_at, xmin::text::bigint")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		var env string
		err := r.Scan(&x.ID, &x.Poller, &x.Partition, &x.Type, &x.Identity, &x.Seq, &x.ObservedAt, &env)
		x.Envelope = []byte(env)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tableExists reports whether the test's table exists.
func (d *db) tableExists(t *testing.T) bool {
	t.Helper()
	var ok bool
	if err := d.admin.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{d.schema, "events"}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// event is an updated event of identity at version n, with an item whose keys are not in
// the order jsonb keeps them.
func event(id, identity string, n int) watukuytype.Event {
	return watukuytype.Event{
		ID: id, Poller: "orders", Partition: "eu", Type: watukuytype.Updated, Lane: watukuytype.LaneLive,
		Identity: identity, Version: strconv.Itoa(n), Seq: fmt.Sprintf("1764410400000-%d", n),
		ObservedAt:    time.Date(2026, 11, 29, 10, 0, n, 123456000, time.UTC),
		SchemaVersion: 1,
		Item:          json.RawMessage(fmt.Sprintf(`{"zeta":[1,2.5,"x"],"id":%q,"n":%d,"nested":{"b":null,"a":true}}`, identity, n)),
	}
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xb, _ := json.Marshal(x) // maps marshal with sorted keys
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func envelope(t *testing.T, ev watukuytype.Event) []byte {
	t.Helper()
	b, err := sink.Envelope(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unreachable fails the test unless err is a *watukuytype.SinkError with Unreachable set.
func unreachable(t *testing.T, err error) {
	t.Helper()
	var se *watukuytype.SinkError
	if !errors.As(err, &se) || !se.Unreachable {
		t.Fatalf("want a SinkError with Unreachable (SinkUnavailable), got %T: %v", err, err)
	}
}

func TestEventsArriveWithTheEnvelopeAndTheirID(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	var sent []watukuytype.Event
	for i := 1; i <= 3; i++ {
		ev := event(fmt.Sprintf("ev_%d", i), "o1", i)
		if err := s.Handle(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, ev)
	}
	rows := d.rows(t)
	if len(rows) != len(sent) {
		t.Fatalf("%d rows, want %d", len(rows), len(sent))
	}
	for i, ev := range sent {
		if rows[i].ID != ev.ID {
			t.Errorf("row %d: id %q, want the event id %q", i, rows[i].ID, ev.ID)
		}
		env := envelope(t, ev)
		if !sameJSON(t, rows[i].Envelope, env) {
			t.Errorf("row %d: envelope %s, want the JSON value of %s", i, rows[i].Envelope, env)
		}
		// The server's own comparison of jsonb values agrees.
		var same bool
		if err := d.admin.QueryRow(t.Context(), "SELECT envelope = $2::jsonb FROM "+pgx.Identifier{d.schema, "events"}.Sanitize()+" WHERE id = $1",
			ev.ID, string(env)).Scan(&same); err != nil || !same {
			t.Errorf("row %d: envelope = the envelope as jsonb: %v, %v", i, same, err)
		}
	}
}

func TestColumnsHoldTheEventsFields(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	withSeq := event("ev_seq", "o1", 7)
	noSeq := event("ev_noseq", "o2", 8)
	noSeq.Seq = ""
	deleted := event("ev_del", "o3", 9)
	deleted.Type, deleted.Partition, deleted.Item = watukuytype.Deleted, "", nil
	deleted.ObservedAt = time.Date(2026, 3, 29, 1, 30, 0, 999999000, time.FixedZone("CEST", 2*3600))
	evs := []watukuytype.Event{withSeq, noSeq, deleted}
	for _, ev := range evs {
		if err := s.Handle(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	rows := d.rows(t)
	if len(rows) != len(evs) {
		t.Fatalf("%d rows, want %d", len(rows), len(evs))
	}
	for i, ev := range evs {
		r := rows[i]
		var wantSeq *string
		if ev.Seq != "" {
			wantSeq = &ev.Seq
		}
		if r.ID != ev.ID || r.Poller != ev.Poller || r.Partition != ev.Partition || r.Type != string(ev.Type) ||
			r.Identity != ev.Identity || !r.ObservedAt.Equal(ev.ObservedAt) || (r.Seq == nil) != (wantSeq == nil) ||
			(r.Seq != nil && *r.Seq != *wantSeq) {
			t.Errorf("row id=%s poller=%s partition=%s type=%s identity=%s seq=%s observed_at=%s\nwant the event's fields %+v",
				r.ID, r.Poller, r.Partition, r.Type, r.Identity, deref(r.Seq), r.ObservedAt.Format(time.RFC3339Nano), ev)
		}
		if !sameJSON(t, r.Envelope, envelope(t, ev)) {
			t.Errorf("envelope %s, want %s", r.Envelope, envelope(t, ev))
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return "NULL"
	}
	return *p
}

func TestResentEventIsStoredOnceAndTheFirstRowKept(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	first := event("ev_1", "o1", 1)
	if err := s.Handle(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	changed := first
	changed.Item = json.RawMessage(`{"id":"o1","n":99}`)
	changed.Seq = "1764410499999-0"
	for _, ev := range []watukuytype.Event{first, changed} {
		if err := s.Handle(t.Context(), ev); err != nil {
			t.Fatalf("resend: %v (want nil: the event is stored)", err)
		}
	}
	rows := d.rows(t)
	if len(rows) != 1 {
		t.Fatalf("%d rows for one event id, want 1", len(rows))
	}
	if !sameJSON(t, rows[0].Envelope, envelope(t, first)) || deref(rows[0].Seq) != first.Seq {
		t.Errorf("kept %s (seq %s), want the first send %s", rows[0].Envelope, deref(rows[0].Seq), envelope(t, first))
	}
}

func TestCreateMakesTheTable(t *testing.T) {
	d := newDB(t)
	s := d.sink(t, func(c *pgsink.Config) { c.Create = true })
	if err := s.Handle(t.Context(), event("ev_1", "o1", 1)); err != nil {
		t.Fatal(err)
	}
	rs, err := d.admin.Query(t.Context(), `SELECT column_name, data_type, is_nullable, coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'events' ORDER BY ordinal_position`, d.schema)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (string, error) {
		var name, typ, null, def string
		err := r.Scan(&name, &typ, &null, &def)
		return strings.TrimSpace(strings.Join([]string{name, typ, null, def}, " ")), err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"id text NO",
		"poller text NO",
		"partition text NO",
		"type text NO",
		"identity text NO",
		"seq text YES",
		"observed_at timestamp with time zone NO",
		"envelope jsonb NO",
		"inserted_at timestamp with time zone NO now()",
	}
	if !slices.Equal(got, want) {
		t.Errorf("columns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var pk string
	if err := d.admin.QueryRow(t.Context(), `SELECT string_agg(k.column_name, ',')
		FROM information_schema.table_constraints c JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
		WHERE c.table_schema = $1 AND c.table_name = 'events' AND c.constraint_type = 'PRIMARY KEY'`, d.schema).Scan(&pk); err != nil || pk != "id" {
		t.Errorf("primary key %q (%v), want id", pk, err)
	}
	if n := len(d.rows(t)); n != 1 {
		t.Errorf("%d rows after creating, want the event's", n)
	}
}

// Workers that start together each create the table at their first connection; none fails.
// Each round starts the sinks' connections first, so their DDL goes out as close together as
// it can.
func TestSinksCreatingAtOnceAllSucceed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema bool // the schema exists: only the table is created at once
	}{{"schema and table", false}, {"table", true}} {
		for round := range 3 {
			t.Run(fmt.Sprintf("%s/%d", tc.name, round), func(t *testing.T) {
				d := newDB(t)
				if tc.schema {
					d.exec(t, "CREATE SCHEMA {schema}")
				}
				const n = 4
				sinks := make([]*pgsink.Sink, n)
				for i := range sinks {
					sinks[i] = d.sink(t, func(c *pgsink.Config) { c.Create = true; c.MaxConns = 1 })
					if _, err := sinks[i].Probe(t.Context()); err != nil { // connects, creates nothing
						t.Fatal(err)
					}
				}
				start := make(chan struct{})
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i, s := range sinks {
					wg.Go(func() {
						<-start
						errs[i] = s.Handle(t.Context(), event(fmt.Sprintf("ev_%d", i), "o1", i))
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("sink %d: %v", i, err)
					}
				}
				if got := len(d.rows(t)); got != n {
					t.Errorf("%d rows, want %d", got, n)
				}
			})
		}
	}
}

func TestDroppedTableIsCreatedAgainWithCreate(t *testing.T) {
	d := newDB(t)
	s := d.sink(t, func(c *pgsink.Config) { c.Create = true })
	if err := s.Handle(t.Context(), event("ev_1", "o1", 1)); err != nil {
		t.Fatal(err)
	}
	d.exec(t, "DROP TABLE {schema}.events")
	err := s.Handle(t.Context(), event("ev_2", "o1", 2))
	unreachable(t, err)
	if err := s.Handle(t.Context(), event("ev_2", "o1", 2)); err != nil {
		t.Fatalf("the attempt after the drop: %v (want the table created again)", err)
	}
	if rows := d.rows(t); len(rows) != 1 || rows[0].ID != "ev_2" {
		t.Errorf("rows %+v, want ev_2 in the new table", rows)
	}
}

// Without create, a missing table (or its schema: PostgreSQL reports both as a missing
// relation) is an outage that names the table.
func TestMissingTableIsSinkUnavailableNamingIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema bool // the schema exists, the table not
	}{{"missing table", true}, {"missing schema", false}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDB(t)
			if tc.schema {
				d.exec(t, "CREATE SCHEMA {schema}")
			}
			s := d.sink(t)
			err := s.Handle(t.Context(), event("ev_1", "o1", 1))
			unreachable(t, err)
			msg := err.Error()
			for _, want := range []string{"sink: postgres " + s.Target(), "event ev_1", "table " + d.table() + " does not exist", "create: true"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if d.tableExists(t) {
				t.Error("without create the sink made the table")
			}
		})
	}
}

// A row PostgreSQL refuses is the event's own failure: a plain error, and the next event goes.
func TestRowRefusedByPostgresIsAPlainError(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	nulIdentity := event("ev_nul_identity", "o\x001", 1)
	nulIdentity.Item = json.RawMessage(`{"id":"o1"}`)
	nulItem := event("ev_nul_item", "o1", 2)
	nulItem.Item = json.RawMessage(`{"id":"o1","note":"a\u0000b"}`) // valid JSON, which jsonb refuses
	for _, ev := range []watukuytype.Event{nulIdentity, nulItem} {
		err := s.Handle(t.Context(), ev)
		var se *watukuytype.SinkError
		if err == nil || errors.As(err, &se) {
			t.Errorf("%s: %v (%T), want a plain error", ev.ID, err, err)
			continue
		}
		if !strings.Contains(err.Error(), "event "+ev.ID) || !strings.Contains(err.Error(), "SQLSTATE 22") {
			t.Errorf("%s: %q does not name the event and the data exception", ev.ID, err)
		}
	}
	if err := s.Handle(t.Context(), event("ev_ok", "o1", 3)); err != nil {
		t.Fatal(err)
	}
	if rows := d.rows(t); len(rows) != 1 || rows[0].ID != "ev_ok" {
		t.Errorf("rows %+v, want only ev_ok", rows)
	}
}

// Through the engine, with four ordering keys delivered at once, each identity's events reach
// the table in the order the engine committed them (versions increasing), each once.
func TestEngineDeliversEachIdentitysEventsInOrder(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	var mu sync.Mutex
	var feed []json.RawMessage // a change feed: the cursor is the index reached
	fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		mu.Lock()
		defer mu.Unlock()
		from, _ := strconv.Atoi(req.Cursor)
		to := min(from+10, len(feed))
		return watukuytype.Page{Items: slices.Clone(feed[from:to]), Next: strconv.Itoa(to), HasMore: to < len(feed)}, nil
	}
	env := watukuytest.New(t, watukuytype.Poller{
		Name: "orders", Fetch: fetch, Version: watukuytype.Field("v"), Handler: s.Handle,
		Delivery: watukuytype.Delivery{Concurrency: 4},
	})
	const identities, rounds, perRound = 6, 3, 3
	for r := range rounds {
		mu.Lock()
		for j := 1; j <= perRound; j++ { // several changes of every identity, interleaved
			for k := range identities {
				feed = append(feed, json.RawMessage(fmt.Sprintf(`{"id":"i%d","v":%d}`, k, r*perRound+j)))
			}
		}
		mu.Unlock()
		env.Settle(20)
	}
	got := map[string][]int{}
	seen := map[string]bool{}
	for _, r := range d.rows(t) {
		var e watukuytype.Event
		if err := json.Unmarshal(r.Envelope, &e); err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.Atoi(e.Version)
		got[r.Identity] = append(got[r.Identity], v)
		if seen[r.ID] {
			t.Errorf("event %s stored twice", r.ID)
		}
		seen[r.ID] = true
	}
	want := make([]int, rounds*perRound)
	for i := range want {
		want[i] = i + 1
	}
	if len(got) != identities {
		t.Errorf("%d identities in the table, want %d", len(got), identities)
	}
	for id, vs := range got {
		if !slices.Equal(vs, want) {
			t.Errorf("identity %s: versions in commit order %v, want %v", id, vs, want)
		}
	}
}

func TestConcurrentHandlesForDifferentKeysAllArrive(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	const keys, each = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, keys*each)
	for k := range keys {
		wg.Go(func() {
			for i := range each {
				if err := s.Handle(t.Context(), event(fmt.Sprintf("ev_%d_%d", k, i), fmt.Sprintf("o%d", k), i+1)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rows := d.rows(t)
	perKey := map[string][]string{}
	for _, r := range rows {
		perKey[r.Identity] = append(perKey[r.Identity], r.ID)
	}
	if len(rows) != keys*each || len(perKey) != keys {
		t.Fatalf("%d rows over %d keys, want %d over %d", len(rows), len(perKey), keys*each, keys)
	}
	for k := range keys {
		var want []string
		for i := range each {
			want = append(want, fmt.Sprintf("ev_%d_%d", k, i))
		}
		if got := perKey[fmt.Sprintf("o%d", k)]; !slices.Equal(got, want) {
			t.Errorf("key o%d: %v, want %v", k, got, want)
		}
	}
}

func TestUnreachableServerIsSinkUnavailableThenReconnects(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	raw, proxy := brokertest.Proxied(t, d.url)
	s := d.sink(t, func(c *pgsink.Config) { c.URL = raw })
	if err := s.Handle(t.Context(), event("ev_1", "o1", 1)); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	for i := range 2 { // the broken pooled connection, then a new connection refused
		err := s.Handle(t.Context(), event("ev_2", "o1", 2))
		unreachable(t, err)
		if msg := err.Error(); !strings.HasPrefix(msg, "sink: postgres "+s.Target()+": event ev_2") {
			t.Errorf("attempt %d: %q does not name the sink, target and event", i, msg)
		}
	}
	proxy.Restore()
	if err := s.Handle(t.Context(), event("ev_2", "o1", 2)); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
	if rows := d.rows(t); len(rows) != 2 || rows[1].ID != "ev_2" {
		t.Errorf("rows %+v, want ev_1 and ev_2", rows)
	}
}

// A server that stops answering: the attempt ends at Timeout, as the sink's failure that is
// not (yet) an outage.
func TestTimeoutIsASinkError(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	raw, proxy := brokertest.Proxied(t, d.url)
	s := d.sink(t, func(c *pgsink.Config) { c.URL = raw; c.Timeout = 300 * time.Millisecond })
	if err := s.Handle(t.Context(), event("ev_1", "o1", 1)); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(time.Minute)
	start := time.Now()
	err := s.Handle(t.Context(), event("ev_2", "o1", 2))
	var se *watukuytype.SinkError
	if !errors.As(err, &se) || se.Unreachable || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Fatalf("want a SinkError (not Unreachable) that says it timed out, got %T: %v", err, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Handle took %s with a 300ms timeout", took)
	}
	proxy.Stall(0)
	if err := s.Handle(t.Context(), event("ev_2", "o1", 2)); err != nil {
		t.Fatalf("after the stall: %v", err)
	}
}

// Engine level: an unreachable server with a tiny retry horizon ends with the event parked;
// once the server is back, a retry of the parked row delivers it.
func TestEngineParksWhileUnreachableAndRetryDelivers(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	raw, proxy := brokertest.Proxied(t, d.url)
	s := d.sink(t, func(c *pgsink.Config) { c.URL = raw; c.Timeout = 2 * time.Second })
	proxy.Cut()
	items := []json.RawMessage{json.RawMessage(`{"id":"o1","v":1}`)}
	env := watukuytest.New(t, watukuytype.Poller{
		Name: "orders", Strategy: watukuytype.SnapshotDiff, Version: watukuytype.Field("v"), Handler: s.Handle,
		Fetch: func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Items: items}, nil
		},
		Delivery: watukuytype.Delivery{Attempts: 2, RetryHorizon: time.Millisecond,
			Backoff: watukuytype.Backoff{Base: time.Millisecond, Factor: 1, Max: time.Millisecond}},
	})
	key := watukuytype.Key{Poller: "orders"}
	env.Tick()
	if ki, err := env.Engine.Inspect(t.Context(), key); err != nil || ki.Blocked == nil || !strings.Contains(ki.Blocked.Error, "sink: postgres") {
		t.Fatalf("after the first try: %+v, %v; want the delivery blocked by the sink's error", ki.Blocked, err)
	}
	var parked []watukuytype.ParkedInfo
	for round := 0; round < 10 && len(parked) == 0; round++ {
		env.Clock.Advance(time.Hour)
		env.Tick()
		var err error
		if parked, err = env.Engine.Parked().List(t.Context(), key, "poison"); err != nil {
			t.Fatal(err)
		}
	}
	if len(parked) != 1 {
		t.Fatalf("parked %+v, want the event parked after its horizon", parked)
	}
	if !strings.Contains(parked[0].Error, "sink: postgres") {
		t.Errorf("parked error %q does not name the sink", parked[0].Error)
	}
	if rows := d.rows(t); len(rows) != 0 {
		t.Fatalf("stored while unreachable: %+v", rows)
	}
	proxy.Restore()
	if n, err := env.Engine.Parked().Retry(t.Context(), key, parked[0].ID); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	env.Settle(10)
	var ev watukuytype.Event
	if err := json.Unmarshal(parked[0].Event, &ev); err != nil {
		t.Fatal(err)
	}
	if rows := d.rows(t); len(rows) != 1 || rows[0].ID != ev.ID {
		t.Errorf("rows %+v, want the parked event %s", rows, ev.ID)
	}
}

func TestCredentialsNeverAppear(t *testing.T) {
	const user, password = "wtuser", "Sup3rS3cret-pw"
	server := brokertest.Postgres(t)
	_, port, _ := net.SplitHostPort(brokertest.ClosedAddr(t))
	realURL, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	realURL.User = url.User(user) // a role the server does not know: it says so, naming it
	leaks := func(t *testing.T, what, msg string) {
		t.Helper()
		for _, s := range []string{user, password} {
			if strings.Contains(msg, s) {
				t.Errorf("%s holds %q: %s", what, s, msg)
			}
		}
	}
	for _, tc := range []struct{ name, url string }{
		{"url", "postgres://" + user + ":" + password + "@127.0.0.1:" + port + "/test?sslmode=disable"},
		{"url query", "postgresql://127.0.0.1:" + port + "/test?user=" + user + "&password=" + password + "&sslmode=disable"},
		{"dsn", "host=127.0.0.1 port=" + port + " user=" + user + " password=" + password + " dbname=test sslmode=disable"},
		{"dsn quoted", "host=127.0.0.1 port=" + port + " user='" + user + "' password = '" + password + "' dbname=test"},
		{"unknown role", realURL.String() + "&password=" + password},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pgsink.New(pgsink.Config{URL: tc.url, Table: "events", Timeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			leaks(t, "Target", s.Target())
			err = s.Handle(t.Context(), event("ev_1", "o1", 1))
			unreachable(t, err)
			leaks(t, "Handle's error", err.Error())
			if !strings.Contains(err.Error(), s.Target()) {
				t.Errorf("Handle's error %q does not name the target %q", err, s.Target())
			}
			_, err = s.Probe(t.Context())
			if err == nil {
				t.Fatal("Probe succeeded")
			}
			leaks(t, "Probe's error", err.Error())
		})
	}
	t.Run("New", func(t *testing.T) {
		for _, raw := range []string{
			"postgres://" + user + ":" + password + "@127.0.0.1:notaport/test",
			"postgres://" + user + ":" + password + "@[::1/test",
			"host=127.0.0.1 user=" + user + " password='" + password,
			"host=127.0.0.1 user=" + user + " password=" + password + " port=notaport",
		} {
			_, err := pgsink.New(pgsink.Config{URL: raw, Table: "events"})
			if err == nil {
				t.Errorf("New(%q) succeeded", raw)
				continue
			}
			leaks(t, "New's error", err.Error())
		}
	})
	t.Run("engine log", func(t *testing.T) {
		s, err := pgsink.New(pgsink.Config{URL: "postgres://" + user + ":" + password + "@127.0.0.1:" + port + "/test", Table: "events"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		var logs brokertest.Logs
		eng, err := watukuy.New(watukuy.Options{Redis: rdb, Logger: zerolog.New(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(watukuytype.Poller{
			Name: "orders", Strategy: watukuytype.SnapshotDiff, Handler: s.Handle,
			Fetch: func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
				return watukuytype.Page{Items: []json.RawMessage{json.RawMessage(`{"id":"o1"}`)}}, nil
			},
			Delivery: watukuytype.Delivery{Attempts: 2, Backoff: watukuytype.Backoff{Base: time.Millisecond, Factor: 1, Max: time.Millisecond}},
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Tick(t.Context(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		ki, err := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders"})
		if err != nil || ki.Blocked == nil {
			t.Fatalf("inspect: %+v, %v: want the delivery blocked", ki, err)
		}
		out := logs.String()
		if !strings.Contains(out, "sink: postgres postgres://[redacted]@127.0.0.1:"+port) {
			t.Fatalf("the log does not hold the sink's error:\n%s", out)
		}
		leaks(t, "the engine's log", out)
		leaks(t, "the blocked error", ki.Blocked.Error)
	})
}

func TestProbeSaysTheTableExists(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	for _, create := range []bool{false, true} {
		s := d.sink(t, func(c *pgsink.Config) { c.Create = create })
		got, err := s.Probe(t.Context())
		if want := "table " + d.table() + " exists"; err != nil || got != want {
			t.Errorf("create %v: Probe = %q, %v; want %q", create, got, err, want)
		}
	}
	if rows := d.rows(t); len(rows) != 0 {
		t.Errorf("Probe inserted %+v", rows)
	}
}

func TestProbeSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  string // SQL run first, {schema} quoted
		create bool
		ok     bool   // Probe answers with a sentence: the first event would create what is missing
		want   string // in the sentence or the error, %s the schema
	}{
		{"no schema", "", false, false, "schema %s does not exist: create it and the table"},
		{"no table", "CREATE SCHEMA {schema}", false, false, "table %s.events does not exist: create it"},
		{"no table, create", "CREATE SCHEMA {schema}", true, true, "table %s.events does not exist: the first event creates it"},
		{"no schema, create", "", true, true, "schema %s and table %[1]s.events do not exist: the first event creates them"},
		{"a column missing", "CREATE SCHEMA {schema}; CREATE TABLE {schema}.events (id text PRIMARY KEY, poller text, partition text, type text, identity text, observed_at timestamptz, envelope jsonb)",
			false, false, "table %s.events lacks the column(s) seq"},
		{"id not unique", "CREATE SCHEMA {schema}; CREATE TABLE {schema}.events (id text, poller text, partition text, type text, identity text, seq text, observed_at timestamptz, envelope jsonb)",
			true, false, "table %s.events has no primary key or unique index on id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDB(t)
			for _, stmt := range strings.Split(tc.setup, ";") {
				if strings.TrimSpace(stmt) != "" {
					d.exec(t, stmt)
				}
			}
			s := d.sink(t, func(c *pgsink.Config) { c.Create = tc.create })
			got, err := s.Probe(t.Context())
			want := fmt.Sprintf(tc.want, d.schema)
			if tc.ok {
				if err != nil || !strings.Contains(got, want) {
					t.Errorf("Probe = %q, %v; want a sentence with %q", got, err, want)
				}
				if d.tableExists(t) {
					t.Error("Probe created the table")
				}
				return
			}
			if err == nil {
				t.Fatalf("Probe = %q, want an error with %q", got, want)
			}
			unreachable(t, err)
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), s.Target()) {
				t.Errorf("Probe's error %q does not say %q and the target", err, want)
			}
		})
	}
}

func TestNewRefusesABadConfigNamingTheField(t *testing.T) {
	const ok = "postgres://127.0.0.1:5432/test"
	for _, tc := range []struct {
		name string
		cfg  pgsink.Config
		want string
	}{
		{"no url", pgsink.Config{Table: "events"}, "url is empty"},
		{"url not a dsn", pgsink.Config{URL: "127.0.0.1:5432", Table: "events"}, "url [invalid DSN]"},
		{"url bad port", pgsink.Config{URL: "postgres://127.0.0.1:x/test", Table: "events"}, "does not parse"},
		{"no table", pgsink.Config{URL: ok}, "table: empty"},
		{"two dots", pgsink.Config{URL: ok, Table: "a.b.c"}, `table: "a.b.c" has 2 dots`},
		{"empty schema", pgsink.Config{URL: ok, Table: ".events"}, "each part non-empty"},
		{"empty name", pgsink.Config{URL: ok, Table: "app."}, "each part non-empty"},
		{"negative maxConns", pgsink.Config{URL: ok, Table: "events", MaxConns: -1}, "negative maxConns"},
		{"negative timeout", pgsink.Config{URL: ok, Table: "events", Timeout: -time.Second}, "negative timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pgsink.New(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatalf("New accepted %+v", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sink: postgres") {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// New connects nothing, so a worker starts while PostgreSQL is down; the target shows the
// URL redacted and the table.
func TestNewConnectsNothingAndTargetRedacts(t *testing.T) {
	_, port, _ := net.SplitHostPort(brokertest.ClosedAddr(t))
	for _, tc := range []struct{ url, target string }{
		{"postgres://u1:pw-1234@127.0.0.1:" + port + "/test?sslmode=disable",
			"postgres://[redacted]@127.0.0.1:" + port + "/test?sslmode=disable table app.events"},
		{"host=127.0.0.1 port=" + port + " user=u1 password='pw 1234' dbname=test",
			"host=127.0.0.1 port=" + port + " user=[redacted] password=[redacted] dbname=test table app.events"},
	} {
		s, err := pgsink.New(pgsink.Config{URL: tc.url, Table: "app.events"})
		if err != nil {
			t.Fatalf("New with the server down: %v", err)
		}
		if s.Kind() != "postgres" || s.Target() != tc.target {
			t.Errorf("Kind %q, Target %q; want postgres, %q", s.Kind(), s.Target(), tc.target)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestHandleAfterCloseSaysTheSinkIsClosed(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	s := d.sink(t)
	if err := s.Handle(t.Context(), event("ev_1", "o1", 1)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Handle(t.Context(), event("ev_2", "o1", 2))
	unreachable(t, err)
	if !strings.Contains(err.Error(), "the sink is closed") {
		t.Errorf("Handle after Close: %q", err)
	}
	if _, err := s.Probe(t.Context()); err == nil || !strings.Contains(err.Error(), "the sink is closed") {
		t.Errorf("Probe after Close: %v", err)
	}
	if rows := d.rows(t); len(rows) != 1 {
		t.Errorf("%d rows, want 1", len(rows))
	}
}

// A role of the test's own, dropped when the test ends: trust authentication on loopback lets
// it connect without a password.
func (d *db) role(t *testing.T) string {
	t.Helper()
	name := brokertest.Name(t)
	quoted := pgx.Identifier{name}.Sanitize()
	d.exec(t, "CREATE ROLE "+quoted+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, sql := range []string{"DROP OWNED BY " + quoted, "DROP ROLE " + quoted} {
			if _, err := d.admin.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	return name
}

// A role that may not insert meets an outage naming the table, which Probe explains; granted
// INSERT and SELECT (id) only (no CREATE anywhere), it delivers, with create set too.
func TestPermissionDeniedIsSinkUnavailableUntilGranted(t *testing.T) {
	d := newDB(t)
	d.createTable(t)
	role := d.role(t)
	d.exec(t, "GRANT USAGE ON SCHEMA {schema} TO "+pgx.Identifier{role}.Sanitize())
	u, err := url.Parse(d.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	s := d.sink(t, func(c *pgsink.Config) { c.URL = u.String(); c.Create = true })
	err = s.Handle(t.Context(), event("ev_1", "o1", 1))
	unreachable(t, err)
	if want := "permission denied on table " + d.table(); !strings.Contains(err.Error(), want) {
		t.Errorf("Handle: %q does not say %q", err, want)
	}
	if _, err := s.Probe(t.Context()); err == nil || !strings.Contains(err.Error(), "may not insert into table "+d.table()) {
		t.Errorf("Probe: %v, want it to say the role may not insert", err)
	}
	// INSERT alone is not enough: ON CONFLICT (id) reads id.
	d.exec(t, "GRANT INSERT ON {schema}.events TO "+pgx.Identifier{role}.Sanitize())
	unreachable(t, s.Handle(t.Context(), event("ev_1", "o1", 1)))
	if _, err := s.Probe(t.Context()); err == nil || !strings.Contains(err.Error(), "GRANT INSERT, SELECT (id)") {
		t.Errorf("Probe with INSERT only: %v, want it to ask for SELECT (id)", err)
	}
	d.exec(t, "GRANT SELECT (id) ON {schema}.events TO "+pgx.Identifier{role}.Sanitize())
	if err := s.Handle(t.Context(), event("ev_1", "o1", 1)); err != nil {
		t.Fatalf("granted INSERT: %v", err)
	}
	if got, err := s.Probe(t.Context()); err != nil || got != "table "+d.table()+" exists" {
		t.Errorf("Probe = %q, %v", got, err)
	}
}
