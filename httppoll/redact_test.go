package httppoll

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"
)

func TestRedact(t *testing.T) {
	in := http.Header{
		"Authorization":       {"Bearer s3cr3t"},
		"Proxy-Authorization": {"Basic czNjcjN0"},
		"Cookie":              {"session=s3cr3t"},
		"Set-Cookie":          {"a=1", "b=2"},
		"X-Api-Key":           {"s3cr3t"},
		"X-Auth-Token":        {"s3cr3t"},
		"X-Client-Secret":     {"s3cr3t"},
		"X-Amz-Signature":     {"s3cr3t"},
		"X-Password":          {"s3cr3t"},
		"Accept":              {"application/json"},
		"If-None-Match":       {`"v1"`},
	}
	orig := in.Clone()
	got := Redact(in)
	want := http.Header{
		"Authorization":       {redacted},
		"Proxy-Authorization": {redacted},
		"Cookie":              {redacted},
		"Set-Cookie":          {redacted, redacted},
		"X-Api-Key":           {redacted},
		"X-Auth-Token":        {redacted},
		"X-Client-Secret":     {redacted},
		"X-Amz-Signature":     {redacted},
		"X-Password":          {redacted},
		"Accept":              {"application/json"},
		"If-None-Match":       {`"v1"`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Redact =\n%v\nwant\n%v", got, want)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Fatal("Redact modified its argument")
	}
	got["Accept"][0] = "changed"
	if in.Get("Accept") != "application/json" {
		t.Fatal("Redact shares value slices with its argument")
	}
	if Redact(nil) != nil {
		t.Fatal("Redact(nil) != nil")
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://api.example.com/v1/items?page=2&limit=10", "https://api.example.com/v1/items?page=2&limit=10"},
		{"https://api.example.com/v1?api_key=s3cr3t&page=2", "https://api.example.com/v1?api_key=[redacted]&page=2"},
		{"https://x.example/?access_token=s3cr3t&TOKEN=s3cr3t&Secret=s3cr3t&sig=s3cr3t&X-Amz-Signature=s3cr3t&password=s3cr3t&auth=s3cr3t&key=s3cr3t&q=ok",
			"https://x.example/?access_token=[redacted]&TOKEN=[redacted]&Secret=[redacted]&sig=[redacted]&X-Amz-Signature=[redacted]&password=[redacted]&auth=[redacted]&key=[redacted]&q=ok"},
		{"https://x.example/?api%5Fkey=s3cr3t", "https://x.example/?api%5Fkey=[redacted]"},
		{"https://x.example/?token", "https://x.example/?token=[redacted]"},
		{"https://user:s3cr3t@x.example/p", "https://[redacted]@x.example/p"},
		{"https://sk_live_s3cr3t@x.example/p", "https://[redacted]@x.example/p"},
		{"https://x.example/cb#access_token=s3cr3t", "https://x.example/cb#[redacted]"},
		{"http://x.example:8080", "http://x.example:8080"},
		{"https://x.example/%zz", "[invalid URL]"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrubSecrets(t *testing.T) {
	u, _ := url.Parse("https://x.example/?api_key=s3cr3t%2Bplus&page=2&token=abc")
	h := http.Header{"Authorization": {"Bearer b34r3r"}, "Accept": {"application/json"}}
	body := `{"error":"bad key s3cr3t+plus (raw s3cr3t%2Bplus), header Bearer b34r3r, token b34r3r, page 2, abc, application/json"}`
	got := scrub(body, secretsOf(u, h))
	want := `{"error":"bad key [redacted] (raw [redacted]), header [redacted], token [redacted], page 2, abc, application/json"}`
	if got != want {
		t.Fatalf("scrub =\n%s\nwant\n%s", got, want)
	}
}
