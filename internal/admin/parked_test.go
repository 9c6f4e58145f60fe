package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytype"
)

// parked retry with one id three times: the row is released once and its event goes back to
// delivery once (one held event, released), and is delivered once.
func TestParkedRetryDuplicateIDs(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	rows := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/orders/-/parked", "").Rows
	if len(rows) != 2 {
		t.Fatalf("parked: %+v", rows)
	}
	id := rows[0].ID
	ids, _ := json.Marshal(map[string][]string{"ids": {id, id, id}})
	res := ok[struct {
		Released int
		Keys     []struct{ IDs []string }
	}](s, "POST", "/api/keys/orders/-/parked/retry", string(ids))
	back := s.b.Client.XLen(ctx, "wk:{orders|}:outbox").Val() + s.b.Client.ZCard(ctx, "wk:{orders|}:held").Val()
	if res.Released != 1 || back != 1 {
		t.Errorf("retry of one row named three times: released %d, %d events back to delivery; want 1 and 1", res.Released, back)
	}
	s.healthy.Store(true)
	rep, err := s.eng.Tick(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delivered != 1 {
		t.Errorf("the retried event was delivered %d times, want 1", rep.Delivered)
	}
}

// Two operators discard the same parked row at once: one discards it, the others are told it is
// gone (404) or already done; none answers 500 (the engine finding the row gone under the
// lease).
func TestParkedConcurrentDiscard(t *testing.T) {
	s := newSite(t)
	rows := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/orders/-/parked", "").Rows
	body := `{"ids": ["` + rows[0].ID + `"]}`
	var wg sync.WaitGroup
	codes := make([]int, 8)
	answers := make([][]byte, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], answers[i] = s.do("POST", "/api/keys/orders/-/parked/discard", opsSecret, body)
		}()
	}
	wg.Wait()
	done := 0
	for i, c := range codes {
		switch {
		case c == 200:
			done++
		case c >= 500:
			t.Errorf("a concurrent discard of the same row: %d %s", c, answers[i])
		}
	}
	if done == 0 {
		t.Errorf("no discard succeeded: %v", codes)
	}
	if n := s.b.Client.HLen(context.Background(), "wk:{orders|}:parked").Val(); n != 1 {
		t.Errorf("%d parked rows left, want 1", n)
	}
}

// parked retry of an invalid item that still fails the poller's checks is the operator's
// expected outcome, not a server fault: 409 with the reason, the row kept.
func TestParkedRetryStillInvalid(t *testing.T) {
	s := newSite(t)
	api := fakeapi.New()
	api.Put("good", nil)
	api.Put("bad", map[string]any{"bad": true})
	var strict atomic.Bool
	strict.Store(true)
	s.addPoller(watukuytype.Poller{Name: "strict", Validate: func(item json.RawMessage) error {
		if strict.Load() && strings.Contains(string(item), `"bad":true`) {
			return errors.New("bad is true")
		}
		return nil
	}}, api)
	rows := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/strict/-/parked?kind=invalid", "").Rows
	if len(rows) != 1 {
		t.Fatalf("parked invalid: %+v", rows)
	}
	e := s.fails("POST", "/api/keys/strict/-/parked/retry", opsSecret, `{"ids": ["`+rows[0].ID+`"]}`, 409, "conflict")
	if !strings.Contains(e.Message, "still invalid") || !strings.Contains(e.Message, "bad is true") {
		t.Errorf("retry of a still invalid row: %+v", e)
	}
	if n := s.inspect("strict", "").ParkedInvalid; n != 1 {
		t.Errorf("%d invalid rows parked after a refused retry, want 1", n)
	}
	strict.Store(false)
	if res := ok[struct{ Released int }](s, "POST", "/api/keys/strict/-/parked/retry", `{"ids": ["`+rows[0].ID+`"]}`); res.Released != 1 {
		t.Errorf("retry once valid: %+v", res)
	}
}

// parked retry names ids of another key, thousands of ids, empty ids: each is a 404 naming
// the id (or 400), nothing is released, and the answer comes at once. The API's default body
// limit (64 KiB) lets through about 1,500 ids.
func TestParkedForeignAndManyIDs(t *testing.T) {
	s := newSite(t)
	set, _ := admintoken.NewSet([]admintoken.Token{{ID: "ops", Secret: opsSecret}}...)
	big := httptest.NewServer(admin.NewAPI(admin.Options{Engine: s.eng, Tokens: set, Logger: zerolog.New(s.log)}))
	defer big.Close()
	bs := &site{t: t, srv: big, b: s.b, eng: s.eng, log: s.log}
	orders := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/orders/-/parked", "").Rows
	before := s.dump()
	body := func(ids []string) string { b, _ := json.Marshal(map[string][]string{"ids": ids}); return string(b) }
	bs.fails("POST", "/api/keys/shops/eu/parked/retry", opsSecret, body([]string{orders[0].ID}), 404, "not_found")
	bs.fails("POST", "/api/keys/shops/eu/parked/discard", opsSecret, body([]string{orders[0].ID}), 404, "not_found")
	many := make([]string, 1500)
	for i := range many {
		many[i] = fmt.Sprintf("ev_%032d", i)
	}
	start := time.Now()
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, body(many), 404, "not_found")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, body(append([]string{orders[0].ID}, many...)), 404, "not_found")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, body([]string{""}), 404, "not_found")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, `{"ids": null}`, 400, "bad_request")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, `{"ids": [1]}`, 400, "bad_request")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("thousands of ids took %v", d)
	}
	sameDump(t, before, s.dump(), "refused releases")
	// The same known id 1,500 times is one row released once.
	same := make([]string, 1500)
	for i := range same {
		same[i] = orders[1].ID
	}
	res := ok[struct{ Released int }](bs, "POST", "/api/keys/orders/-/parked/discard", body(same))
	if res.Released != 1 || s.inspect("orders", "").Parked != 1 {
		t.Errorf("one id 1500 times: released %d, %d parked left", res.Released, s.inspect("orders", "").Parked)
	}
}
