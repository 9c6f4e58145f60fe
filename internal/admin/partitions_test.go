package admin_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/statehash"
)

// partitions add of a partition that exists is the operator's mistake, a conflict: 409, not
// 500 (the engine reports it as a *ConflictError).
func TestPartitionAddExisting(t *testing.T) {
	s := newSite(t)
	before := s.dump()
	e := s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "eu"}`, 409, "conflict")
	if !strings.Contains(e.Message, "eu") || !strings.Contains(e.Message, "resume") {
		t.Errorf("add existing: %+v", e)
	}
	sameDump(t, before, s.dump(), "partitions add of an existing partition")
	// A removed one too (resume brings it back); a deleted one comes back.
	ok[any](s, "DELETE", "/api/pollers/shops/partitions/eu", "")
	s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "eu"}`, 409, "conflict")
	ok[any](s, "DELETE", "/api/pollers/shops/partitions/us?purge=true", "")
	if st := ok[keyStatus](s, "POST", "/api/pollers/shops/partitions", `{"partition": "us"}`); st.Partition != "us" {
		t.Errorf("add a deleted partition: %+v", st)
	}
}

// A deleted partition of the config comes back empty with partitions add: every action on it
// is a 404 naming partitions add and writes nothing into its deletion mark (no pause, cursor or
// backfill to come back with), and a poller-wide action skips it.
func TestDeletedPartitionActions(t *testing.T) {
	s := newSite(t)
	const eu = "wk:{shops|eu}:state"
	ok[any](s, "DELETE", "/api/pollers/shops/partitions/eu?purge=true", "")
	for _, r := range [][3]string{
		{"POST", "/api/keys/shops/eu/pause", ""},
		{"POST", "/api/keys/shops/eu/resume", ""},
		{"POST", "/api/keys/shops/eu/trigger", ""},
		{"POST", "/api/keys/shops/eu/reset-cursor", `{"cursor": "999"}`},
		{"POST", "/api/keys/shops/eu/backfill", `{"from": "5"}`},
		{"POST", "/api/keys/shops/eu/parked/retry", `{"all": true}`},
		{"POST", "/api/keys/shops/eu/parked/discard", `{"all": true}`},
		{"DELETE", "/api/pollers/shops/partitions/eu", ""},
	} {
		before, state := s.dump(), s.unfenced(eu)
		code, _, b := s.raw(r[0], r[1], r[2], func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		if code != 404 || codeOf(b) != "not_found" || !strings.Contains(string(b), "partitions add") {
			t.Errorf("%s %s on a deleted partition: %d %.300s", r[0], r[1], code, b)
		}
		// The engine refuses before it writes: pause, resume and trigger on their look at the
		// state (pause again in its script), the others at a Begin that takes no lease.
		after := s.dump()
		delete(before, eu)
		delete(after, eu)
		sameDump(t, before, after, r[0]+" "+r[1]+" on a deleted partition")
		if now := s.unfenced(eu); !maps.Equal(now, state) {
			t.Errorf("%s %s on a deleted partition wrote its state: %v (was %v)", r[0], r[1], now, state)
		}
	}
	for _, op := range []string{"pause", "trigger", "resume", "pause"} {
		res := ok[struct{ Keys []keyStatus }](s, "POST", "/api/pollers/shops/"+op, "")
		if len(res.Keys) != 1 || res.Keys[0].Partition != "us" {
			t.Errorf("pollers/shops/%s acted on %+v", op, res.Keys)
		}
	}
	if st := ok[keyStatus](s, "POST", "/api/pollers/shops/partitions", `{"partition": "eu"}`); st.Status != "idle" {
		t.Errorf("the deleted partition came back %q", st.Status)
	}
	ki := s.inspect("shops", "eu")
	if ki.Paused || ki.Cursor != "" || ki.Backfill != nil {
		t.Errorf("the deleted partition came back with state: paused %v, cursor %q, backfill %+v", ki.Paused, ki.Cursor, ki.Backfill)
	}
	if _, err := s.eng.Tick(context.Background(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if ki := s.inspect("shops", "eu"); ki.Items != 2 {
		t.Errorf("the partition added again knows %d items, want 2 (every item, from the beginning)", ki.Items)
	}
}

// An action queued behind a partitions delete on the key's lease (reset-cursor here; backfill,
// replay, parked retry/discard and partitions remove wait the same way) writes nothing into the
// deletion mark: the partition added again comes back empty, not past cursor "999".
func TestDeleteRacesQueuedAction(t *testing.T) {
	s := newSite(t)
	for round := range 20 {
		var wg sync.WaitGroup
		var delCode, resetCode int
		wg.Add(2)
		go func() {
			defer wg.Done()
			delCode, _ = s.do("DELETE", "/api/pollers/shops/partitions/eu?purge=true", opsSecret, "")
		}()
		go func() {
			defer wg.Done()
			resetCode, _ = s.do("POST", "/api/keys/shops/eu/reset-cursor", opsSecret, `{"cursor": "999"}`)
		}()
		wg.Wait()
		if delCode != 200 {
			t.Fatalf("delete: %d", delCode)
		}
		ok[any](s, "POST", "/api/pollers/shops/partitions", `{"partition": "eu"}`)
		if ki := s.inspect("shops", "eu"); ki.Cursor != "" || ki.Paused {
			t.Fatalf("round %d: reset-cursor answered %d, and the partition deleted and added again came back with cursor %q, paused %v: not empty",
				round, resetCode, ki.Cursor, ki.Paused)
		}
	}
}

// unfenced is a state hash without its fences (the lease's fields and the incarnation).
func (s *site) unfenced(key string) map[string]string {
	s.t.Helper()
	h := s.b.Client.HGetAll(context.Background(), key).Val()
	maps.DeleteFunc(h, func(f, _ string) bool { return statehash.IsLeaseField(f) || f == statehash.Incarnation })
	return h
}
