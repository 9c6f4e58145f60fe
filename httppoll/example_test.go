package httppoll_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/watukuytype"
)

func ExampleParseRateLimit() {
	now := time.Unix(1_700_000_000, 0)

	// The IETF draft's structured fields: the most restrictive policy wins.
	h := http.Header{}
	h.Set("RateLimit", `"burst";r=40;t=1, "daily";r=3;t=7200`)
	h.Set("RateLimit-Policy", `"burst";q=50;w=1, "daily";q=5000;w=86400`)
	fmt.Printf("%+v\n", *httppoll.ParseRateLimit(h, now))

	// GitHub style: X-RateLimit-Reset is an epoch in seconds.
	h = http.Header{}
	h.Set("X-RateLimit-Limit", "5000")
	h.Set("X-RateLimit-Remaining", "4999")
	h.Set("X-RateLimit-Reset", "1700000900")
	fmt.Printf("%+v\n", *httppoll.ParseRateLimit(h, now))

	// Nothing usable.
	h = http.Header{}
	h.Set("X-RateLimit-Remaining", "plenty")
	fmt.Println(httppoll.ParseRateLimit(h, now))
	// Output:
	// {Limit:5000 Remaining:3 Reset:2h0m0s}
	// {Limit:5000 Remaining:4999 Reset:15m0s}
	// <nil>
}

func ExampleNextLink() {
	base, _ := url.Parse("https://api.example.com/v1/items?page=1")
	h := http.Header{}
	h.Add("Link", `</v1/items?page=2>; rel="next", </v1/items?page=9>; rel="last"`)
	fmt.Println(httppoll.NextLink(h, base))
	// Output: https://api.example.com/v1/items?page=2
}

func ExampleRedactURL() {
	fmt.Println(httppoll.RedactURL("https://api.example.com/v1/items?api_key=s3cr3t&page=2"))
	// Output: https://api.example.com/v1/items?api_key=[redacted]&page=2
}

func ExampleClient_Do() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v7"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if r.URL.Query().Get("since") == "later" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("ETag", `"v7"`)
		_, _ = io.WriteString(w, `{"items":[]}`)
	}))
	defer srv.Close()

	c := &httppoll.Client{Timeout: 10 * time.Second}
	key := watukuytype.Key{Poller: "orders", Partition: "t_1"}
	ctx := context.Background()

	resp, err := c.Do(ctx, httppoll.Request{Key: key, URL: srv.URL + "/items"})
	fmt.Println(resp.StatusCode, string(resp.Body), resp.ETag, err)

	resp, err = c.Do(ctx, httppoll.Request{Key: key, URL: srv.URL + "/items", ETag: resp.ETag})
	fmt.Println(resp.StatusCode, resp.NotModified, err)

	_, err = c.Do(ctx, httppoll.Request{Key: key, URL: srv.URL + "/items", Query: url.Values{"since": {"later"}}})
	var he *watukuytype.HTTPError
	if errors.As(err, &he) {
		fmt.Println(he.StatusCode, he.RetryAfter)
	}
	// Output:
	// 200 {"items":[]} "v7" <nil>
	// 304 true <nil>
	// 429 30s
}
