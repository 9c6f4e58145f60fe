package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/health"
)

// Path tricks: escaped slashes, dots and odd bytes in {poller} and {partition} name no other
// key, "-" is only the unpartitioned key, very long names are refused; nothing is written.
func TestPathTricks(t *testing.T) {
	s := newSite(t)
	long := strings.Repeat("a", 200_000)
	for _, p := range []string{
		"/api/keys/shops%2Feu/-/pause",
		"/api/keys/shops/eu%2F..%2Fus/pause",
		"/api/keys/shops/eu%2Fpause/pause",
		"/api/keys/shops%7Ceu/-/pause",
		"/api/keys/shops/eu%7D/pause",
		"/api/keys/shops/%7Bshops%7Ceu%7D/pause",
		"/api/keys/shops/-/pause",
		"/api/keys/shops/%2D/pause",
		"/api/keys/shops/eu%00/pause",
		"/api/keys/shops/%FF%FE/pause",
		"/api/keys/shops/eu*/pause",
		"/api/keys/sh*/eu/pause",
		"/api/keys/" + long + "/-/pause",
		"/api/keys/shops/" + long + "/pause",
		"/api/keys/shops/eu/pause/",
		"/api/pollers/shops%2F..%2Forders/pause",
		"/api/pollers/shops/partitions/eu%2F..%2Fus?purge=true",
	} {
		before := s.dump()
		code, _, b := s.raw("POST", p, "", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) })
		if strings.Contains(p, "partitions/") {
			code, _, b = s.raw("DELETE", p, "", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) })
		}
		if code == 200 || code >= 500 {
			t.Errorf("%.80s: %d %.300s", p, code, b)
		}
		sameDump(t, before, s.dump(), fmt.Sprintf("%.80s", p))
	}
	// A long or odd partition given in a body is refused as a field, not stored.
	for _, name := range []string{strings.Repeat("p", 129), "-", "a/b", "a|b", "a}b", "{x}", "\xff\xfe", "a b", "", "%2F"} {
		body, _ := json.Marshal(map[string]string{"partition": name})
		before := s.dump()
		if e := s.fails("POST", "/api/pollers/shops/partitions", opsSecret, string(body), 400, "bad_request"); e.Field != "partitions" && e.Field != "partition" {
			t.Errorf("%q: field %q", name, e.Field)
		}
		sameDump(t, before, s.dump(), fmt.Sprintf("partitions add %q", name))
	}
}

// A partition the API adds, the API can address: "." and ".." (a literal path segment is
// cleaned away) escaped as %2E name the partition, through the API's own mux and through the
// listener's (health.Server), for inspect, pause and delete.
func TestDotPartitionReachableEscaped(t *testing.T) {
	s := newSite(t)
	h := health.Server{API: s.srv.Config.Handler}
	outer := httptest.NewServer(h.Handler())
	defer outer.Close()
	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) }
	for _, name := range []string{".", ".."} {
		body, _ := json.Marshal(map[string]string{"partition": name})
		if code, _, b := s.raw("POST", "/api/pollers/shops/partitions", string(body), auth); code != 200 {
			t.Fatalf("add %q: %d %s", name, code, b)
		}
		esc := strings.ReplaceAll(name, ".", "%2E")
		for _, base := range []*httptest.Server{s.srv, outer} {
			ss := &site{t: t, srv: base, b: s.b}
			if code, _, b := ss.raw("GET", "/api/keys/shops/"+esc, "", auth); code != 200 || !strings.Contains(string(b), `"partition": "`+name+`"`) {
				t.Errorf("inspect %q as %s: %d %.200s", name, esc, code, b)
			}
		}
		if code, _, b := s.raw("POST", "/api/keys/shops/"+esc+"/pause", "", auth); code != 200 || !s.pausedInRedis("shops", name) {
			t.Errorf("pause %q: %d %.200s", name, code, b)
		}
		if code, _, b := s.raw("DELETE", "/api/pollers/shops/partitions/"+esc+"?purge=true", "", auth); code != 200 {
			t.Errorf("delete %q: %d %.200s", name, code, b)
		}
	}
}

// The 404 of a path no endpoint takes lists the endpoints in known, and sends the client to no
// other 404 (GET /api/ is no endpoint).
func TestUnknownPathNamesEndpoints(t *testing.T) {
	s := newSite(t)
	for _, p := range []string{"/api/", "/api/nothing", "/api/keys/orders"} {
		e := s.fails("GET", p, opsSecret, "", 404, "not_found")
		if strings.Contains(e.Message, "GET /api/ lists") || !slices.Contains(e.Known, "GET /api/whoami") ||
			!slices.Contains(e.Known, "DELETE /api/pollers/{poller}/partitions/{partition}") {
			t.Errorf("GET %s: %+v", p, e)
		}
	}
}
