package app

import (
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A Redis URL without a scheme is refused with a URL to write instead, which is itself a good
// URL: the input with redis:// when it is a host[:port][/db], the input with its scheme
// mended, or an example. The password stays out of the message.
func TestCheckRedisScheme(t *testing.T) {
	for _, ok := range []string{"redis://localhost:6379", "rediss://h:6380/1", "unix:///tmp/redis.sock", "redis+cluster://a:1?addr=b:2"} {
		if err := checkRedisScheme(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tc := range []struct{ url, write string }{ // write "": the example
		{"localhost:6379", "redis://localhost:6379"},
		{"localhost", "redis://localhost"},
		{"redis:6379", "redis://redis:6379"}, // a host named redis
		{"redis-primary.internal:6380/3", "redis://redis-primary.internal:6380/3"},
		{"10.0.0.5:6379/2", "redis://10.0.0.5:6379/2"},
		{"[::1]:6379", "redis://[::1]:6379"},
		{":secret@10.0.0.5:6379/2", "redis://[redacted]@10.0.0.5:6379/2"},
		{"redis//bad", "redis://bad"},
		{"redis:/localhost:6379", "redis://localhost:6379"},
		{"redis:localhost:6379/1", "redis://localhost:6379/1"},
		{"rediss//cache.example.com:6380", "rediss://cache.example.com:6380"},
		{"unix:/tmp/redis.sock", "unix:///tmp/redis.sock"},
		{"/var/run/redis.sock", "unix:///var/run/redis.sock"},
		{"redis//bad//path", ""},
		{"redis//", ""},
		{"6379", ""},
		{"localhost:port", ""},
		{"localhost:99999", ""},
		{"localhost:6379/db", ""},
		{"host name:6379", ""},
		{"localhost:6379?db=2", ""},
		{"", ""},
	} {
		err := checkRedisScheme(tc.url)
		if err == nil {
			t.Errorf("%q: accepted", tc.url)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "secret") || !strings.Contains(msg, "no scheme") {
			t.Errorf("%q: %s", tc.url, msg)
		}
		re := `write (\S+) \(redis://host:port\[/db\]\)`
		want := tc.write
		if want == "" { // no URL to make of it: the example
			want, re = exampleRedisURL, `is no host:port: write redis://host:port\[/db\] \(e\.g\. (\S+)\)`
		}
		m := regexp.MustCompile(re).FindStringSubmatch(msg)
		if m == nil || m[1] != want {
			t.Errorf("%q: %s\nwant it to say write %s", tc.url, msg, want)
			continue
		}
		if _, err := redis.ParseURL(strings.ReplaceAll(m[1], "[redacted]", ":x")); err != nil {
			t.Errorf("%q: the suggested %s is no good URL: %v", tc.url, m[1], err)
		}
	}
}
