package httppoll

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// rfcNow is the instant of RFC 9110's example dates, minus 37 seconds.
var rfcNow = time.Date(1994, 11, 6, 8, 49, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    string
		now  time.Time
		want time.Duration
		ok   bool
	}{
		{"seconds", "120", rfcNow, 120 * time.Second, true},
		{"zero", "0", rfcNow, 0, true},
		{"surrounding space", " 7 ", rfcNow, 7 * time.Second, true},
		{"negative is malformed", "-5", rfcNow, 0, false},
		{"plus sign is malformed", "+5", rfcNow, 0, false},
		{"fraction is malformed", "1.5", rfcNow, 0, false},
		{"word", "abc", rfcNow, 0, false},
		{"empty", "", rfcNow, 0, false},
		{"IMF-fixdate future", "Sun, 06 Nov 1994 08:49:37 GMT", rfcNow, 37 * time.Second, true},
		{"IMF-fixdate now", "Sun, 06 Nov 1994 08:49:00 GMT", rfcNow, 0, true},
		{"IMF-fixdate past", "Sun, 06 Nov 1994 08:48:00 GMT", rfcNow, 0, true},
		{"RFC 850", "Sunday, 06-Nov-94 08:49:37 GMT", rfcNow, 37 * time.Second, true},
		{"RFC 850 past", "Sunday, 06-Nov-94 08:40:00 GMT", rfcNow, 0, true},
		{"RFC 850 century from now", "Tuesday, 01-Jan-69 00:00:30 GMT",
			time.Date(2068, 12, 31, 23, 59, 0, 0, time.UTC), 90 * time.Second, true},
		{"RFC 850 old year stays old", "Sunday, 06-Nov-94 08:49:37 GMT",
			time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 0, true},
		{"asctime", "Sun Nov  6 08:49:37 1994", rfcNow, 37 * time.Second, true},
		{"asctime past", "Sun Nov  6 08:00:00 1994", rfcNow, 0, true},
		{"date with zone offset is malformed", "Sun, 06 Nov 1994 08:49:37 +0100", rfcNow, 0, false},
		{"delay capped", "86401", rfcNow, MaxRetryAfter, true},
		{"delay at cap", "86400", rfcNow, MaxRetryAfter, true},
		{"overflowing delay capped", "99999999999999999999999", rfcNow, MaxRetryAfter, true},
		{"far date capped", "Mon, 06 Nov 1995 08:49:37 GMT", rfcNow, MaxRetryAfter, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tc.v, tc.now)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseRateLimit(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	rl := func(limit, remaining int, reset time.Duration) *watukuytype.RateLimit {
		return &watukuytype.RateLimit{Limit: limit, Remaining: remaining, Reset: reset}
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		want *watukuytype.RateLimit
	}{
		{"none", hdr(), nil},
		// 1. the draft's structured fields
		{"structured with policy", hdr(
			"RateLimit", `"default";r=50;t=30`,
			"RateLimit-Policy", `"default";q=100;w=60`), rl(100, 50, 30*time.Second)},
		{"structured without policy", hdr("RateLimit", `"default";r=50;t=30`), rl(0, 50, 30*time.Second)},
		{"structured token names", hdr(
			"RateLimit", `default;r=1;t=2`,
			"RateLimit-Policy", `default;q=3;w=4`), rl(3, 1, 2*time.Second)},
		{"structured: the widest spacing wins, not the lowest r", hdr(
			"RateLimit", `"burst";r=5;t=1, "daily";r=500;t=80000`), rl(0, 500, 80000*time.Second)},
		{"structured several items take the widest spacing", hdr(
			"RateLimit", `"burst";r=5;t=1, "daily";r=2;t=3600`,
			"RateLimit-Policy", `"burst";q=10;w=1, "daily";q=1000;w=86400`), rl(1000, 2, time.Hour)},
		{"structured several field lines, the longer t spaces wider", hdr(
			"RateLimit", `"a";r=9;t=5`,
			"RateLimit", `"b";r=9;t=50`,
			"RateLimit-Policy", `"a";q=10;w=5, "b";q=20;w=50`), rl(20, 9, 50*time.Second)},
		{"structured policy with other name gives no limit", hdr(
			"RateLimit", `"default";r=4;t=8`,
			"RateLimit-Policy", `"other";q=100;w=60`), rl(0, 4, 8*time.Second)},
		{"structured extra params and quoted commas", hdr(
			"RateLimit", `"a,b;c";r=3;t=9;pk=:cHJva2Vu:`,
			"RateLimit-Policy", `"a,b;c";q=30;w=60;qu="requests"`), rl(30, 3, 9*time.Second)},
		{"structured malformed item skipped", hdr(
			"RateLimit", `"x";r=abc;t=1, "y";r=-1;t=1, "z";r=7`+`, "ok";r=8;t=2`), rl(0, 8, 2*time.Second)},
		{"structured malformed policy quota ignored", hdr(
			"RateLimit", `"default";r=5;t=5`,
			"RateLimit-Policy", `"default";q=lots;w=60`), rl(0, 5, 5*time.Second)},
		{"dictionary form", hdr("RateLimit", "limit=100, remaining=50, reset=30"), rl(100, 50, 30*time.Second)},
		{"dictionary form without limit", hdr("RateLimit", "remaining=0, reset=12"), rl(0, 0, 12*time.Second)},
		{"dictionary form missing reset", hdr("RateLimit", "limit=100, remaining=50"), nil},
		// 2. RateLimit-*
		{"RateLimit-*", hdr("RateLimit-Limit", "100", "RateLimit-Remaining", "99", "RateLimit-Reset", "60"),
			rl(100, 99, time.Minute)},
		{"RateLimit-Limit with policy list", hdr("RateLimit-Limit", "10, 10;w=1", "RateLimit-Remaining", "3",
			"RateLimit-Reset", "1"), rl(10, 3, time.Second)},
		{"RateLimit-* lower-case names", hdr("ratelimit-remaining", "4", "ratelimit-reset", "2"), rl(0, 4, 2*time.Second)},
		// 3. X-RateLimit-*, each reset magnitude
		{"X- delta seconds", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999",
			"X-RateLimit-Reset", "60"), rl(5000, 4999, time.Minute)},
		{"X- delta fraction", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1.5"), rl(0, 1, 1500*time.Millisecond)},
		{"X- delta just under 1e9", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "999999999"),
			rl(0, 1, 999999999*time.Second)},
		{"X- epoch seconds", hdr("X-RateLimit-Remaining", "10", "X-RateLimit-Reset", "1700000090"),
			rl(0, 10, 90*time.Second)},
		{"X- epoch seconds with fraction", hdr("X-RateLimit-Remaining", "10", "X-RateLimit-Reset", "1700000000.250"),
			rl(0, 10, 250*time.Millisecond)},
		{"X- epoch seconds in the past", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1600000000"),
			rl(0, 0, 0)},
		{"X- epoch at 1e9 boundary is an epoch (past)", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1000000000"),
			rl(0, 0, 0)},
		{"X- epoch milliseconds", hdr("X-RateLimit-Remaining", "2", "X-RateLimit-Reset", "1700000001500"),
			rl(0, 2, 1500*time.Millisecond)},
		{"X- epoch milliseconds in the past", hdr("X-RateLimit-Remaining", "2", "X-RateLimit-Reset", "1600000000000"),
			rl(0, 2, 0)},
		{"X-Rate-Limit-* spelling", hdr("X-Rate-Limit-Limit", "900", "X-Rate-Limit-Remaining", "899",
			"X-Rate-Limit-Reset", "1700000900"), rl(900, 899, 15*time.Minute)},
		{"non-canonical map keys", http.Header{"x-ratelimit-remaining": {"5"}, "x-ratelimit-reset": {"10"}},
			rl(0, 5, 10*time.Second)},
		// malformed values are ignored
		{"malformed limit leaves Limit 0", hdr("X-RateLimit-Limit", "many", "X-RateLimit-Remaining", "1",
			"X-RateLimit-Reset", "3"), rl(0, 1, 3*time.Second)},
		{"negative remaining", hdr("X-RateLimit-Remaining", "-1", "X-RateLimit-Reset", "3"), nil},
		{"word reset", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "soon"), nil},
		{"date reset", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "Sun, 06 Nov 1994 08:49:37 GMT"), nil},
		{"exponent reset", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1e3"), nil},
		{"absurd reset", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "99999999999999999999"), nil},
		{"remaining only", hdr("X-RateLimit-Remaining", "1"), nil},
		{"reset only", hdr("RateLimit-Reset", "1"), nil},
		{"empty values", hdr("RateLimit", "", "X-RateLimit-Remaining", "", "X-RateLimit-Reset", ""), nil},
		{"garbage structured field", hdr("RateLimit", `"unterminated;r=1;t=1`), nil},
		// precedence between families
		{"structured beats RateLimit-* and X-", hdr(
			"RateLimit", `"default";r=1;t=10`,
			"RateLimit-Remaining", "2", "RateLimit-Reset", "20",
			"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "30"), rl(0, 1, 10*time.Second)},
		{"RateLimit-* beats X-", hdr(
			"RateLimit-Remaining", "2", "RateLimit-Reset", "20",
			"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "30"), rl(0, 2, 20*time.Second)},
		{"malformed structured falls through", hdr(
			"RateLimit", `"default";r=x;t=y`,
			"RateLimit-Remaining", "2", "RateLimit-Reset", "20"), rl(0, 2, 20*time.Second)},
		{"malformed RateLimit-* falls through to X-", hdr(
			"RateLimit-Remaining", "two", "RateLimit-Reset", "20",
			"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "30"), rl(0, 3, 30*time.Second)},
		{"families are not mixed", hdr(
			"RateLimit-Limit", "100", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "30"), rl(0, 3, 30*time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseRateLimit(tc.h, now)
			switch {
			case got == nil && tc.want == nil:
			case got == nil || tc.want == nil || *got != *tc.want:
				t.Fatalf("ParseRateLimit = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestNextLink(t *testing.T) {
	base, _ := url.Parse("https://api.example.com/v1/items?page=1")
	for _, tc := range []struct {
		name  string
		links []string
		base  *url.URL
		want  string
	}{
		{"none", nil, base, ""},
		{"single absolute", []string{`<https://api.example.com/v1/items?page=2>; rel="next"`}, base,
			"https://api.example.com/v1/items?page=2"},
		{"GitHub style, several in one field", []string{
			`<https://api.example.com/v1/items?page=1>; rel="prev", ` +
				`<https://api.example.com/v1/items?page=3>; rel="next", ` +
				`<https://api.example.com/v1/items?page=9>; rel="last"`}, base,
			"https://api.example.com/v1/items?page=3"},
		{"several Link fields", []string{`</v1/items?page=1>; rel=prev`, `</v1/items?page=2>; rel=next`}, base,
			"https://api.example.com/v1/items?page=2"},
		{"relative path", []string{`</v1/items?page=2>; rel=next`}, base, "https://api.example.com/v1/items?page=2"},
		{"relative query only", []string{`<?page=2>; rel=next`}, base, "https://api.example.com/v1/items?page=2"},
		{"relative sibling", []string{`<other?cursor=abc>; rel="next"`}, base, "https://api.example.com/v1/other?cursor=abc"},
		{"rel list", []string{`<https://x.example/2>; rel="next last"`}, base, "https://x.example/2"},
		{"rel list, next second", []string{`<https://x.example/2>; rel="last  next"`}, base, "https://x.example/2"},
		{"case-insensitive", []string{`<https://x.example/2>; REL="Next"`}, base, "https://x.example/2"},
		{"spaces around =", []string{`<https://x.example/2> ; rel = "next"`}, base, "https://x.example/2"},
		{"comma inside target", []string{`<https://x.example/?ids=1,2,3>; rel="next"`}, base, "https://x.example/?ids=1,2,3"},
		{"quoted param with comma and rel text", []string{
			`<https://x.example/1>; title="a, b; rel=next"; rel="prev", <https://x.example/2>; rel="next"`}, base,
			"https://x.example/2"},
		{"first rel wins", []string{`<https://x.example/1>; rel="prev"; rel="next", <https://x.example/2>; rel=next`}, base,
			"https://x.example/2"},
		{"no next", []string{`<https://x.example/1>; rel="prev", <https://x.example/9>; rel="last"`}, base, ""},
		{"nextpage is not next", []string{`<https://x.example/1>; rel="nextpage"`}, base, ""},
		{"malformed member skipped", []string{`garbage; rel=next, <https://x.example/2>; rel=next`}, base, "https://x.example/2"},
		{"unterminated target", []string{`<https://x.example/2; rel=next`}, base, ""},
		{"nil base absolute", []string{`<https://x.example/2>; rel=next`}, nil, "https://x.example/2"},
		{"nil base relative", []string{`</2>; rel=next`}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tc.links {
				h.Add("Link", l)
			}
			if got := NextLink(h, tc.base); got != tc.want {
				t.Fatalf("NextLink(%q) = %q; want %q", tc.links, got, tc.want)
			}
		})
	}
}

func TestResetValueNeverOverflows(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, v := range []string{"0", "999999999.999999999", "1000000000", "999999999999", "1000000000000", "999999999999999"} {
		d, ok := resetValue(v, now)
		if !ok || d < 0 {
			t.Errorf("resetValue(%q) = %v, %v", v, d, ok)
		}
	}
	if _, ok := resetValue(strconv.Itoa(1e16), now); ok {
		t.Error("1e16 accepted")
	}
}
