package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

const (
	opsSecret  = "ops-secret-0123456789"
	readSecret = "read-secret-0123456789"
)

// site is an engine with pollers on a private redis-server, and the admin API over real HTTP
// in front of it.
type site struct {
	t       *testing.T
	b       redistest.Backend
	eng     *watukuy.Engine
	srv     *httptest.Server
	healthy atomic.Bool // the orders handler's sink works
	log     *syncBuffer
	tokens  *admintoken.Set
	login   *admin.Login // the API's: the status page's sessions
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newSite registers orders (unpartitioned, two poison rows parked) and shops (partitions eu
// and us), runs their first cycles and serves the API with an acting token "ops" and a
// read-only one "dashboards".
func newSite(t *testing.T, tokens ...admintoken.Token) *site {
	t.Helper()
	s := &site{t: t, b: redistest.Real(t), log: &syncBuffer{}}
	eng, err := watukuy.New(watukuy.Options{Redis: s.b.Client, InstanceID: "test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	s.eng = eng
	api := fakeapi.New()
	api.PutMany(2, "o", nil)
	base := func(name string) watukuytype.Poller {
		return watukuytype.Poller{Name: name, Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"),
			Handler:  func(context.Context, watukuytype.Event) error { return nil },
			Schedule: watukuytype.Schedule{Min: time.Second, Max: time.Minute},
			Delivery: watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	}
	orders := base("orders")
	orders.Handler = func(context.Context, watukuytype.Event) error {
		if !s.healthy.Load() {
			return errors.New("sink down")
		}
		return nil
	}
	orders.SharedRequest = true // one feed for every partition: partitions add refuses it
	shops := base("shops")
	shops.Partitions = []string{"eu", "us"}
	for _, p := range []watukuytype.Poller{orders, shops} {
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := eng.Tick(context.Background(), time.Second); err != nil || len(rep.Errors) > 0 {
		t.Fatalf("tick: %v %v", err, rep.Errors)
	}
	if tokens == nil {
		tokens = []admintoken.Token{{ID: "ops", Secret: opsSecret}, {ID: "dashboards", Secret: readSecret, ReadOnly: true}}
	}
	set, err := admintoken.NewSet(tokens...)
	if err != nil {
		t.Fatal(err)
	}
	s.tokens, s.login = set, admin.NewLogin(admin.LoginOptions{Tokens: set})
	s.srv = httptest.NewServer(admin.NewAPI(admin.Options{Engine: eng, Tokens: set, Login: s.login, Logger: zerolog.New(s.log), MaxBody: 1024}))
	t.Cleanup(s.srv.Close)
	return s
}

// do sends a request with the secret as bearer token ("" for none) and returns the status and
// the body.
func (s *site) do(method, path, secret, body string) (int, []byte) {
	s.t.Helper()
	return s.send(method, path, body, func(r *http.Request) {
		if secret != "" {
			r.Header.Set("Authorization", "Bearer "+secret)
		}
	})
}

func (s *site) send(method, path, body string, mod func(*http.Request)) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	mod(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		s.t.Fatalf("%s %s: Content-Type %q, body %s", method, path, ct, b)
	}
	return resp.StatusCode, b
}

// ok sends a request with the ops token that must answer 200, and decodes the answer.
func ok[T any](s *site, method, path, body string) T {
	s.t.Helper()
	code, b := s.do(method, path, opsSecret, body)
	if code != http.StatusOK {
		s.t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		s.t.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
	return v
}

type apiError struct {
	Error admin.Error `json:"error"`
}

// fails sends a request that must fail with status and code, and returns the error.
func (s *site) fails(method, path, secret, body string, status int, code string) admin.Error {
	s.t.Helper()
	got, b := s.do(method, path, secret, body)
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil {
		s.t.Fatalf("%s %s: not a JSON error: %s", method, path, b)
	}
	if got != status || e.Error.Code != code {
		s.t.Fatalf("%s %s: %d %s, want %d %s", method, path, got, b, status, code)
	}
	return e.Error
}

func (s *site) inspect(poller, partition string) watukuytype.KeyInfo {
	s.t.Helper()
	ki, err := s.eng.Inspect(context.Background(), watukuytype.Key{Poller: poller, Partition: partition})
	if err != nil {
		s.t.Fatal(err)
	}
	return ki
}

// pausedInRedis reads the pause flag straight from the key's state hash.
func (s *site) pausedInRedis(poller, partition string) bool {
	s.t.Helper()
	v, err := s.b.Client.HGet(context.Background(), "wk:{"+poller+"|"+partition+"}:state", statehash.Paused).Result()
	if err != nil && err.Error() != "redis: nil" {
		s.t.Fatal(err)
	}
	return v == "1"
}

// Every authentication failure is refused before anything happens, and a read-only token
// reads but does not act.
func TestAuth(t *testing.T) {
	s := newSite(t)
	pause := "/api/keys/orders/-/pause"
	cases := []struct {
		name   string
		mod    func(*http.Request)
		status int
		code   string
	}{
		{"no token", func(*http.Request) {}, 401, "unauthorized"},
		{"wrong token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret+"x") }, 401, "unauthorized"},
		{"a prefix of a token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret[:10]) }, 401, "unauthorized"},
		{"basic auth", func(r *http.Request) { r.SetBasicAuth("ops", opsSecret) }, 401, "unauthorized"},
		{"read-only token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+readSecret) }, 403, "read_only"},
		{"cookie without the request header", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: s.session(opsSecret)}) }, 403, "csrf"},
		{"the secret as the cookie", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: opsSecret})
			r.Header.Set(admin.RequestHeader, "1")
		}, 401, "unauthorized"},
		{"wrong cookie", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: "nope-nope-nope-nope"})
			r.Header.Set(admin.RequestHeader, "1")
		}, 401, "unauthorized"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, b := s.send("POST", pause, "", c.mod)
			var e apiError
			if err := json.Unmarshal(b, &e); err != nil || code != c.status || e.Error.Code != c.code {
				t.Fatalf("%d %s, want %d %s", code, b, c.status, c.code)
			}
			if s.pausedInRedis("orders", "") {
				t.Fatal("a refused request paused the key")
			}
		})
	}
	// Read-only reads.
	who := ok[struct {
		ID       string
		ReadOnly bool
	}](&site{t: t, srv: s.srv}, "GET", "/api/whoami", "")
	if who.ID != "ops" || who.ReadOnly {
		t.Fatalf("whoami: %+v", who)
	}
	if code, b := s.do("GET", "/api/keys/orders/-", readSecret, ""); code != 200 || !strings.Contains(string(b), `"poller": "orders"`) {
		t.Fatalf("read-only inspect: %d %s", code, b)
	}
	// The cookie with the header acts (the status page's buttons).
	code, b := s.send("POST", pause, "", func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: s.session(opsSecret)})
		r.Header.Set(admin.RequestHeader, "1")
	})
	if code != 200 || !s.pausedInRedis("orders", "") {
		t.Fatalf("cookie with header: %d %s", code, b)
	}
	if log := s.log.String(); strings.Contains(log, opsSecret) || strings.Contains(log, readSecret) {
		t.Fatalf("a secret reached the log:\n%s", log)
	}
}

// Without a token configured the API is off and says how to turn it on.
func TestAPIOff(t *testing.T) {
	srv := httptest.NewServer(admin.NewAPI(admin.Options{Tokens: &admintoken.Set{}}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 404 || !strings.Contains(string(b), "api_off") || !strings.Contains(string(b), "WATUKUY_ADMIN_TOKEN") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

type keyStatus struct{ Poller, Partition, Status string }

// Inspect, trigger, pause and resume, of one key and of every partition, act in Redis; an
// unknown poller or partition is a 404 naming the known ones.
func TestKeyEndpoints(t *testing.T) {
	s := newSite(t)
	all := ok[struct {
		Keys []watukuytype.KeyInfo
		Next *string
	}](s, "GET", "/api/keys", "")
	if len(all.Keys) != 3 || all.Next == nil || *all.Next != "" {
		t.Fatalf("keys: %+v, next %v", all.Keys, all.Next)
	}
	shops := ok[struct{ Keys []watukuytype.KeyInfo }](s, "GET", "/api/keys?poller=shops", "")
	if len(shops.Keys) != 2 || shops.Keys[0].Partition != "eu" || shops.Keys[1].Partition != "us" {
		t.Fatalf("keys of shops: %+v", shops.Keys)
	}
	pollers := ok[struct {
		Pollers []struct {
			Name string
			Keys int
		}
	}](s, "GET", "/api/pollers", "")
	if len(pollers.Pollers) != 2 || pollers.Pollers[0].Name != "orders" || pollers.Pollers[1].Keys != 2 {
		t.Fatalf("pollers: %+v", pollers)
	}
	ki := ok[watukuytype.KeyInfo](s, "GET", "/api/keys/orders/-", "")
	if ki.Poller != "orders" || ki.Parked != 2 {
		t.Fatalf("inspect orders: %+v", ki)
	}

	e := s.fails("GET", "/api/keys/nope/-", opsSecret, "", 404, "not_found")
	if !slices.Equal(e.Known, []string{"orders", "shops"}) {
		t.Fatalf("unknown poller: %+v", e)
	}
	e = s.fails("POST", "/api/keys/shops/asia/pause", opsSecret, "", 404, "not_found")
	if !slices.Equal(e.Known, []string{"eu", "us"}) || !strings.Contains(e.Message, "asia") {
		t.Fatalf("unknown partition: %+v", e)
	}
	s.fails("GET", "/api/keys?poller=nope", opsSecret, "", 404, "not_found")
	for _, q := range []string{"limit=0", "limit=1001", "limit=ten", "limit=-1", "limit=1.5"} {
		if e := s.fails("GET", "/api/keys?"+q, opsSecret, "", 400, "bad_request"); e.Field != "limit" {
			t.Errorf("/api/keys?%s: field %q (%s)", q, e.Field, e.Message)
		}
	}
	for _, q := range []string{"after=nocursor", "poller=shops&after=orders|"} {
		if e := s.fails("GET", "/api/keys?"+q, opsSecret, "", 400, "bad_request"); e.Field != "after" {
			t.Errorf("/api/keys?%s: field %q (%s)", q, e.Field, e.Message)
		}
	}

	res := ok[struct {
		Action string
		Keys   []keyStatus
	}](s, "POST", "/api/keys/shops/eu/pause", "")
	if res.Action != "pause" || len(res.Keys) != 1 || res.Keys[0].Status != "paused" || !s.pausedInRedis("shops", "eu") || s.pausedInRedis("shops", "us") {
		t.Fatalf("pause shops|eu: %+v", res)
	}
	res = ok[struct {
		Action string
		Keys   []keyStatus
	}](s, "POST", "/api/pollers/shops/pause", "")
	if len(res.Keys) != 2 || !s.pausedInRedis("shops", "us") {
		t.Fatalf("pause shops: %+v", res)
	}
	ok[any](s, "POST", "/api/pollers/shops/resume", "")
	if s.pausedInRedis("shops", "eu") || s.pausedInRedis("shops", "us") {
		t.Fatal("resume left a partition paused")
	}
	// A trigger makes the key due now: the due set's score is at most the time of the call.
	before := time.Now()
	ok[any](s, "POST", "/api/keys/orders/-/trigger", "")
	if due := s.inspect("orders", "").NextDueAt; due == nil || due.After(before.Add(time.Second)) {
		t.Fatalf("next due after trigger: %v (called at %v)", due, before)
	}

	s.fails("GET", "/api/keys/orders/-/pause", opsSecret, "", 405, "method_not_allowed")
	s.fails("GET", "/api/nothing", opsSecret, "", 404, "not_found")

	log := s.log.String()
	for _, want := range []string{`"token":"ops"`, `"action":"pause"`, `"partition":"eu"`, `"action":"trigger"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the action log lacks %s:\n%s", want, log)
		}
	}
}

// Backfill, replay and reset-cursor check their bodies, naming the field at fault, and act.
func TestCursorEndpoints(t *testing.T) {
	s := newSite(t)
	for _, c := range []struct{ path, body, field string }{
		{"/api/keys/shops/eu/backfill", `{}`, "from"},
		{"/api/keys/shops/eu/backfill", `{"from": 5}`, "from"},
		{"/api/keys/shops/eu/backfill", `{"from": null, "forse": true}`, "forse"},
		{"/api/keys/shops/eu/backfill", `{"from": null, "force": "yes"}`, "force"},
		{"/api/keys/shops/eu/backfill", `{"from": null`, "body"},
		{"/api/keys/orders/-/replay", `{}`, "from"},
		{"/api/keys/orders/-/replay", `{"from": "yesterday"}`, "from"},
		{"/api/keys/orders/-/replay", `{"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}`, "to"},
		{"/api/keys/orders/-/reset-cursor", `{"clearSnapshot": true}`, "cursor"},
	} {
		if e := s.fails("POST", c.path, opsSecret, c.body, 400, "bad_request"); e.Field != c.field {
			t.Errorf("%s %s: field %q, want %q (%s)", c.path, c.body, e.Field, c.field, e.Message)
		}
	}
	s.fails("POST", "/api/keys/shops/eu/backfill", opsSecret, `{"from": "`+strings.Repeat("x", 2000)+`"}`, 413, "too_large")

	started := ok[struct {
		Keys []struct {
			Poller, Partition string
			Backfill          *watukuytype.BackfillProgress
		}
	}](s, "POST", "/api/pollers/shops/backfill", `{"from": null, "force": true}`)
	if len(started.Keys) != 2 || started.Keys[0].Backfill == nil || !started.Keys[0].Backfill.Force {
		t.Fatalf("backfill: %+v", started)
	}
	prog := ok[struct{ Backfill *watukuytype.BackfillProgress }](s, "GET", "/api/keys/shops/us/backfill", "")
	if prog.Backfill == nil || prog.Backfill.Generation != started.Keys[1].Backfill.Generation || s.inspect("shops", "us").Backfill == nil {
		t.Fatalf("backfill progress: %+v", prog)
	}

	// orders keeps no event log: replay is a conflict, not a server error.
	s.fails("POST", "/api/keys/orders/-/replay", opsSecret, `{"from": "2026-01-01T00:00:00Z"}`, 409, "replay_unavailable")

	if cur := s.inspect("shops", "eu").Cursor; cur == "" {
		t.Fatalf("shops|eu has no cursor to rewind from")
	}
	st := ok[keyStatus](s, "POST", "/api/keys/shops/eu/reset-cursor", `{"cursor": null}`)
	if st.Poller != "shops" || s.inspect("shops", "eu").Cursor != "" {
		t.Fatalf("reset-cursor: %+v, cursor now %q", st, s.inspect("shops", "eu").Cursor)
	}
	if !strings.Contains(s.log.String(), `"action":"reset-cursor"`) {
		t.Fatalf("reset-cursor not logged:\n%s", s.log.String())
	}
}

type parkedRow struct {
	Poller, Partition string
	watukuytype.ParkedInfo
}

// parkedPage is the answer of the parked listings; Next is nil when the answer lacks it.
type parkedPage struct {
	Rows []parkedRow
	Next *string
}

// The dead-letter queue: list, retry (the row goes back to delivery), discard (it is gone).
func TestParkedEndpoints(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	all := ok[parkedPage](s, "GET", "/api/parked", "")
	rows := all.Rows
	if len(rows) != 2 || rows[0].Poller != "orders" || rows[0].Kind != "poison" || rows[0].Errors[0] != "sink down" || all.Next == nil || *all.Next != "" {
		t.Fatalf("parked: %+v", all)
	}
	if r := ok[parkedPage](s, "GET", "/api/keys/orders/-/parked?kind=invalid", ""); len(r.Rows) != 0 || r.Next == nil || *r.Next != "" {
		t.Fatalf("invalid rows: %+v", r)
	}
	s.fails("GET", "/api/parked?kind=bad", opsSecret, "", 400, "bad_request")
	for _, path := range []string{"/api/parked?limit=0", "/api/parked?limit=5000", "/api/keys/orders/-/parked?limit=x"} {
		if e := s.fails("GET", path, opsSecret, "", 400, "bad_request"); e.Field != "limit" {
			t.Errorf("%s: field %q (%s)", path, e.Field, e.Message)
		}
	}
	for _, path := range []string{"/api/parked?after=orders", "/api/parked?after=|x|y", "/api/parked?poller=orders&after=shops|eu|"} {
		if e := s.fails("GET", path, opsSecret, "", 400, "bad_request"); e.Field != "after" {
			t.Errorf("%s: field %q (%s)", path, e.Field, e.Message)
		}
	}
	s.fails("GET", "/api/parked?poller=nope", opsSecret, "", 404, "not_found")
	s.fails("POST", "/api/keys/orders/-/parked/retry", opsSecret, `{}`, 400, "bad_request")
	s.fails("POST", "/api/keys/orders/-/parked/retry", opsSecret, `{"all": true, "ids": ["x"]}`, 400, "bad_request")
	e := s.fails("POST", "/api/keys/orders/-/parked/retry", opsSecret, `{"ids": ["nope"]}`, 404, "not_found")
	if len(e.Known) != 2 {
		t.Fatalf("unknown id: %+v", e)
	}
	s.fails("POST", "/api/keys/orders/-/parked/retry", readSecret, `{"ids": ["`+rows[0].ID+`"]}`, 403, "read_only")

	s.healthy.Store(true)
	res := ok[struct {
		Action   string
		Released int
	}](s, "POST", "/api/keys/orders/-/parked/retry", `{"ids": ["`+rows[0].ID+`"]}`)
	if res.Action != "retry" || res.Released != 1 {
		t.Fatalf("retry: %+v", res)
	}
	if n := s.b.Client.HLen(ctx, "wk:{orders|}:parked").Val(); n != 1 {
		t.Fatalf("%d parked rows in Redis after a retry", n)
	}
	if rep, err := s.eng.Tick(ctx, time.Second); err != nil || rep.Delivered != 1 {
		t.Fatalf("the retried event was not delivered: %+v %v", rep, err)
	}
	res = ok[struct {
		Action   string
		Released int
	}](s, "POST", "/api/keys/orders/-/parked/discard", `{"all": true, "kind": "poison"}`)
	if res.Released != 1 || s.b.Client.Exists(ctx, "wk:{orders|}:parked").Val() != 0 {
		t.Fatalf("discard: %+v", res)
	}
	if !strings.Contains(s.log.String(), `"action":"parked discard"`) {
		t.Fatalf("discard not logged:\n%s", s.log.String())
	}
}

// Partitions: list, add (a new key due now), remove (paused, state kept), delete (gone).
func TestPartitionEndpoints(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	list := ok[struct {
		Poller     string
		Partitions []watukuytype.KeyInfo
	}](s, "GET", "/api/pollers/shops/partitions", "")
	if list.Poller != "shops" || len(list.Partitions) != 2 {
		t.Fatalf("partitions: %+v", list)
	}
	s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{}`, 400, "bad_request")
	s.fails("POST", "/api/pollers/nope/partitions", opsSecret, `{"partition": "ap"}`, 404, "not_found")
	if e := s.fails("POST", "/api/pollers/orders/partitions", opsSecret, `{"partition": "eu"}`, 400, "bad_request"); !strings.Contains(e.Message, "${partition}") {
		t.Fatalf("add to a poller whose request has no ${partition}: %+v", e)
	}
	if st := ok[keyStatus](s, "POST", "/api/pollers/shops/partitions", `{"partition": "ap"}`); st.Partition != "ap" {
		t.Fatalf("add: %+v", st)
	}
	if keys, _, _ := s.eng.KeysPage(ctx, "shops", "", 1000); len(keys) != 3 {
		t.Fatalf("keys after add: %v", keys)
	}
	s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "ap"}`, 409, "conflict")
	if e := s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "a b"}`, 400, "bad_request"); e.Field != "partition" {
		t.Fatalf("a bad partition name: %+v", e)
	}
	s.fails("DELETE", "/api/pollers/shops/partitions/ap?purge=maybe", opsSecret, "", 400, "bad_request")
	if st := ok[keyStatus](s, "DELETE", "/api/pollers/shops/partitions/eu", ""); st.Status != "removed" || !s.pausedInRedis("shops", "eu") {
		t.Fatalf("remove: %+v", st)
	}
	if st := ok[keyStatus](s, "DELETE", "/api/pollers/shops/partitions/ap?purge=true", ""); st.Status != "deleted" {
		t.Fatalf("delete: %+v", st)
	}
	// A deleted key keeps only its fences (lease, incarnation) and its deleted mark.
	state := s.b.Client.HGetAll(ctx, "wk:{shops|ap}:state").Val()
	if state[statehash.Deleted] != "1" || state[statehash.CursorLive] != "" || state[statehash.NextDue] != "" {
		t.Fatalf("the deleted partition's state: %v", state)
	}
	if keys, _, _ := s.eng.KeysPage(ctx, "shops", "", 1000); len(keys) != 2 {
		t.Fatalf("keys after delete: %v", keys)
	}
}

// ParseEnv reads comma-separated secrets, named env#1, env#2… in order, skipping blanks.
func TestParseEnv(t *testing.T) {
	env := admin.ParseEnv(" "+opsSecret+", ,"+readSecret, "env", false)
	if len(env) != 2 || env[0].ID != "env#1" || env[1].ID != "env#2" || env[1].Secret != readSecret {
		t.Fatalf("%+v", env)
	}
}

// Rotation: Replace swaps the set a running API accepts; a set that fails its checks changes
// nothing.
func TestTokensReplace(t *testing.T) {
	s := newSite(t)
	set, err := admintoken.NewSet(admintoken.Token{ID: "old", Secret: opsSecret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin.NewAPI(admin.Options{Engine: s.eng, Tokens: set}))
	defer srv.Close()
	s.srv = srv
	ok[any](s, "GET", "/api/whoami", "")
	const newSecret = "new-secret-0123456789"
	if err := set.Replace([]admintoken.Token{{ID: "new", Secret: newSecret}, {ID: "bad", Secret: "short"}}); err == nil {
		t.Fatal("a short secret was taken")
	}
	ok[any](s, "GET", "/api/whoami", "") // unchanged
	if err := set.Replace([]admintoken.Token{{ID: "new", Secret: newSecret}}); err != nil {
		t.Fatal(err)
	}
	s.fails("GET", "/api/whoami", opsSecret, "", 401, "unauthorized")
	if code, b := s.do("GET", "/api/whoami", newSecret, ""); code != 200 || !strings.Contains(string(b), `"new"`) {
		t.Fatalf("the new token: %d %s", code, b)
	}
}

// register adds a poller with partitions to the site's engine: its Fetch reads items, its
// handler fails with refuse (nil: delivers), every event is parked after one attempt.
func (s *site) register(name string, partitions []string, items int, refuse error) {
	s.t.Helper()
	api := fakeapi.New()
	api.PutMany(items, name, nil)
	p := watukuytype.Poller{Name: name, Partitions: partitions, Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"),
		Handler:  func(context.Context, watukuytype.Event) error { return refuse },
		Schedule: watukuytype.Schedule{Min: time.Minute, Max: time.Hour},
		Delivery: watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	if err := s.eng.Register(p); err != nil {
		s.t.Fatal(err)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

// walk follows a listing's next cursors from the first page and returns every page's items,
// as item renders them.
func walk[T any](s *site, path string, items func(T) []string, next func(T) *string) [][]string {
	s.t.Helper()
	var pages [][]string
	after := ""
	for {
		if len(pages) > 1000 {
			s.t.Fatalf("%s: no end after %d pages", path, len(pages))
		}
		p := path
		if after != "" {
			p += "&after=" + url.QueryEscape(after)
		}
		page := ok[T](s, "GET", p, "")
		pages = append(pages, items(page))
		n := next(page)
		if n == nil {
			s.t.Fatalf("GET %s: no next in the answer", p)
		}
		if *n == "" {
			return pages
		}
		after = *n
	}
}

// flat is the items of pages in order, and the size of each page.
func flat(pages [][]string) ([]string, []int) {
	var all []string
	var sizes []int
	for _, p := range pages {
		all = append(all, p...)
		sizes = append(sizes, len(p))
	}
	return all, sizes
}

type keysPage struct {
	Keys []watukuytype.KeyInfo
	Next *string
}

func keysOfPage(p keysPage) []string {
	out := make([]string, len(p.Keys))
	for i, ki := range p.Keys {
		out[i] = ki.Poller + "|" + ki.Partition
	}
	return out
}

// GET /api/keys answers a page at a time: 250 keys at limit 100 are three pages of 100, 100
// and 50, every key once and in order, the last one's next "". Across pollers the pages run
// in poller then partition order. /api/pollers counts the keys, and an action on every
// partition reaches each of them, the registry read a page at a time.
func TestKeysPaged(t *testing.T) {
	s := newSite(t)
	many := names("p", 250)
	s.register("many", many, 0, nil)
	var want []string
	for _, p := range many {
		want = append(want, "many|"+p)
	}

	got, sizes := flat(walk(s, "/api/keys?poller=many&limit=100", keysOfPage, func(p keysPage) *string { return p.Next }))
	if !slices.Equal(got, want) || !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Fatalf("pages of many: sizes %v, keys %v", sizes, got)
	}
	// A limit that divides the keys: the last full page says next "" (no empty page after it).
	if _, sizes := flat(walk(s, "/api/keys?poller=many&limit=125", keysOfPage, func(p keysPage) *string { return p.Next })); !slices.Equal(sizes, []int{125, 125}) {
		t.Fatalf("pages of 125: %v", sizes)
	}
	all, _ := flat(walk(s, "/api/keys?limit=100", keysOfPage, func(p keysPage) *string { return p.Next }))
	if wantAll := append(slices.Clone(want), "orders|", "shops|eu", "shops|us"); !slices.Equal(all, wantAll) {
		t.Fatalf("pages of every poller: %d keys %v", len(all), all)
	}
	if p := ok[keysPage](s, "GET", "/api/keys", ""); len(p.Keys) != admin.DefaultLimit || p.Next == nil || *p.Next == "" {
		t.Fatalf("no limit: %d keys, next %v", len(p.Keys), p.Next)
	}

	pollers := ok[struct {
		Pollers []struct {
			Name string
			Keys int
		}
	}](s, "GET", "/api/pollers", "")
	if fmt.Sprint(pollers.Pollers) != "[{many 250} {orders 1} {shops 2}]" {
		t.Fatalf("pollers: %+v", pollers.Pollers)
	}

	res := ok[struct{ Keys []keyStatus }](s, "POST", "/api/pollers/many/pause", "")
	if len(res.Keys) != len(many) || res.Keys[0].Partition != many[0] || res.Keys[len(many)-1].Partition != many[len(many)-1] {
		t.Fatalf("pause many: %d keys", len(res.Keys))
	}
	for _, st := range res.Keys {
		if st.Status != "paused" {
			t.Fatalf("pause many: %+v", st)
		}
	}
	if !s.pausedInRedis("many", many[0]) || !s.pausedInRedis("many", many[len(many)-1]) || s.pausedInRedis("orders", "") {
		t.Fatal("pause many did not pause its partitions, or paused another poller's key")
	}
}

func rowsOfPage(p parkedPage) []string {
	out := make([]string, len(p.Rows))
	for i, r := range p.Rows {
		out[i] = r.Poller + "|" + r.Partition + "|" + r.ID
	}
	return out
}

// GET /api/parked pages across keys: rows in key order (poller, partition), then by id, each
// once, pages breaking inside a key and between keys, the last one's next "". A key's own
// listing pages by id.
func TestParkedPaged(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	bad := names("b", 5)
	s.register("bad", bad, 3, errors.New("sink refuses"))
	keys := []watukuytype.Key{{Poller: "orders"}}
	for _, p := range bad {
		keys = append(keys, watukuytype.Key{Poller: "bad", Partition: p})
	}
	parked := func() []string {
		var out []string
		for _, k := range keys {
			rows, err := s.eng.Parked().List(ctx, k, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				out = append(out, k.Poller+"|"+k.Partition+"|"+r.ID)
			}
		}
		return out
	}
	for range 10 {
		if len(parked()) == 17 {
			break
		}
		if _, err := s.eng.Tick(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	want := parked()
	if len(want) != 17 {
		t.Fatalf("parked rows: %v, want 3 in each partition of bad and 2 in orders", want)
	}
	want = append(want[2:], want[:2]...) // bad before orders
	next := func(p parkedPage) *string { return p.Next }

	got, sizes := flat(walk(s, "/api/parked?limit=4", rowsOfPage, next))
	if !slices.Equal(got, want) || !slices.Equal(sizes, []int{4, 4, 4, 4, 1}) {
		t.Fatalf("parked pages: sizes %v\n got %v\nwant %v", sizes, got, want)
	}
	got, sizes = flat(walk(s, "/api/parked?poller=bad&limit=5", rowsOfPage, next))
	if !slices.Equal(got, want[:15]) || !slices.Equal(sizes, []int{5, 5, 5}) {
		t.Fatalf("parked pages of bad: sizes %v, rows %v", sizes, got)
	}
	if got, _ := flat(walk(s, "/api/parked?kind=invalid&limit=3", rowsOfPage, next)); len(got) != 0 {
		t.Fatalf("invalid rows: %v", got)
	}
	if got, _ := flat(walk(s, "/api/parked?kind=poison&limit=1000", rowsOfPage, next)); !slices.Equal(got, want) {
		t.Fatalf("poison rows at limit 1000: %v", got)
	}
	// A cursor from inside a key goes on with that key's next row; a page that ends with the
	// key's last row goes on after the key.
	p := ok[parkedPage](s, "GET", "/api/parked?limit=2&after="+url.QueryEscape(want[3]), "")
	if !slices.Equal(rowsOfPage(p), want[4:6]) || p.Next == nil || *p.Next != "bad|"+bad[1]+"|" {
		t.Fatalf("after %s: %+v", want[3], p)
	}

	// One key's rows, by id.
	one := walk(s, "/api/keys/bad/"+bad[1]+"/parked?limit=2", rowsOfPage, next)
	if got, sizes := flat(one); !slices.Equal(got, want[3:6]) || !slices.Equal(sizes, []int{2, 1}) {
		t.Fatalf("one key's pages: sizes %v, rows %v", sizes, got)
	}
	if p := ok[parkedPage](s, "GET", "/api/keys/bad/"+bad[1]+"/parked?limit=3", ""); len(p.Rows) != 3 || p.Next == nil || *p.Next != "" {
		t.Fatalf("a page that takes every row: %+v", p)
	}
}

// Past MaxScan keys without a parked row, GET /api/parked answers what it found (nothing) with
// a cursor after the last key it looked at; the next page goes on from there.
func TestParkedScanBound(t *testing.T) {
	if testing.Short() {
		t.Skip("registers more than admin.MaxScan keys")
	}
	s := newSite(t)
	bulk := names("p", admin.MaxScan+5) // "bulk" sorts before orders, and has no parked row
	s.register("bulk", bulk, 0, nil)
	p := ok[parkedPage](s, "GET", "/api/parked", "")
	if len(p.Rows) != 0 || p.Next == nil || *p.Next != "bulk|"+bulk[admin.MaxScan-1]+"|" {
		t.Fatalf("first page: %d rows, next %v", len(p.Rows), p.Next)
	}
	p = ok[parkedPage](s, "GET", "/api/parked?after="+url.QueryEscape(*p.Next), "")
	if len(p.Rows) != 2 || p.Rows[0].Poller != "orders" || p.Next == nil || *p.Next != "" {
		t.Fatalf("second page: %+v", p)
	}
}

// An engine that was stopped answers the routes that act 503 engine_stopped and writes
// nothing; it still reads.
func TestStoppedEngineAnswers503(t *testing.T) {
	s := newSite(t)
	if err := s.eng.Stop(true, time.Second); err != nil {
		t.Fatal(err)
	}
	before := s.dump()
	if code, b := s.do("GET", "/api/keys/orders/-", opsSecret, ""); code != http.StatusOK {
		t.Errorf("a read of a stopped engine: %d %s", code, b)
	}
	for _, r := range actRoutes {
		if code, b := s.do(r.method, r.path, opsSecret, r.body); code != http.StatusServiceUnavailable || codeOf(b) != "engine_stopped" {
			t.Errorf("%s %s on a stopped engine: %d %s", r.method, r.path, code, b)
		}
	}
	sameDump(t, before, s.dump(), "requests to a stopped engine")
}
